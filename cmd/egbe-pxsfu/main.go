// Command egbe-pxsfu is the Go Pixel Streaming SFU (package
// signalling/pxsfu) as its own process: it connects to any
// Epic-compatible signalling server's SFU port (the edge's --sfu-ws, or
// Epic's wilbur), subscribes to one streamer and fans it out to players
// on one UDP port.
//
//	egbe-pxsfu --url ws://127.0.0.1:8889 [--id SFU] [--subscribe DefaultStreamer] [--ice-udp :8445] [--public-ip IP] [--token T] [--metrics 127.0.0.1:9091]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/oshun/egbe-edge/internal/iceport"
	"github.com/oshun/egbe-edge/signalling/pxsfu"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "egbe-pxsfu:", err)
		if errors.Is(err, pxsfu.ErrConfig) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg := pxsfu.Default()
	fs := flag.NewFlagSet("egbe-pxsfu", flag.ContinueOnError)
	fs.StringVar(&cfg.URL, "url", envOr("EGBE_PXSFU_URL", cfg.URL), "signalling server's SFU port (ws:// or wss://)")
	fs.StringVar(&cfg.ID, "id", envOr("EGBE_PXSFU_ID", cfg.ID), "the SFU's endpointId (players subscribe to it)")
	fs.StringVar(&cfg.Subscribe, "subscribe", envOr("EGBE_PXSFU_SUBSCRIBE", cfg.Subscribe), "streamer to subscribe to (empty: the first listed)")
	fs.StringVar(&cfg.Token, "token", os.Getenv("EGBE_PXSFU_TOKEN"), "SFU token (token-mode edges)")
	fs.DurationVar(&cfg.RetrySubscribe, "retry-subscribe", cfg.RetrySubscribe, "wait before listing streamers again")
	fs.IntVar(&cfg.MaxPlayers, "max-players", 0, "players served at most (0: unlimited)")
	iceUDP := fs.String("ice-udp", envOr("EGBE_PXSFU_ICE_UDP", ":8445"), "the one UDP port for the streamer and every player")
	publicIPs := fs.String("public-ip", os.Getenv("EGBE_PXSFU_PUBLIC_IP"), "public IPs for the host candidates, comma separated (1:1 NAT)")
	metrics := fs.String("metrics", "", "serve /metrics on this address (off when empty)")
	verbose := fs.Bool("v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", pxsfu.ErrConfig, err)
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	var ips []string
	for _, ip := range strings.Split(*publicIPs, ",") {
		if ip = strings.TrimSpace(ip); ip != "" {
			ips = append(ips, ip)
		}
	}
	port, err := iceport.Listen(iceport.Config{Listen: *iceUDP, PublicIPs: ips})
	if err != nil {
		return err
	}
	defer port.Close()
	reg := prometheus.NewRegistry()
	f, err := pxsfu.New(cfg, pxsfu.Deps{Port: port, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return f.Run(gctx) })
	if *metrics != "" {
		srv := &http.Server{Addr: *metrics, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		g.Go(func() error {
			if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		g.Go(func() error {
			<-gctx.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(sctx)
		})
	}
	log.Info("egbe-pxsfu running", "signalling", cfg.URL, "id", cfg.ID, "subscribe", cfg.Subscribe, "ice_udp", port.String())
	return g.Wait()
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
