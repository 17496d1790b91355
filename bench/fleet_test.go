package bench

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fleetPrereqs builds the edge and insists on a real redis-server: these
// scenarios are about shared state, so a missing Redis is a failure,
// never a skip.
func fleetPrereqs(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found on PATH (install redis-server; the fleet scenarios need a real Redis): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "egbe-edge")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/egbe-edge").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestFleetEchoSpreadsSessions: --edges 2 opens sessions round-robin over
// two edges that share Redis and the reference shard, and echo works on
// both.
func TestFleetEchoSpreadsSessions(t *testing.T) {
	bin := fleetPrereqs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f, err := StartFleet(ctx, FleetOptions{EdgeBin: bin, Edges: 2, Shards: 1, Instances: []string{"orun-grove"}, Agents: 20})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	if f.RedisURL == "" || f.RedisPID == 0 {
		t.Fatalf("fleet without its own redis-server: %+v", f)
	}
	const sessions = 20
	rep, err := RunEchoFleet(ctx, f.Edges, EchoOptions{Transport: "websocket", Sessions: sessions, Rate: 10,
		Duration: time.Second, DialWorkers: 4, Instance: "orun-grove"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if rep.Connected != sessions || rep.ConnectErrors != 0 {
		t.Fatalf("connected %d of %d: %v", rep.Connected, sessions, rep.Errors)
	}
	if rep.Received == 0 || rep.Received > rep.Sent {
		t.Fatalf("sent %d, received %d", rep.Sent, rep.Received)
	}
	for i, e := range f.Edges {
		n, err := metricSum(e, "egbe_shard_handshakes_total")
		if err != nil {
			t.Fatal(err)
		}
		if int(n) != sessions/len(f.Edges) {
			t.Fatalf("edge %d completed %v handshakes, want %d (round-robin)", i, n, sessions/len(f.Edges))
		}
	}
}

// TestFleetFailoverScenario runs the failover scenario small: every
// session of the killed edge resumes on a survivor with its id and shard,
// every acknowledged action is applied exactly once, bystanders stay up.
func TestFleetFailoverScenario(t *testing.T) {
	bin := fleetPrereqs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const sessions, bystanders = 40, 6
	rep, err := RunFailover(ctx, FailoverOptions{EdgeBin: bin, Edges: 3, Transport: "websocket", Sessions: sessions,
		Bystanders: bystanders, Rate: 5, Actions: 2, Instances: 4, Agents: 20, DialWorkers: 8, Warmup: 500 * time.Millisecond})
	t.Logf("\n%s", rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"connected", rep.Connected, sessions + bystanders},
		{"ended before the kill", rep.PreDisconnects, 0},
		{"resumed", rep.Resumed, sessions},
		{"failed", rep.Failed, 0},
		{"same session id", rep.SameSession, sessions},
		{"same shard", rep.SameShard, sessions},
		{"resumed flag", rep.ResumedFlag, sessions},
		{"post-resume actions acknowledged", rep.AckedAfter, sessions},
		{"actions applied exactly once", rep.ActionsExact, sessions + bystanders},
		{"sessions with a lost action", rep.ActionsLost, 0},
		{"sessions with a duplicated action", rep.ActionsDup, 0},
		{"sessions with an applied action never acknowledged", rep.AppliedUnacked, 0},
		{"bystanders up", rep.BystandersUp, bystanders},
		{"resume samples", rep.Resume.N, sessions},
		{"resumed per half second (sum)", sum(rep.ByHalfSecond), sessions},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d (failures: %v)", c.name, c.got, c.want, rep.Failures)
		}
	}
	if rep.Attempts < sessions {
		t.Errorf("%d resume attempts for %d sessions", rep.Attempts, sessions)
	}
	if rep.LastResumed != rep.Resume.Max {
		t.Errorf("last resumed %v, but the slowest resume was %v", rep.LastResumed, rep.Resume.Max)
	}
}

// TestHandshakeComparison runs the handshake comparison small: every
// handshake succeeds on both states, Redis rounds see Redis commands, and
// the round-trip probe counts the open and close paths.
func TestHandshakeComparison(t *testing.T) {
	bin := fleetPrereqs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	const sessions = 100
	rep, err := RunHandshakes(ctx, HandshakeOptions{EdgeBin: bin, Transport: "websocket", Sessions: sessions, Concurrency: 8, Rounds: 2, Probe: 20})
	t.Logf("\n%s", rep)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rounds) != 4 {
		t.Fatalf("%d rounds, want 2 per state", len(rep.Rounds))
	}
	states := map[string]int{}
	for i, rd := range rep.Rounds {
		states[rd.State]++
		if rd.OK != sessions || rd.Errors != 0 {
			t.Errorf("round %d (%s): %d ok, %d errors: %v", i+1, rd.State, rd.OK, rd.Errors, rd.ErrList)
		}
		if rd.Latency.N != sessions {
			t.Errorf("round %d: %d latency samples", i+1, rd.Latency.N)
		}
		if rd.State == "redis" && len(rd.Calls) == 0 {
			t.Errorf("round %d: a Redis-state round made no Redis calls", i+1)
		}
	}
	if states["memory"] != 2 || states["redis"] != 2 || rep.Rounds[0].State == rep.Rounds[1].State {
		t.Errorf("rounds do not alternate: %v", rep.Rounds)
	}
	if mem, rds := rep.Rates(); mem <= 0 || rds <= 0 {
		t.Errorf("rates memory %v redis %v", mem, rds)
	}
	if calls, per := rep.CallsPerHandshake(); calls <= 0 || len(per) == 0 {
		t.Errorf("redis commands per handshake %v %v", calls, per)
	}
	p := rep.Probe
	if p == nil || p.Handshakes != 20 {
		t.Fatalf("probe: %+v", p)
	}
	if p.OpenSum < 1 || p.CloseSum < 1 || p.ResumeSum < 1 || len(p.Trace) == 0 || len(p.ResumeTrace) == 0 {
		t.Errorf("probe counted open %.2f close %.2f resume %.2f trips per handshake, traces %v %v", p.OpenSum, p.CloseSum, p.ResumeSum, p.Trace, p.ResumeTrace)
	}
	if pr := rep.PairRatios(); len(pr) != 2 {
		t.Errorf("pair ratios %v, want one per round", pr)
	}
}

func TestFleetRespCounterShapes(t *testing.T) {
	for _, tc := range []struct {
		name, in, shape string
		names           []string
	}{
		{"single", "*3\r\n$3\r\nSET\r\n$12\r\negbe:pin:ab1\r\n$1\r\nx\r\n", "set egbe:pin:*", []string{"set"}},
		{"script", "*5\r\n$7\r\nEVALSHA\r\n$3\r\nabc\r\n$1\r\n1\r\n$14\r\nrt:user:hs-123\r\n$1\r\n9\r\n", "evalsha rt:user:*", []string{"evalsha"}},
		{"pipeline", "*2\r\n$4\r\nZREM\r\n$3\r\nk:1\r\n*2\r\n$4\r\nZREM\r\n$3\r\nk:2\r\n", "pipeline[zrem k:* + zrem k:*]", []string{"zrem", "zrem"}},
		{"inline", "PING\r\n", "ping", []string{"ping"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufioReader(tc.in)
			raw, names, shape, err := readBatch(br)
			if err != nil {
				t.Fatal(err)
			}
			if string(raw) != tc.in || shape != tc.shape || fmt.Sprint(names) != fmt.Sprint(tc.names) {
				t.Fatalf("readBatch = %q %v %q, want %q %v %q", raw, names, shape, tc.in, tc.names, tc.shape)
			}
		})
	}
}

func TestFleetAppliedCheck(t *testing.T) {
	for _, tc := range []struct {
		name             string
		applied          []uint64
		acked            uint64
		exact, lost, dup bool
	}{
		{"exact", []uint64{1, 2, 3, 4}, 4, true, false, false},
		{"lost", []uint64{1, 2, 4}, 4, false, true, false},
		{"dup", []uint64{1, 2, 2, 3, 4}, 4, false, false, true},
		{"unacked extra", []uint64{1, 2, 3}, 2, false, false, false},
		{"none", nil, 0, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, l, d := appliedCheck(tc.applied, tc.acked)
			if e != tc.exact || l != tc.lost || d != tc.dup {
				t.Fatalf("appliedCheck(%v, %d) = %v %v %v, want %v %v %v", tc.applied, tc.acked, e, l, d, tc.exact, tc.lost, tc.dup)
			}
		})
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }
