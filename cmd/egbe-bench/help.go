package main

import (
	"fmt"
	"io"
)

// scenario is one egbe-bench scenario for `egbe-bench help`.
type scenario struct {
	name, what, example string
}

// scenarios are the bench's scenarios, each with a short example that runs
// on one machine (build the binaries first: go build -o /tmp/ ./cmd/...).
var scenarios = []scenario{
	{"connect", "open N sessions on one transport; handshake percentiles, edge CPU and RSS per session",
		"egbe-bench connect --edge-bin /tmp/egbe-edge --transport websocket --sessions 1000"},
	{"echo", "N sessions exchanging messages at a rate; round-trip percentiles; --baseline adds a bare gorilla echo server in the same run",
		"egbe-bench echo --edge-bin /tmp/egbe-edge --sessions 1000 --rate 20 --duration 20s --baseline"},
	{"world", "N clients on M instances of an egbe-shard with 20 Hz presence; shard-to-client latency, bytes per client, edge CPU per update; --baseline adds a bare gorilla relay in the same run",
		"egbe-bench world --edge-bin /tmp/egbe-edge --shard-bin /tmp/egbe-shard --clients 1000 --instances 10 --duration 15s"},
	{"voice", "S speakers and L listeners through the voice SFU; forwarded packets/s, CPU per million, added latency, loss",
		"egbe-bench voice --edge-bin /tmp/egbe-edge --speakers 4 --listeners 20 --duration 15s"},
	{"pxsfu", "Epic players through the Go Pixel Streaming SFU (--pxsfu) beside a bare pion forwarder in the same run; forwards per CPU-second, layer switches",
		"egbe-bench pxsfu --edge-bin /tmp/egbe-edge --players 100,200 --duration 10s"},
	{"pxstream", "full Epic signalling handshakes (player and streamer pairs) through the edge; --idle measures RSS per idle player",
		"egbe-bench pxstream --edge-bin /tmp/egbe-edge --pairs 200 --handshakes 20000"},
	{"match", "matchmaker decisions over the 7 GA POPs and N registered streamers, over HTTP and in process",
		"egbe-bench match --edge-bin /tmp/egbe-edge --streamers 1000 --decisions 20000"},
	{"surge", "an arrival storm against the armed waiting room on real Redis; over-admissions must be 0",
		"egbe-bench surge --edge-bin /tmp/egbe-edge --rate 3300 --duration 60s"},
	{"failover", "a fleet of edges on one Redis; edge 0 is SIGKILLed under load; kill-to-resume percentiles, same session and shard, actions exactly once",
		"egbe-bench failover --edge-bin /tmp/egbe-edge --edges 3 --sessions 2000"},
	{"handshakes", "fresh-session handshakes/s on memory and on Redis state in one run, Redis commands and round trips per handshake",
		"egbe-bench handshakes --edge-bin /tmp/egbe-edge --sessions 2000 --concurrency 64"},
	{"serve-baseline-world", "the bare gorilla relay world --baseline runs (for measuring it by hand)",
		"egbe-bench serve-baseline-world --listen 127.0.0.1:9998"},
	{"serve-baseline-echo", "the bare gorilla echo server --baseline runs (for measuring it by hand)",
		"egbe-bench serve-baseline-echo --listen 127.0.0.1:9999"},
}

// writeHelp is `egbe-bench help`.
func writeHelp(w io.Writer) {
	fmt.Fprint(w, `egbe-bench: load scenarios against real egbe-edge processes. It starts the
edges (and egbe-shard, redis-server where a scenario needs them) on free
loopback ports, drives them, and reports latency, throughput, errors and the
edges' CPU and RSS from /proc, beside a baseline measured in the same run
where the scenario has one. The edges' own logs stay out of the report (an
edge that dies shows its log's end in the error). While a scenario runs, a
progress line goes to stderr every 5 s.

Usage: egbe-bench SCENARIO [flags]    (egbe-bench SCENARIO --help lists its flags)

First: go build -o /tmp/ ./cmd/egbe-edge ./cmd/egbe-shard ./cmd/egbe-bench

Scenarios:
`)
	for _, s := range scenarios {
		fmt.Fprintf(w, "\n  %s\n      %s\n      e.g. %s\n", s.name, s.what, s.example)
	}
	fmt.Fprint(w, `
Most scenarios attach to a running edge instead of --edge-bin with --edge,
--edge-h3, --edge-admin and --edge-pid. connect and echo take --edges N to
spread the sessions over a fleet sharing Redis. Load from one address needs
--edge-args "--policy bench/loadtest-policy.json" (the per-network caps
lifted). Pin client and edge apart: taskset -c 0 egbe-bench ... --edge-taskset 1.
BENCHMARKS.md has the figures and how each was measured.
`)
}
