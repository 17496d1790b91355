package edge

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/oshun/egbe-edge/admission"
	"github.com/oshun/egbe-edge/web"
)

// buildSubsystems constructs and wires every subsystem.
func (e *Edge) buildSubsystems() error {
	e.mainMux.Handle("/", http.FileServerFS(web.Demo()))
	if err := e.buildTURN(); err != nil {
		return err
	}
	if err := e.openSharedState(); err != nil {
		return err
	}
	if err := e.buildAdmission(); err != nil {
		return err
	}
	bridge := &voiceBridge{}
	e.voiceHooks = bridge
	if err := e.buildRealtime(e.lifetime); err != nil {
		return err
	}
	if err := e.buildVoice(bridge); err != nil {
		return err
	}
	if err := e.buildPxstream(); err != nil {
		return err
	}
	if err := e.buildPlayerPage(); err != nil {
		return err
	}
	e.mountAdmission()
	return nil
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

// serveExtra serves listeners owned by subsystems (the Epic ports).
func (e *Edge) serveExtra(serve func(ln net.Listener, h http.Handler, tlsOn bool)) {
	for _, x := range e.extraServers {
		serve(x.ln, x.h, false)
	}
}

// PolicyCheck implements `egbe-edge policy check [FILE]`: it runs the
// decision-distribution gate over the policy file (the shipped defaults
// without one) and prints the report as JSON. Exit 0 when the gate passes,
// 1 when it fails, 2 when the file cannot be read or is invalid.
func PolicyCheck(args []string, stdout, stderr io.Writer) int {
	if len(args) > 1 {
		fmt.Fprintln(stderr, "usage: egbe-edge policy check [FILE]")
		return 2
	}
	path := ""
	if len(args) == 1 {
		path = args[0]
	}
	rep, err := admission.CheckPolicy(path)
	if err != nil {
		fmt.Fprintln(stderr, "policy check:", err)
		return 2
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rep)
	if !rep.OK {
		fmt.Fprintln(stderr, "policy check: FAILED")
		return 1
	}
	return 0
}
