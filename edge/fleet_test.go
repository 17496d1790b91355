package edge

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/bench"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/egbeclient"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/shard/shardsim"
)

// buildEdgeBinary builds cmd/egbe-edge once per test binary.
var buildEdgeBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "egbe-edge-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "egbe-edge")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/egbe-edge").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// startOneShardFleet runs n edge processes on one fresh Redis and one
// reference shard (s1, serving orun-grove with agents agents), sharing
// secret; everything stops when the test ends.
func startOneShardFleet(t *testing.T, ctx context.Context, n, agents int, secret string) []*bench.Target {
	t.Helper()
	bin, err := buildEdgeBinary()
	if err != nil {
		t.Fatal(err)
	}
	rds := redistest.StartServer(t)
	sim, err := shardsim.Start(ctx, shardsim.Config{Listen: "127.0.0.1:0", ShardID: "s1", Instances: []string{"orun-grove"}, Agents: agents})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	t.Setenv("EGBE_JWT_SECRET", secret)
	edges := make([]*bench.Target, n)
	for i := range edges {
		e, err := bench.StartEdge(ctx, bin, "--dev-shard=false", "--shard", "s1="+sim.Addr(), "--instance", "orun-grove=s1",
			"--redis-url", "redis://"+rds.Addr+"/0", "--policy", "../bench/loadtest-policy.json")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Stop)
		edges[i] = e
	}
	return edges
}

// TestFleetFailover: three edge processes share one Redis and two
// reference shards (orun-grove on s1, aye-shore on s2). Clients on edge A,
// spread over both instances, apply actions and keep sending presence at
// 20 Hz; edge A is killed with SIGKILL under that load. Every client resumes
// on edge B or C with its resume token, keeps its session id and shard, and
// each shard has applied every acknowledged action exactly once.
func TestFleetFailover(t *testing.T) {
	bin, err := buildEdgeBinary()
	if err != nil {
		t.Fatal(err)
	}
	rds := redistest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	sims := map[string]*shardsim.Server{}
	for shardID, inst := range map[string]string{"s1": "orun-grove", "s2": "aye-shore"} {
		sim, err := shardsim.Start(ctx, shardsim.Config{Listen: "127.0.0.1:0", ShardID: shardID, Instances: []string{inst}, Agents: 50})
		if err != nil {
			t.Fatal(err)
		}
		defer sim.Close()
		sims[shardID] = sim
	}
	args := []string{"--dev-shard=false",
		"--shard", "s1=" + sims["s1"].Addr(), "--instance", "orun-grove=s1",
		"--shard", "s2=" + sims["s2"].Addr(), "--instance", "aye-shore=s2",
		"--redis-url", "redis://" + rds.Addr + "/0", "--policy", "../bench/loadtest-policy.json"}
	t.Setenv("EGBE_JWT_SECRET", strings.Repeat("fleet-secret-", 4))
	edges := make([]*bench.Target, 3)
	for i := range edges {
		e, err := bench.StartEdge(ctx, bin, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Stop()
		edges[i] = e
	}
	a := edges[0]

	const clients = 30
	type client struct {
		c        *egbeclient.Conn
		token    string
		hello    *codec.ServerHello
		instance string
		stop     chan struct{}
		done     chan struct{}
	}
	cs := make([]*client, clients)
	for i := range cs {
		inst := []string{"orun-grove", "aye-shore"}[i%2]
		tok, err := a.Token(fmt.Sprintf("fleet-user-%d", i)) // minted by A, verified by B and C: one secret
		if err != nil {
			t.Fatal(err)
		}
		c, err := egbeclient.Dial(ctx, egbeclient.Options{Kind: "websocket", HTTPBase: a.HTTPBase})
		if err != nil {
			t.Fatal(err)
		}
		h := helloFor(tok)
		h.InstanceId = inst
		got, err := c.Hello(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		cl := &client{c: c, token: tok, hello: got, instance: inst, stop: make(chan struct{}), done: make(chan struct{})}
		cs[i] = cl
		sendActions(t, c, 1, 5)
		// Load: presence at 20 Hz until the edge dies.
		go func() {
			defer close(cl.done)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for seq := uint64(1); ; seq++ {
				select {
				case <-cl.stop:
					return
				case <-c.Done():
					return
				case <-tick.C:
				}
				_ = c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Presence{Presence: &codec.PresencePacket{Seq: seq, Position: &codec.Vec3{XMm: int32(seq * 10)}}}}, true)
			}
		}()
	}
	for _, cl := range cs {
		awaitAck(t, ctx, cl.c, 5)
	}

	if err := syscall.Kill(a.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var slowest time.Duration
	for i, cl := range cs {
		<-cl.c.Done()
		close(cl.stop)
		<-cl.done
		cl.c.Close()
		to := edges[1+i%2] // B or C
		c, err := egbeclient.Dial(ctx, egbeclient.Options{Kind: "websocket", HTTPBase: to.HTTPBase})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		h := helloFor(cl.token)
		h.InstanceId = cl.instance
		h.ResumeToken = cl.hello.GetResumeToken()
		got, err := c.Hello(ctx, h)
		if err != nil {
			t.Fatalf("client %d resume: %v", i, err)
		}
		slowest = max(slowest, time.Since(killed))
		if got.GetSessionId() != cl.hello.GetSessionId() || got.GetShardId() != cl.hello.GetShardId() || !got.GetResumed() {
			t.Fatalf("client %d resumed as %v, want session %s on %s", i, got, cl.hello.GetSessionId(), cl.hello.GetShardId())
		}
		sendActions(t, c, 6, 10)
		awaitAck(t, ctx, c, 10)
		if applied := sims[got.GetShardId()].Applied(got.GetSessionId()); !slices.Equal(applied, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) {
			t.Fatalf("client %d: shard %s applied %v, want 1..10 exactly once", i, got.GetShardId(), applied)
		}
	}
	t.Logf("%d clients on two shards resumed on edges B and C; last one %v after the kill", clients, slowest)
}

func sendActions(t *testing.T, c *egbeclient.Conn, from, to uint64) {
	t.Helper()
	var batch codec.ActionBatch
	for id := from; id <= to; id++ {
		batch.Actions = append(batch.Actions, &codec.Action{ActionId: id, Kind: "wave"})
	}
	if err := c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Actions{Actions: &batch}}, false); err != nil {
		t.Fatal(err)
	}
}

func awaitAck(t *testing.T, ctx context.Context, c *egbeclient.Conn, id uint64) uint64 {
	t.Helper()
	for {
		env, err := c.Recv(ctx)
		if err != nil {
			t.Fatalf("waiting for ack %d: %v", id, err)
		}
		if a := env.GetActionAck(); a != nil && a.GetActionId() >= id {
			return a.GetActionId()
		}
		if e := env.GetError(); e != nil {
			t.Fatalf("waiting for ack %d: error %v", id, e)
		}
	}
}
