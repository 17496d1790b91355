package edge

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/oshun/egbe-edge/web"
)

// buildSubsystems constructs and wires every subsystem.
func (e *Edge) buildSubsystems() error {
	e.mainMux.Handle("/", http.FileServerFS(web.Demo()))
	if err := e.buildRealtime(e.lifetime); err != nil {
		return err
	}
	return e.buildPxstream()
}

// subsystemsReady reports whether every subsystem is ready.
func (e *Edge) subsystemsReady() bool {
	for _, ok := range e.readyChecks {
		if !ok() {
			return false
		}
	}
	return true
}

// serveExtra serves listeners owned by subsystems (Epic ports, HTTP/3).
func (e *Edge) serveExtra(serve func(ln net.Listener, h http.Handler, tlsOn bool)) {
	for _, x := range e.extraServers {
		serve(x.ln, x.h, false)
	}
}

// fleetSummary describes the fleet when the edge shares Redis state.
func (e *Edge) fleetSummary() *fleetSummary { return nil }

var _ = context.Background

// PolicyCheck implements `egbe-edge policy check [FILE]`.
func PolicyCheck(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "policy check: not wired yet")
	return 2
}
