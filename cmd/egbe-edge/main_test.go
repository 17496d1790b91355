package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/edge"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// bin is the egbe-edge binary these tests run, built once.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "egbe-edge-cmd-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "egbe-edge")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		os.Stderr.Write(out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cleanEnv is this process's environment without EGBE_* settings, plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EGBE_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// runBin runs the binary to completion: exit code, stdout, stderr.
func runBin(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// TestHelp: --help exits 0 and says what the program is, every setting
// with its variable, the subcommands and the pages.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"--http", ":1", "--help"}} {
		code, out, errOut := runBin(t, nil, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d, stderr %s", args, code, errOut)
		}
		for _, want := range []string{"the network edge of the egbe multiplayer world", "Usage:",
			"egbe-edge policy check [FILE]", "egbe-edge prestop", "egbe-edge operator-token", "--version", "--config FILE  (EGBE_CONFIG)",
			"Pages", "/queue/", "/pxstream/", "/ops/", "POST /v6/dev/token", "Exit codes"} {
			if !strings.Contains(out, want) {
				t.Errorf("%v: help lacks %q", args, want)
			}
		}
		for _, s := range edge.SettingDocs() {
			line := ""
			for _, l := range strings.Split(out, "\n") {
				if s.Flag != "" && strings.HasPrefix(l, "  --"+s.Flag+" ") || s.Flag != "" && l == "  --"+s.Flag ||
					s.Flag == "" && s.Env != "" && strings.HasPrefix(l, "  "+s.Env+" ") ||
					s.Flag == "" && s.Env == "" && strings.HasPrefix(l, "  file: "+s.Key) {
					line = l
				}
			}
			if line == "" {
				t.Errorf("%v: no help line for %+v", args, s)
				continue
			}
			if s.Env != "" && !strings.Contains(line, s.Env) {
				t.Errorf("help line %q does not name %s", line, s.Env)
			}
			if s.Key != "" && !strings.Contains(line, "file: "+s.Key) {
				t.Errorf("help line %q does not name the file key %s", line, s.Key)
			}
		}
	}
}

// TestVersion: --version exits 0 with the build information.
func TestVersion(t *testing.T) {
	code, out, _ := runBin(t, nil, "--version")
	if code != 0 || !strings.HasPrefix(out, "egbe-edge ") || !strings.Contains(out, runtime.Version()) || !strings.Contains(out, runtime.GOOS+"/"+runtime.GOARCH) {
		t.Fatalf("--version: exit %d %q", code, out)
	}
}

// TestBadConfigExitCodes: a bad flag or value is exit 2 with a pointer to
// --help; a prod edge with a placeholder secret does not start.
func TestBadConfigExitCodes(t *testing.T) {
	code, _, errOut := runBin(t, nil, "--no-such-flag")
	if code != 2 || !strings.Contains(errOut, "--help") {
		t.Fatalf("bad flag: exit %d, %q", code, errOut)
	}
	code, _, errOut = runBin(t, nil, "--log-format", "xml", "--http", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	if code != 2 || !strings.Contains(errOut, "--log-format") {
		t.Fatalf("bad log format: exit %d, %q", code, errOut)
	}
	code, _, errOut = runBin(t, []string{"EGBE_JWT_SECRET=REPLACE-ME-openssl-rand-base64-48", "EGBE_TURN="}, "--mode", "prod", "--tls-cert", "c", "--tls-key", "k")
	if code != 2 || !strings.Contains(errOut, "EGBE_JWT_SECRET: not a random secret") {
		t.Fatalf("placeholder secret: exit %d, %q", code, errOut)
	}
}

// edgeProc is a running egbe-edge and its JSON log lines.
type edgeProc struct {
	cmd   *exec.Cmd
	lines chan map[string]any
	done  chan error
	seen  []map[string]any
}

func startBin(t *testing.T, env []string, args ...string) *edgeProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--log-format", "json", "--http", "127.0.0.1:0", "--https", "127.0.0.1:0",
		"--ice-udp", "127.0.0.1:0", "--streamer-ws", "127.0.0.1:0", "--player-ws", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--turn", "127.0.0.1:0", "--drain-window", "100ms"}, args...)...)
	cmd.Env = cleanEnv(env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &edgeProc{cmd: cmd, lines: make(chan map[string]any, 1024), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.lines <- m
			}
		}
		close(p.lines)
	}()
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitLine reads log lines until one satisfies match.
func (p *edgeProc) waitLine(t *testing.T, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case m, ok := <-p.lines:
			if !ok {
				t.Fatalf("the edge's log ended before %s; saw %v", what, p.seen)
			}
			p.seen = append(p.seen, m)
			if match(m) {
				return m
			}
		case <-deadline:
			t.Fatalf("no %s within 30 s; saw %v", what, p.seen)
		}
	}
}

// TestStartupAndShutdownLines: start-up prints one line per listener and
// one per page with its URL; SIGTERM logs the drain and the stop, exit 0.
func TestStartupAndShutdownLines(t *testing.T) {
	p := startBin(t, nil)
	listeners := map[string]string{}
	pages := map[string]string{}
	p.waitLine(t, "every page line", func(m map[string]any) bool {
		switch m["msg"] {
		case "listening":
			listeners[m["listener"].(string)] = m["addr"].(string)
		case "page":
			if u, err := url.Parse(m["url"].(string)); err == nil {
				pages[u.Path+"@"+u.Host] = u.String()
			}
		}
		return len(pages) >= 6
	})
	for _, l := range []string{"http", "https", "http3", "ice", "streamer-ws", "player-ws", "turn", "admin"} {
		if listeners[l] == "" {
			t.Errorf("no listening line for %s: %v", l, listeners)
		}
	}
	for path, listener := range map[string]string{"/": "http", "/queue/": "http", "/pxstream/": "http", "/ops/": "admin", "/v6/dev/token": "http"} {
		if _, ok := pages[path+"@"+listeners[listener]]; !ok {
			t.Errorf("no page line for %s on the %s listener (%s): %v", path, listener, listeners[listener], pages)
		}
	}
	// The pages answer where the lines say.
	for _, u := range pages {
		if strings.HasSuffix(u, "/v6/dev/token") {
			continue
		}
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", u, resp.StatusCode)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitLine(t, "the draining line", func(m map[string]any) bool { return strings.HasPrefix(m["msg"].(string), "draining") })
	p.waitLine(t, "the stopped line", func(m map[string]any) bool { return m["msg"] == "stopped" })
	if err := <-p.done; err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

// TestLogLevel: --log-level warn keeps the info lines out.
func TestLogLevel(t *testing.T) {
	p := startBin(t, nil, "--log-level", "warn")
	// The dev secret's warning is the first warn line; no info line may
	// come before or after it while the edge starts.
	p.waitLine(t, "the dev secret warning", func(m map[string]any) bool {
		if m["level"] == "INFO" {
			t.Fatalf("info line at --log-level warn: %v", m)
		}
		return m["level"] == "WARN" && strings.Contains(m["msg"].(string), "EGBE_JWT_SECRET")
	})
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	for m := range p.lines {
		p.seen = append(p.seen, m)
		if m["level"] == "INFO" {
			t.Fatalf("info line at --log-level warn: %v", m)
		}
	}
	if err := <-p.done; err != nil {
		t.Fatalf("%v; log %v", err, p.seen)
	}
}

// TestPprofCmdlineRedactsRedisPassword: the admin listener's
// /debug/pprof/cmdline never shows --redis-url's password.
func TestPprofCmdlineRedactsRedisPassword(t *testing.T) {
	addr, stop := redistest.Start(t)
	defer stop()
	const pw = "s3cret-redis-pw"
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.ConfigSet(context.Background(), "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	p := startBin(t, nil, "--redis-url", "redis://:"+pw+"@"+addr+"/0")
	admin := p.waitLine(t, "the admin listener", func(m map[string]any) bool { return m["msg"] == "listening" && m["listener"] == "admin" })
	base := "http://" + admin["addr"].(string)
	// The edge reached Redis with the password: it is ready.
	testwait.Within(t, 30*time.Second, "the edge to get ready on the password-protected Redis", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	resp, err := http.Get(base + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || bytes.Contains(body, []byte(pw)) || !bytes.Contains(body, []byte("redis://:xxxxx@"+addr+"/0")) {
		t.Fatalf("cmdline %d %q", resp.StatusCode, body)
	}
}

// TestOperatorTokenCommand: operator-token mints a token the fleet's
// secret verifies, with the operator role; without the secret it refuses.
func TestOperatorTokenCommand(t *testing.T) {
	const secret = "mJ4vT9qZ2xL7cN1rB8wK5sD0fH3gY6pA"
	code, out, errOut := runBin(t, []string{"EGBE_JWT_SECRET=" + secret}, "operator-token", "--sub", "alice", "--ttl", "1h")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	s, err := auth.New([]byte(secret), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.VerifyAccess(strings.TrimSpace(out))
	if err != nil || a.Subject != "alice" || !a.HasRole(auth.RoleOperator) || time.Until(a.ExpiresAt) > time.Hour+time.Minute {
		t.Fatalf("token %q: %+v %v", out, a, err)
	}
	if code, _, errOut := runBin(t, nil, "operator-token"); code != 2 || !strings.Contains(errOut, "EGBE_JWT_SECRET") {
		t.Fatalf("without the secret: exit %d %q", code, errOut)
	}
}
