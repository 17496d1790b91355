package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/oshun/egbe-edge/internal/testwait"
)

// TestHelpNamesEveryScenario: `egbe-bench help` describes each scenario
// run dispatches, with an example that names it, and exits 0.
func TestHelpNamesEveryScenario(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	dispatched := map[string]bool{}
	for _, m := range regexp.MustCompile(`case ("[a-z-]+"(?:, "[a-z-]+")*):\n\t\t(?:err =|fs :=)`).FindAllStringSubmatch(string(src), -1) {
		for _, q := range strings.Split(m[1], ", ") {
			name, _ := strconv.Unquote(q)
			dispatched[name] = true
		}
	}
	if len(dispatched) < 10 {
		t.Fatalf("found only %v in run's switch", dispatched)
	}
	var out bytes.Buffer
	writeHelp(&out)
	for name := range dispatched {
		if !strings.Contains(out.String(), "\n  "+name+"\n") || !strings.Contains(out.String(), "e.g. egbe-bench "+name+" ") {
			t.Errorf("help does not describe %s with an example", name)
		}
	}
	for _, s := range scenarios {
		if !dispatched[s.name] {
			t.Errorf("help describes %s, which run does not dispatch", s.name)
		}
	}
	if code := run([]string{"help"}); code != 0 {
		t.Fatalf("help: exit %d", code)
	}
}

// TestScenarioFlagErrors: a scenario's --help exits 0 and a bad flag
// exits 2, decided here: the bench library returns both as errors and
// never exits the process (this test would end with the library's exit).
func TestScenarioFlagErrors(t *testing.T) {
	for _, scenario := range []string{"failover", "handshakes", "pxstream", "match", "voice", "pxsfu", "pxsfu-receivers", "pxsfu-bare", "surge", "world"} {
		if code := run([]string{scenario, "--help"}); code != 0 {
			t.Errorf("%s --help: exit %d, want 0", scenario, code)
		}
		if code := run([]string{scenario, "--no-such-flag"}); code != 2 {
			t.Errorf("%s --no-such-flag: exit %d, want 2", scenario, code)
		}
	}
}

// TestProgressNamesChildren: the progress line reports the processes the
// bench started, with their CPU and RSS.
func TestProgressNamesChildren(t *testing.T) {
	child := exec.Command("sleep", "30")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	line := children(os.Getpid())
	if !strings.Contains(line, "sleep["+strconv.Itoa(child.Process.Pid)+"] cpu ") || !strings.Contains(line, "MiB") {
		t.Fatalf("children: %q", line)
	}
	var buf syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	stop := progress(ctx, &buf, "echo")
	testwait.Within(t, 3*progressEvery, "a progress line", func() bool { return strings.Contains(buf.String(), "egbe-bench: echo running") })
	cancel()
	stop()
	if !strings.Contains(buf.String(), "egbe-bench: echo running 5s: ") {
		t.Fatalf("progress: %q", buf.String())
	}
}
