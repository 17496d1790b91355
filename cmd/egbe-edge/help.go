package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/edge"
)

// writeHelp is `egbe-edge --help`: what the program is, how to run it,
// its subcommands, every setting with its variable, and the pages.
func writeHelp(w io.Writer) {
	fmt.Fprint(w, `egbe-edge: the network edge of the egbe multiplayer world, as one binary.
It terminates WebTransport, WebRTC data channels and WebSocket, pins every
session to its world shard and proxies it, runs the Opus voice SFU, is an
Epic-compatible Pixel Streaming signalling server and matchmaker with an
embedded TURN server, and runs admission (tier routing, caps, budgets, abuse
scoring, a waiting room).

Usage:
  egbe-edge [flags]                    run; with no flags, dev mode on the default ports
  egbe-edge policy check [FILE]        check an admission policy file (the shipped one without FILE):
                                       exit 0 when its gates pass, 1 when they fail, 2 when it is invalid
  egbe-edge prestop [--wait 25s]       container pre-stop hook: start PID 1's drain, then wait
  egbe-edge operator-token [--sub NAME] [--ttl 8h]
                                       print an operator access token signed with EGBE_JWT_SECRET
                                       (for /ops/ and the waiting room's operator API)
  egbe-edge --version                  build information
  egbe-edge --help                     this text

`)
	edge.WriteSettingsHelp(w)
	fmt.Fprintf(w, "\nPages (the start-up log prints their URLs):\n")
	for _, p := range edge.Pages() {
		where := p.Listener + " listener"
		if p.DevOnly {
			where += ", dev only"
		}
		fmt.Fprintf(w, "  %-20s %s (%s)\n", p.Path, p.What, where)
	}
	fmt.Fprint(w, `
Signals: SIGTERM or SIGINT drains (readiness off, Drain messages spread over
--drain-window, then close); a second signal exits at once.
Exit codes: 0 stopped cleanly, 1 failed, 2 bad configuration.
`)
}

// version is `egbe-edge --version`, from the build information Go
// embeds: the module version, the VCS revision and time when built from a
// checkout, and the toolchain.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "egbe-edge (no build information) " + runtime.Version()
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	parts := []string{"egbe-edge", v}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if settings["vcs.modified"] == "true" {
			rev += "+dirty"
		}
		parts = append(parts, "revision "+rev)
	}
	if t := settings["vcs.time"]; t != "" {
		parts = append(parts, "committed "+t)
	}
	parts = append(parts, bi.GoVersion, runtime.GOOS+"/"+runtime.GOARCH)
	return strings.Join(parts, " ")
}

// operatorToken is `egbe-edge operator-token`: an access token with the
// operator role, signed with EGBE_JWT_SECRET, for an operator to paste
// into /ops/ or send as a bearer token. It reads the secret from the
// environment, as the edge does, so it mints only what the fleet trusts.
func operatorToken(args, env []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("operator-token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sub := fs.String("sub", "operator", "the operator's name (the audit log's operator field)")
	ttl := fs.Duration("ttl", 8*time.Hour, "how long the token is valid")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	secret := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "EGBE_JWT_SECRET="); ok {
			secret = v
		}
	}
	if secret == "" {
		fmt.Fprintln(stderr, "egbe-edge operator-token: EGBE_JWT_SECRET is not set (the token must be signed with the fleet's secret)")
		return 2
	}
	if *sub == "" || *ttl <= 0 {
		fmt.Fprintln(stderr, "egbe-edge operator-token: --sub must not be empty and --ttl must be positive")
		return 2
	}
	s, err := auth.New([]byte(secret), time.Now)
	if err != nil {
		fmt.Fprintln(stderr, "egbe-edge operator-token:", err)
		return 2
	}
	tok, err := s.IssueAccess(auth.Access{Subject: *sub, Roles: []string{auth.RoleOperator}}, *ttl)
	if err != nil {
		fmt.Fprintln(stderr, "egbe-edge operator-token:", err)
		return 1
	}
	fmt.Fprintln(stdout, tok)
	return 0
}
