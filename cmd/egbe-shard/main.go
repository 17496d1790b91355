// Command egbe-shard runs the reference world shard: simulated instances
// served over the shard link protocol (QUIC).
//
//	egbe-shard --listen ADDR --instances a,b,c [--agents N] [--players N] [--id ID] [--capacity N] [--token T]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/oshun/egbe-edge/shard/shardsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr, nil)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "egbe-shard:", err)
		os.Exit(2)
	}
}

// run serves until ctx is done; ready (optional) gets the bound address.
func run(ctx context.Context, args []string, logOut io.Writer, ready func(addr string)) error {
	cfg := shardsim.DefaultConfig()
	fs := flag.NewFlagSet("egbe-shard", flag.ContinueOnError)
	fs.SetOutput(logOut)
	listen := fs.String("listen", "127.0.0.1:7400", "UDP address of the shard link (QUIC)")
	instances := fs.String("instances", "orun-grove", "comma-separated instance ids")
	fs.IntVar(&cfg.Agents, "agents", cfg.Agents, "simulated agents per instance")
	fs.IntVar(&cfg.Players, "players", cfg.Players, "simulated players per instance")
	fs.StringVar(&cfg.ShardID, "id", "", "shard id (default shard-<first instance>)")
	fs.IntVar(&cfg.Capacity, "capacity", 0, "sessions advertised (0 = unbounded)")
	fs.StringVar(&cfg.LinkToken, "token", os.Getenv("EGBE_LINK_TOKEN"), "pre-shared link token edges must present (env EGBE_LINK_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.Listen = *listen
	cfg.Instances = nil
	for _, in := range strings.Split(*instances, ",") {
		if in = strings.TrimSpace(in); in != "" {
			cfg.Instances = append(cfg.Instances, in)
		}
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(logOut, nil))
	s, err := shardsim.Start(ctx, cfg)
	if err != nil {
		return err
	}
	cfg.Logger.Info("egbe-shard listening", "addr", s.Addr(), "shard", s.ID(), "instances", s.Instances())
	if ready != nil {
		ready(s.Addr())
	}
	<-ctx.Done()
	return s.Close()
}
