// Command egbe-edge runs the edge: realtime transports, shard proxying, the
// voice SFU, Pixel Streaming signalling and matchmaking, and admission.
//
//	egbe-edge [flags]              run (dev mode by default)
//	egbe-edge policy check [FILE]  check an admission policy file
//	egbe-edge prestop [--wait D]   container pre-stop hook: drain PID 1
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/oshun/egbe-edge/edge"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) >= 2 && args[0] == "policy" && args[1] == "check" {
		return edge.PolicyCheck(args[2:], os.Stdout, os.Stderr)
	}
	if len(args) >= 1 && args[0] == "prestop" {
		return prestop(args[1:], os.Stderr)
	}
	cfg, err := edge.Load(args, os.Environ(), os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "egbe-edge:", err)
		return 2
	}
	log := newLogger(cfg.Mode)
	e, err := edge.New(cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "egbe-edge:", err)
		if errors.Is(err, edge.ErrConfig) {
			return 2
		}
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		// The first signal starts a drain; a second one forces exit.
		<-ctx.Done()
		stop()
		force := make(chan os.Signal, 1)
		signal.Notify(force, syscall.SIGINT, syscall.SIGTERM)
		<-force
		fmt.Fprintln(os.Stderr, "egbe-edge: second signal, exiting now")
		os.Exit(130)
	}()
	if err := e.Run(ctx); err != nil {
		log.Error("egbe-edge stopped", "err", err)
		return 1
	}
	return 0
}

func newLogger(mode string) *slog.Logger {
	if mode == edge.ModeProd {
		return slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}
