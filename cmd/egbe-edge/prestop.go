package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// prestop is the container pre-stop hook, for images without a shell:
// it starts the edge's drain by sending SIGTERM to PID 1 — only when PID 1
// is egbe-edge itself, so running it on a host by mistake signals nothing
// — then waits, so the orchestrator's own SIGTERM (a second signal forces
// exit) comes after the drain window.
//
//	egbe-edge prestop [--wait 25s]
func prestop(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("prestop", flag.ContinueOnError)
	fs.SetOutput(stderr)
	wait := fs.Duration("wait", 25*time.Second, "how long to wait after starting the drain (longer than --drain-window)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cmdline, err := os.ReadFile("/proc/1/cmdline")
	if err != nil {
		fmt.Fprintln(stderr, "egbe-edge prestop:", err)
		return 1
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	if filepath.Base(string(argv0)) != "egbe-edge" {
		fmt.Fprintf(stderr, "egbe-edge prestop: PID 1 is %q, not egbe-edge: nothing to drain\n", argv0)
		return 1
	}
	if err := syscall.Kill(1, syscall.SIGTERM); err != nil {
		fmt.Fprintln(stderr, "egbe-edge prestop:", err)
		return 1
	}
	time.Sleep(*wait)
	return 0
}
