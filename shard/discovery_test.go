package shard

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/shard/shardsim"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/redisstate"
)

// discoveryEvery is the announce interval in these tests (TTL three of
// them).
const discoveryEvery = 50 * time.Millisecond

// startDiscoveryGateway runs a gateway on cfg with a shared shard
// directory, until the test ends.
func (e *testEnv) startDiscoveryGateway(t *testing.T, cfg Config, dir state.ShardDirectory) *Gateway {
	t.Helper()
	g, err := NewGateway(cfg, Deps{Signer: e.signer, Now: e.clock.Now, Shards: dir})
	if err != nil {
		t.Fatal(err)
	}
	g.disc.every = discoveryEvery
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = g.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return g
}

func listed(t *testing.T, dir state.ShardDirectory, id string) (state.ShardRecord, bool) {
	t.Helper()
	recs, err := dir.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID == id {
			return r, true
		}
	}
	return state.ShardRecord{}, false
}

// TestDiscoveryOverRedis: gateway A, configured with shard s1, announces
// it in a Redis directory; gateway B, configured with no shard, discovers
// s1, links to it and runs a session for s1's instance; a gateway
// configured with its own (unreachable) s1 keeps its configuration; and
// once no edge can reach s1 any more, its record lapses.
func TestDiscoveryOverRedis(t *testing.T) {
	addr, _ := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	dir := redisstate.NewShardDirectory(redisstate.New(rdb, redisstate.Options{}))

	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 10})
	a := e.startDiscoveryGateway(t, e.g.cfg, dir)
	testwait.For(t, "A's link to s1", func() bool { return a.LinkUp("s1") })
	testwait.For(t, "s1 announced", func() bool {
		r, ok := listed(t, dir, "s1")
		return ok && r.Addr == e.shards["s1"].Addr() && slices.Equal(r.Instances, []string{"orun-grove"})
	})

	bare := DefaultConfig()
	bare.HandshakeTimeout = 5 * time.Second
	b := e.startDiscoveryGateway(t, bare, dir)
	testwait.For(t, "B to discover and link s1", func() bool { return b.LinkUp("s1") })
	if !b.Ready() {
		t.Fatal("B is unready with its discovered link up")
	}
	if r, err := b.Directory().RouteFor("orun-grove"); err != nil || r.ShardID != "s1" || !r.Healthy {
		t.Fatalf("B's route: %+v %v", r, err)
	}
	c := e.serveOn(b, "websocket", false)
	if h := c.handshake(e.hello("ada", "orun-grove")); h.ShardId != "s1" || h.Acceptance != codec.Acceptance_ACCEPTED {
		t.Fatalf("session on B: %+v", h)
	}
	c.until("a snapshot of orun-grove through B", func(env *codec.ServerEnvelope) bool {
		return env.GetSnapshot().GetInstanceId() == "orun-grove" || env.GetDelta().GetInstanceId() == "orun-grove"
	})
	c.sendActions(1, 2)
	c.until("ack 2", func(env *codec.ServerEnvelope) bool { return env.GetActionAck().GetActionId() == 2 })

	// Config wins: C names s1 itself (at an address where nothing
	// answers); what the fleet announces neither relinks nor reroutes it.
	dead := DefaultConfig()
	dead.Shards = map[string]string{"s1": "127.0.0.1:9"}
	cdir := &watchDir{ShardDirectory: dir}
	cg := e.startDiscoveryGateway(t, dead, cdir)
	testwait.For(t, "C to list the directory (with s1 in it) three times", func() bool { return cdir.lists.Load() >= 3 })
	if l := cg.link("s1"); l == nil || l.address() != "127.0.0.1:9" || cg.LinkUp("s1") {
		t.Fatalf("C's configured s1 was replaced by the announced one: %+v", l)
	}
	if _, err := cg.Directory().RouteFor("orun-grove"); !errors.Is(err, ErrUnknownInstance) {
		t.Fatalf("C routed a configured shard's instances from the fleet: %v", err)
	}

	// s1 stops: every link to it goes down, nobody announces it, and its
	// record lapses within the TTL (three intervals).
	_ = e.shards["s1"].Close()
	testwait.For(t, "links down", func() bool { return !a.LinkUp("s1") && !b.LinkUp("s1") })
	testwait.For(t, "s1 to lapse from the directory", func() bool { _, ok := listed(t, dir, "s1"); return !ok })
	// B's discovered link stays (it redials until the gateway stops).
	if b.link("s1") == nil {
		t.Fatal("B dropped its discovered link")
	}
}

// TestDiscoveryMemoryDirectory: the memory directory serves two gateways
// of one process the same way, and discovery never duplicates a link.
func TestDiscoveryMemoryDirectory(t *testing.T) {
	dir := state.NewMemoryShardDirectory(nil)
	e := newTestEnv(t, nil,
		shardSpec{id: "east", instances: []string{"orun-grove"}, agents: 5},
		shardSpec{id: "west", instances: []string{"aye-shore"}, agents: 5})
	e.startDiscoveryGateway(t, e.g.cfg, dir)
	bare := DefaultConfig()
	bare.EdgeID = "edge-b"
	bdir := &watchDir{ShardDirectory: dir}
	b := e.startDiscoveryGateway(t, bare, bdir)
	testwait.For(t, "B to link both shards", func() bool { return b.LinkUp("east") && b.LinkUp("west") })
	for inst, want := range map[string]string{"orun-grove": "east", "aye-shore": "west"} {
		c := e.serveOn(b, "webtransport", true)
		if h := c.handshake(e.hello("bea", inst)); h.ShardId != want {
			t.Fatalf("%s on %s, want %s", inst, h.ShardId, want)
		}
	}
	// B announces what it linked too (so the shards outlive A in the
	// directory); the rounds since changed nothing.
	testwait.For(t, "B to announce both shards", func() bool {
		return bdir.announcedBy("east", "edge-b") && bdir.announcedBy("west", "edge-b")
	})
	if n := len(b.linkList()); n != 2 {
		t.Fatalf("B holds %d links, want 2", n)
	}
}

// TestDiscoveryFollowsMovedShard: a shard that restarts at another address
// is relinked by an edge that discovered it, without restarting that edge,
// once an edge configured with the new address announces it; a link that
// is up never moves.
func TestDiscoveryFollowsMovedShard(t *testing.T) {
	dir := state.NewMemoryShardDirectory(nil)
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 5})
	e.startDiscoveryGateway(t, e.g.cfg, dir) // A: configured with s1's first address
	bare := DefaultConfig()
	bare.HandshakeTimeout = 5 * time.Second
	b := e.startDiscoveryGateway(t, bare, dir)
	first := e.shards["s1"].Addr()
	testwait.For(t, "B to link s1", func() bool { return b.LinkUp("s1") })
	if l := b.link("s1"); l.moveTo("127.0.0.1:9") || l.address() != first {
		t.Fatalf("an up link moved: now at %s", l.address())
	}

	// s1 restarts elsewhere; an edge configured with the new address
	// links it and announces it.
	_ = e.shards["s1"].Close()
	testwait.For(t, "B's link down", func() bool { return !b.LinkUp("s1") })
	moved, err := shardsim.Start(e.ctx, shardsim.Config{Listen: "127.0.0.1:0", ShardID: "s1", Instances: []string{"orun-grove"}, Agents: 5, Players: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = moved.Close() })
	cfgC := DefaultConfig()
	cfgC.EdgeID = "edge-c"
	cfgC.Shards = map[string]string{"s1": moved.Addr()}
	cfgC.Instances = map[string]string{"orun-grove": "s1"}
	e.startDiscoveryGateway(t, cfgC, dir)

	testwait.For(t, "B to relink s1 at its new address", func() bool { return b.LinkUp("s1") })
	if got := b.link("s1").address(); got != moved.Addr() {
		t.Fatalf("B linked s1 at %s, want %s", got, moved.Addr())
	}
	if r, err := b.Directory().RouteFor("orun-grove"); err != nil || r.Addr != moved.Addr() || !r.Healthy {
		t.Fatalf("B's route after the move: %+v %v", r, err)
	}
	c := e.serveOn(b, "websocket", false)
	if h := c.handshake(e.hello("ada", "orun-grove")); h.ShardId != "s1" || h.Acceptance != codec.Acceptance_ACCEPTED {
		t.Fatalf("session on B after the move: %+v", h)
	}
	c.sendActions(1, 1)
	c.until("ack 1 from the moved shard", func(env *codec.ServerEnvelope) bool { return env.GetActionAck().GetActionId() == 1 })
}

// watchDir is a real directory that records who announced what, and
// counts the listings that held s1.
type watchDir struct {
	state.ShardDirectory
	lists atomic.Int32

	mu        sync.Mutex
	announced map[string]bool // guarded by mu: "shard@edge"
}

func (d *watchDir) Announce(ctx context.Context, rec state.ShardRecord, ttl time.Duration) error {
	err := d.ShardDirectory.Announce(ctx, rec, ttl)
	if err == nil {
		d.mu.Lock()
		if d.announced == nil {
			d.announced = map[string]bool{}
		}
		d.announced[rec.ID+"@"+rec.EdgeID] = true
		d.mu.Unlock()
	}
	return err
}

func (d *watchDir) announcedBy(shard, edge string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.announced[shard+"@"+edge]
}

func (d *watchDir) List(ctx context.Context) ([]state.ShardRecord, error) {
	recs, err := d.ShardDirectory.List(ctx)
	if err == nil {
		for _, r := range recs {
			if r.ID == "s1" {
				d.lists.Add(1)
			}
		}
	}
	return recs, err
}
