package epictest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/signalling"
	"github.com/oshun/egbe-edge/signalling/matchmaker"
	"github.com/oshun/egbe-edge/signalling/streamer"
)

const webDir = "../../web"

// tools fails the test (never skips) when node, chromium or the npm
// packages are missing.
func tools(t *testing.T) (node string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required for the Epic frontend test: %v", err)
	}
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("chromium is required for the Epic frontend test: %v", err)
	}
	for _, p := range []string{"node_modules/.bin/esbuild", "node_modules/playwright-core", "node_modules/@epicgames-ps/lib-pixelstreamingfrontend-ue5.5"} {
		if _, err := os.Stat(filepath.Join(webDir, p)); err != nil {
			t.Fatalf("web/%s missing (run npm ci in web/): %v", p, err)
		}
	}
	return node
}

var (
	bundleOnce sync.Once
	bundleDir  string
	bundleErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if bundleDir != "" {
		os.RemoveAll(bundleDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// bundle builds web/epic/main.js with Epic's frontend into a temp dir (once
// per test binary) and serves it.
func bundle(t *testing.T) *httptest.Server {
	t.Helper()
	bundleOnce.Do(func() { bundleDir, bundleErr = build() })
	if bundleErr != nil {
		t.Fatal(bundleErr)
	}
	ts := httptest.NewServer(http.FileServer(http.Dir(bundleDir)))
	t.Cleanup(ts.Close)
	return ts
}

func build() (string, error) {
	dir, err := os.MkdirTemp("", "egbe-epic-")
	if err != nil {
		return "", err
	}
	cmd := exec.Command(filepath.Join(webDir, "node_modules/.bin/esbuild"), filepath.Join(webDir, "epic/main.js"),
		"--bundle", "--format=esm", "--target=chrome120", "--log-level=warning", "--outfile="+filepath.Join(dir, "bundle.js"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return dir, fmt.Errorf("esbuild: %w\n%s", err, out)
	}
	html, err := os.ReadFile(filepath.Join(webDir, "epic/index.html"))
	if err != nil {
		return dir, err
	}
	return dir, os.WriteFile(filepath.Join(dir, "index.html"), html, 0o644)
}

func wsURL(ts *httptest.Server, path string) string {
	return "ws" + strings.TrimPrefix(ts.URL, "http") + path
}

// startStreamer runs the synthetic streamer until the test ends.
func startStreamer(t *testing.T, cfg streamer.Config) {
	t.Helper()
	cfg.IncludeLoopback = true
	cfg.MinBackoff, cfg.MaxBackoff = 50*time.Millisecond, 500*time.Millisecond
	cfg.FPS = 15
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- streamer.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("streamer.Run: %v", err)
		}
	})
}

type pageResult struct {
	OK              bool           `json:"ok"`
	Events          map[string]int `json:"events"`
	At              map[string]int `json:"at"` // ms since page load
	FramesReceived  int            `json:"framesReceived"`
	FramesDecoded   int            `json:"framesDecoded"`
	Codec           string         `json:"codec"`
	SubscribeFailed *string        `json:"subscribeFailed"`
	Console         []string       `json:"console"`
}

// play opens the page in headless Chromium with ss and returns what Epic's
// frontend reported.
func play(t *testing.T, node string, page *httptest.Server, ss string) pageResult {
	t.Helper()
	u := page.URL + "/index.html?ss=" + url.QueryEscape(ss)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(webDir, "epic/run.mjs"), u, "25000")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var r pageResult
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &r); err != nil {
		t.Fatalf("run.mjs: %v (%v)\nstdout: %s\nstderr: %s", err, runErr, stdout.String(), stderr.String())
	}
	t.Logf("frontend: ok=%v events=%v at(ms)=%v framesReceived=%d framesDecoded=%d codecs=%q", r.OK, r.Events, r.At, r.FramesReceived, r.FramesDecoded, r.Codec)
	if !r.OK || r.Events["webRtcConnected"] == 0 || r.Events["videoInitialized"] == 0 || r.FramesReceived <= 0 {
		t.Fatalf("Epic frontend did not play: %+v\nconsole:\n%s\nstderr: %s", r, strings.Join(r.Console, "\n"), stderr.String())
	}
	return r
}

// TestEpicFrontendDropIn: plain Epic setup, no tokens; the frontend lists
// the one streamer and subscribes by itself.
func TestEpicFrontendDropIn(t *testing.T) {
	node := tools(t)
	page := bundle(t)
	srv, err := signalling.New(signalling.Default(), signalling.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	st := httptest.NewServer(srv.StreamerHandler())
	pl := httptest.NewServer(srv.PlayerHandler())
	t.Cleanup(func() { srv.Close(); st.Close(); pl.Close() })

	cfg := streamer.Default()
	cfg.URL, cfg.ID = wsURL(st, ""), "DefaultStreamer"
	startStreamer(t, cfg)
	testwait.For(t, "streamer registered", func() bool { _, ok := srv.Registry().Get("DefaultStreamer"); return ok })

	r := play(t, node, page, wsURL(pl, ""))
	if !strings.Contains(r.Codec, "video/H264") {
		t.Errorf("codecs %q: want video/H264", r.Codec)
	}
}

// TestEpicFrontendTokenMode: the page gets its signalling URL (with the
// session JWT) from the matchmaker; the streamer registers with a streamer
// token; the broker checks the offer's codec through the matchmaker's hook.
func TestEpicFrontendTokenMode(t *testing.T) {
	node := tools(t)
	page := bundle(t)
	signer, err := auth.New(auth.RandomSecret(), nil)
	if err != nil {
		t.Fatal(err)
	}
	fleet := &matchmaker.RegistryFleet{}
	mcfg := matchmaker.Default()
	mcfg.LoadCacheTTL = 0
	mm, err := matchmaker.New(mcfg, matchmaker.Deps{Fleet: fleet, Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	scfg := signalling.Default()
	scfg.Auth = signalling.AuthToken
	srv, err := signalling.New(scfg, signalling.Deps{Signer: signer, Leases: mm.Hooks()})
	if err != nil {
		t.Fatal(err)
	}
	fleet.Reg = srv.Registry()
	st := httptest.NewServer(srv.StreamerHandler())
	mux := http.NewServeMux()
	mux.Handle("/api/", mm.Handler())
	mux.Handle("/v6/pxstream/signalling", srv.PlayerHandler())
	edge := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Close(); st.Close(); edge.Close() })

	tok, err := signer.IssueStreamer(auth.Streamer{StreamerID: "ue-use1-0", POP: "us-east-1", Codecs: []string{"H264"}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := streamer.Default()
	cfg.URL, cfg.ID, cfg.Token = wsURL(st, ""), "ue-use1-0", tok
	startStreamer(t, cfg)
	testwait.For(t, "streamer registered", func() bool { s, ok := srv.Registry().Get("ue-use1-0"); return ok && s.POP == "us-east-1" })

	resp, err := http.Post(edge.URL+matchmaker.PathMatch, "application/json",
		strings.NewReader(`{"user_id":"browser-test","client_region":"us-east","codecs":["H264"],"entitlement":"paid"}`))
	if err != nil {
		t.Fatal(err)
	}
	var match struct {
		PopID, StreamerID, Codec, SignallingURL, SessionID string
	}
	var raw map[string]any
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	_ = json.Unmarshal(body.Bytes(), &raw)
	if resp.StatusCode != 200 {
		t.Fatalf("match: %d %s", resp.StatusCode, body)
	}
	match.PopID, _ = raw["pop_id"].(string)
	match.StreamerID, _ = raw["streamer_id"].(string)
	match.SignallingURL, _ = raw["signalling_url"].(string)
	match.SessionID, _ = raw["session_id"].(string)
	if match.PopID != "us-east-1" || match.StreamerID != "ue-use1-0" || !strings.HasPrefix(match.SignallingURL, wsURL(edge, "/v6/pxstream/signalling?token=")) {
		t.Fatalf("match %s", body)
	}
	if s, _ := srv.Registry().Get("ue-use1-0"); s.State != signalling.StateLeased || s.SessionID != match.SessionID {
		t.Fatalf("after match: %+v", s)
	}

	play(t, node, page, match.SignallingURL)

	d := mm.Dashboard()
	for _, p := range d.POPs {
		if p.ID == "us-east-1" && p.Registered != 1 {
			t.Errorf("dashboard row %+v", p)
		}
	}
}
