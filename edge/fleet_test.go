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

// TestFleetFailover: two edge processes share one Redis and one reference
// shard. Clients open sessions on edge A and apply actions; edge A is
// killed with SIGKILL; every client resumes on edge B with its resume
// token, keeps its session id and shard, and the shard has applied every
// acknowledged action exactly once.
func TestFleetFailover(t *testing.T) {
	bin, err := buildEdgeBinary()
	if err != nil {
		t.Fatal(err)
	}
	rds := redistest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sim, err := shardsim.Start(ctx, shardsim.Config{Listen: "127.0.0.1:0", ShardID: "s1", Instances: []string{"orun-grove"}, Agents: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()

	args := []string{"--dev-shard=false", "--shard", "s1=" + sim.Addr(), "--instance", "orun-grove=s1",
		"--redis-url", "redis://" + rds.Addr + "/0", "--policy", "../bench/loadtest-policy.json"}
	os.Setenv("EGBE_JWT_SECRET", strings.Repeat("fleet-secret-", 4))
	defer os.Unsetenv("EGBE_JWT_SECRET")
	a, err := bench.StartEdge(ctx, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	b, err := bench.StartEdge(ctx, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()

	const clients = 20
	type client struct {
		c       *egbeclient.Conn
		token   string
		hello   *codec.ServerHello
		lastAck uint64
	}
	cs := make([]*client, clients)
	for i := range cs {
		tok, err := a.Token(fmt.Sprintf("fleet-user-%d", i)) // minted by A, verified by B: one secret
		if err != nil {
			t.Fatal(err)
		}
		c, err := egbeclient.Dial(ctx, egbeclient.Options{Kind: "websocket", HTTPBase: a.HTTPBase})
		if err != nil {
			t.Fatal(err)
		}
		h, err := c.Hello(ctx, helloFor(tok))
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = &client{c: c, token: tok, hello: h}
		sendActions(t, c, 1, 5)
	}
	for _, cl := range cs {
		cl.lastAck = awaitAck(t, ctx, cl.c, 5)
	}

	// Crash edge A.
	if err := syscall.Kill(a.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var slowest time.Duration
	for i, cl := range cs {
		<-cl.c.Done()
		cl.c.Close()
		c, err := egbeclient.Dial(ctx, egbeclient.Options{Kind: "websocket", HTTPBase: b.HTTPBase})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		h := helloFor(cl.token)
		h.ResumeToken = cl.hello.GetResumeToken()
		got, err := c.Hello(ctx, h)
		if err != nil {
			t.Fatalf("client %d resume on B: %v", i, err)
		}
		slowest = max(slowest, time.Since(killed))
		if got.GetSessionId() != cl.hello.GetSessionId() || got.GetShardId() != "s1" || !got.GetResumed() {
			t.Fatalf("client %d resumed as %v, want session %s on s1", i, got, cl.hello.GetSessionId())
		}
		sendActions(t, c, 6, 10)
		awaitAck(t, ctx, c, 10)
		if applied := sim.Applied(got.GetSessionId()); !slices.Equal(applied, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) {
			t.Fatalf("client %d: shard applied %v, want 1..10 exactly once", i, applied)
		}
	}
	t.Logf("%d clients resumed on edge B; last one %v after the kill", clients, slowest)
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
