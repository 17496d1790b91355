// Command egbe-bench drives load at an egbe-edge and reports latency,
// throughput, errors and the edge's CPU and RSS, beside a baseline server
// measured in the same run where the scenario has one.
//
//	egbe-bench connect  --edge-bin PATH --transport websocket --sessions 1000 [--settle 1s] [--baseline] [--heap-profile FILE] [--edge-taskset 1] [--edges N [--redis-url URL]]
//	egbe-bench echo     --edge-bin PATH --transport websocket --sessions 1000 --rate 20 --duration 20s [--baseline] [--profile FILE] [--edge-taskset 1] [--edges N [--redis-url URL]]
//	egbe-bench failover --edge-bin PATH --edges 3 --sessions 2000 [--rate 5] [--transport websocket] [--redis-url URL] [--bystanders N]
//	egbe-bench handshakes --edge-bin PATH --sessions 2000 --concurrency 64 [--rounds 3] [--probe 200] [--redis-url URL]
//	egbe-bench pxstream --edge-bin PATH --pairs 200 --handshakes 20000 [--idle 19000] [--edge-taskset 1]
//	egbe-bench match    --edge-bin PATH --streamers 1000 --decisions 20000 [--edge-taskset 1]
//	egbe-bench voice    --edge-bin PATH --speakers 4 --listeners 20 --duration 15s [--edge-taskset 1]
//	egbe-bench pxsfu    --edge-bin PATH --players 100,200,500 [--duration 10s] [--layers 0,1,2] [--bare=false]
//	egbe-bench surge    --edge-bin PATH --rate 3300 --duration 60s [--max --workers 64]
//	egbe-bench world    --edge-bin PATH --shard-bin PATH --clients 1000 --instances 10 --agents 500 --duration 15s [--transport websocket] [--idle N] [--profile FILE] [--client-profile FILE] [--baseline] [--edge-taskset 1]
//	egbe-bench serve-baseline-echo --listen 127.0.0.1:9999   (used by --baseline)
//	egbe-bench serve-baseline-world --listen 127.0.0.1:9999 --rate 20 --entities 32   (used by world --baseline)
//
// --edges N spreads the sessions round-robin over N edge processes that
// share one Redis (--redis-url, or a redis-server started on a free
// loopback port), one JWT secret and reference shards run in the bench
// process. failover kills edge 0 with SIGKILL and measures how fast its
// sessions resume on the others; handshakes compares fresh-session
// handshake throughput on memory and Redis state and counts Redis
// commands and round trips per handshake.
//
// Pin the client and the edge to different cores and compare CPU time:
//
//	taskset -c 0 egbe-bench pxstream --edge-bin /tmp/egbe-edge --edge-taskset 1 ...
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/oshun/egbe-edge/bench"
)

func main() { os.Exit(run(os.Args[1:])) }

func usage() int {
	fmt.Fprintln(os.Stderr, "usage: egbe-bench connect|echo|failover|handshakes|pxstream|match|voice|pxsfu|surge|world|serve-baseline-echo|serve-baseline-world [flags]  (egbe-bench help describes each; egbe-bench SCENARIO --help lists its flags)")
	return 2
}

func run(args []string) int {
	if len(args) == 0 {
		return usage()
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		writeHelp(os.Stdout)
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if args[0] != "serve-baseline-echo" {
		defer progress(ctx, os.Stderr, args[0])()
	}
	var err error
	switch args[0] {
	case "connect", "echo":
		err = runEcho(ctx, args[0], args[1:])
	case "failover":
		err = bench.FailoverCommand(ctx, args[1:])
	case "handshakes":
		err = bench.HandshakesCommand(ctx, args[1:])
	case "pxstream":
		err = bench.PxstreamCommand(ctx, args[1:])
	case "match":
		err = bench.MatchCommand(ctx, args[1:])
	case "voice":
		err = bench.VoiceCommand(ctx, args[1:])
	case "pxsfu":
		err = bench.PxSFUCommand(ctx, args[1:])
	case "pxsfu-receivers": // a child of pxsfu
		err = bench.PxSFUReceiversCommand(ctx, args[1:])
	case "pxsfu-bare": // a child of pxsfu
		err = bench.PxSFUBareCommand(ctx, args[1:])
	case "surge":
		err = bench.SurgeCommand(ctx, args[1:])
	case "world":
		err = bench.WorldCommand(ctx, args[1:])
	case "serve-baseline-echo":
		fs := flag.NewFlagSet(args[0], flag.ExitOnError)
		listen := fs.String("listen", "127.0.0.1:0", "address")
		_ = fs.Parse(args[1:])
		err = bench.ServeBaselineEcho(ctx, &http.Server{Addr: *listen})
	case "serve-baseline-world":
		fs := flag.NewFlagSet(args[0], flag.ExitOnError)
		listen := fs.String("listen", "127.0.0.1:0", "address")
		rate := fs.Float64("rate", 20, "snapshots per second to every connection")
		entities := fs.Int("entities", 32, "agents per snapshot")
		_ = fs.Parse(args[1:])
		err = bench.ServeBaselineWorld(ctx, &http.Server{Addr: *listen}, *rate, *entities)
	default:
		return usage()
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp): // SCENARIO --help: the flag set listed its flags
		return 0
	case errors.Is(err, bench.ErrUsage): // the flag set said what was wrong
		return 2
	}
	fmt.Fprintln(os.Stderr, "egbe-bench:", err)
	return 1
}

type edgeFlags struct {
	bin, httpBase, h3Base, adminBase string
	pid                              int
	extra                            string
	edges                            int
	redisURL                         string
	taskset                          string
}

func (f *edgeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.bin, "edge-bin", "", "start this egbe-edge binary on free loopback ports (dev mode)")
	fs.StringVar(&f.extra, "edge-args", "", "extra flags for --edge-bin, space separated")
	fs.StringVar(&f.httpBase, "edge", "", "or attach: the running edge's HTTP origin (http://127.0.0.1:8080)")
	fs.StringVar(&f.h3Base, "edge-h3", "", "the running edge's HTTPS origin (https://127.0.0.1:8443)")
	fs.StringVar(&f.adminBase, "edge-admin", "", "the running edge's admin origin (http://127.0.0.1:9090)")
	fs.IntVar(&f.pid, "edge-pid", 0, "the running edge's pid, for CPU and RSS")
	fs.IntVar(&f.edges, "edges", 1, "with --edge-bin: start N edges sharing Redis and spread the sessions over them round-robin")
	fs.StringVar(&f.redisURL, "redis-url", "", "with --edges > 1: shared state (default: start redis-server)")
	fs.StringVar(&f.taskset, "edge-taskset", "", "with --edge-bin: pin the edges (and the --baseline server) to these CPUs (taskset -c LIST)")
}

// targets starts (or attaches to) the edges; stop ends what it started.
func (f *edgeFlags) targets(ctx context.Context, instances string) ([]*bench.Target, func(), error) {
	if f.edges <= 1 {
		t, err := f.target(ctx)
		if err != nil {
			return nil, nil, err
		}
		return []*bench.Target{t}, t.Stop, nil
	}
	if f.bin == "" {
		return nil, nil, fmt.Errorf("--edges needs --edge-bin")
	}
	fl, err := bench.StartFleet(ctx, bench.FleetOptions{EdgeBin: f.bin, Edges: f.edges, RedisURL: f.redisURL, Shards: 1,
		Instances: strings.Split(instances, ","), Agents: 200, Extra: strings.Fields(f.extra), Taskset: f.taskset})
	if err != nil {
		return nil, nil, err
	}
	fmt.Println(fl)
	return fl.Edges, fl.Stop, nil
}

func (f *edgeFlags) target(ctx context.Context) (*bench.Target, error) {
	if f.bin != "" {
		return bench.StartEdgeWith(ctx, bench.EdgeOptions{Bin: f.bin, Extra: strings.Fields(f.extra), Taskset: f.taskset})
	}
	if f.httpBase == "" {
		return nil, fmt.Errorf("give --edge-bin or --edge/--edge-h3/--edge-admin")
	}
	return bench.Attach(ctx, f.httpBase, f.h3Base, f.adminBase, f.pid)
}

func runEcho(ctx context.Context, scenario string, args []string) error {
	fs := flag.NewFlagSet(scenario, flag.ExitOnError)
	var ef edgeFlags
	ef.register(fs)
	var opts bench.EchoOptions
	fs.StringVar(&opts.Transport, "transport", "websocket", "webtransport | webrtc | websocket")
	fs.IntVar(&opts.Sessions, "sessions", 100, "concurrent sessions")
	fs.Float64Var(&opts.Rate, "rate", 20, "messages per second per session (echo)")
	fs.DurationVar(&opts.Duration, "duration", 10*time.Second, "measured phase (echo)")
	fs.IntVar(&opts.DialWorkers, "dial-workers", 32, "concurrent dials")
	fs.StringVar(&opts.Instance, "instance", "orun-grove", "instance to join")
	fs.DurationVar(&opts.Settle, "settle", time.Second, "wait this long after connecting before reading idle RSS")
	fs.StringVar(&opts.Profile, "profile", "", "write the edge's CPU profile of the echo phase here")
	fs.StringVar(&opts.HeapProfile, "heap-profile", "", "write the edge's heap profile, taken once the sessions are idle, here")
	baseline := fs.Bool("baseline", false, "also measure a bare gorilla echo server with the same load and the same hello (websocket)")
	_ = fs.Parse(args)
	if scenario == "connect" {
		opts.Duration = 0
	}
	edges, stopEdges, err := ef.targets(ctx, opts.Instance)
	if err != nil {
		return err
	}
	defer stopEdges()
	rep, err := bench.RunEchoFleet(ctx, edges, opts)
	if err != nil {
		return err
	}
	fmt.Print(rep)
	if !*baseline {
		return nil
	}
	stopEdges() // one server at a time on this machine
	base, err := runBaseline(ctx, opts, ef.taskset)
	if err != nil {
		return err
	}
	fmt.Print(base)
	if base.CPUPerMessage > 0 {
		fmt.Printf("ratio edge/bare cpu per message: %.2fx\n", float64(rep.CPUPerMessage)/float64(base.CPUPerMessage))
	}
	return nil
}

func runBaseline(ctx context.Context, opts bench.EchoOptions, taskset string) (bench.EchoReport, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return bench.EchoReport{}, err
	}
	addr := ln.Addr().String()
	ln.Close()
	self, err := os.Executable()
	if err != nil {
		return bench.EchoReport{}, err
	}
	cmd := exec.Command(self, "serve-baseline-echo", "--listen", addr)
	if taskset != "" {
		// Pinned as the edge was; taskset execs the server, so the pid is its.
		cmd = exec.Command("taskset", "-c", taskset, self, "serve-baseline-echo", "--listen", addr)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return bench.EchoReport{}, err
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return bench.RunBaselineEcho(ctx, "ws://"+addr+"/", cmd.Process.Pid, opts)
}
