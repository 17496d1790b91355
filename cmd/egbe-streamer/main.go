// Command egbe-streamer is a synthetic Pixel Streaming streamer: it
// connects to a signalling server's streamer port as a UE5.5 worker would
// and streams an H.264 test pattern to every player (package
// signalling/streamer).
//
//	egbe-streamer --url ws://127.0.0.1:8888 --id NAME [--pop us-east-1] [--codecs H264] [--token T] [--simulcast [--simulcast-ssrc]] [--multiplex]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/oshun/egbe-edge/signalling/streamer"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "egbe-streamer:", err)
		if errors.Is(err, streamer.ErrConfig) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg := streamer.Default()
	fs := flag.NewFlagSet("egbe-streamer", flag.ContinueOnError)
	fs.StringVar(&cfg.URL, "url", envOr("EGBE_STREAMER_URL", cfg.URL), "signalling server streamer port (ws:// or wss://)")
	fs.StringVar(&cfg.ID, "id", envOr("EGBE_STREAMER_ID", cfg.ID), "requested streamer id")
	fs.StringVar(&cfg.POP, "pop", envOr("EGBE_STREAMER_POP", ""), "POP to register in (without --token)")
	codecs := fs.String("codecs", envOr("EGBE_STREAMER_CODECS", strings.Join(cfg.Codecs, ",")), "codecs to advertise, comma separated (the offer is always H264)")
	fs.StringVar(&cfg.Token, "token", os.Getenv("EGBE_STREAMER_TOKEN"), "streamer token (token mode)")
	fs.IntVar(&cfg.Width, "width", cfg.Width, "pattern width (multiple of 16)")
	fs.IntVar(&cfg.Height, "height", cfg.Height, "pattern height (multiple of 16)")
	fs.IntVar(&cfg.FPS, "fps", cfg.FPS, "frames per second")
	fs.BoolVar(&cfg.Simulcast, "simulcast", false, "send an SFU three RID encodings (scale 4, 2, 1; size in multiples of 64)")
	fs.BoolVar(&cfg.SimulcastSSRC, "simulcast-ssrc", false, "describe the simulcast layers as an SSRC group (a=ssrc-group:SIM) instead of RIDs")
	fs.BoolVar(&cfg.Multiplex, "multiplex", false, "offer an SFU multiplexed data channels (199/198 framing)")
	verbose := fs.Bool("v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", streamer.ErrConfig, err)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if cfg.SimulcastSSRC {
		cfg.Simulcast = true
	}
	if cfg.Simulcast && !set["height"] {
		cfg.Height = 128 // the default 144 is not a multiple of 64
	}
	cfg.Codecs = nil
	for _, c := range strings.Split(*codecs, ",") {
		if c = strings.TrimSpace(c); c != "" {
			cfg.Codecs = append(cfg.Codecs, strings.ToUpper(c))
		}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return streamer.Run(ctx, cfg)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
