// Command egbe-edge runs the edge: realtime transports, shard proxying, the
// voice SFU, Pixel Streaming signalling and matchmaking, and admission.
//
//	egbe-edge [flags]                          run (dev mode by default)
//	egbe-edge policy check [FILE]              check an admission policy file
//	egbe-edge prestop [--wait D]               container pre-stop hook: drain PID 1
//	egbe-edge operator-token [--sub S] [--ttl D]  mint an operator token (EGBE_JWT_SECRET)
//	egbe-edge --help | --version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/oshun/egbe-edge/edge"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) >= 2 && args[0] == "policy" && args[1] == "check":
		return edge.PolicyCheck(args[2:], stdout, stderr)
	case len(args) >= 1 && args[0] == "prestop":
		return prestop(args[1:], stderr)
	case len(args) >= 1 && args[0] == "operator-token":
		return operatorToken(args[1:], os.Environ(), stdout, stderr)
	case len(args) == 1 && args[0] == "help":
		writeHelp(stdout)
		return 0
	}
	for _, a := range args {
		if a == "--version" || a == "-version" {
			fmt.Fprintln(stdout, version())
			return 0
		}
	}
	cfg, err := edge.Load(args, os.Environ(), stderr)
	if errors.Is(err, flag.ErrHelp) {
		writeHelp(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "egbe-edge:", err)
		return 2
	}
	log := newLogger(cfg, stderr)
	// Signals are caught before the edge binds anything: a SIGTERM while it
	// starts is a drain of nothing and a clean exit.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	e, err := edge.New(cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "egbe-edge:", err)
		if errors.Is(err, edge.ErrConfig) {
			return 2
		}
		return 1
	}
	go func() {
		// The first signal starts a drain; a second one forces exit.
		<-ctx.Done()
		stop()
		force := make(chan os.Signal, 1)
		signal.Notify(force, syscall.SIGINT, syscall.SIGTERM)
		<-force
		fmt.Fprintln(stderr, "egbe-edge: second signal, exiting now")
		os.Exit(130)
	}()
	if err := e.Run(ctx); err != nil {
		log.Error("egbe-edge stopped", "err", err)
		return 1
	}
	return 0
}

// newLogger is the process logger --log-level and --log-format ask for.
func newLogger(cfg edge.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // Validate checked it
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
