package shard

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// TestSlowClientDoesNotDelayOthers stalls one client completely (it never
// reads; its reliable lane fills) and checks that another client on the same
// instance keeps receiving every tick while the stalled one drops stale
// snapshots. The gaps are measured and logged, not asserted.
func TestSlowClientDoesNotDelayOthers(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 300})
	sc := newMemConn("websocket", false)
	sc.out = make(chan []byte, 8) // a small transport buffer: it fills fast
	slow := e.serveConn(sc)
	slow.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: e.hello("slow", "orun-grove")}})
	fast := e.serve("websocket", false)
	fast.handshake(e.hello("fast", "orun-grove"))

	stale := func() float64 { return testutil.ToFloat64(e.g.m.drops.WithLabelValues(dropStale)) }
	// Keep reading the fast client while the slow one fills up.
	fast.until("slow client's lane full", func(*codec.ServerEnvelope) bool { return len(slow.c.out) == cap(slow.c.out) })
	before := stale()

	var gaps []time.Duration
	last := time.Now()
	startSeq := uint64(0)
	fast.until("40 fresh snapshots", func(env *codec.ServerEnvelope) bool {
		if env.GetSnapshot() == nil && env.GetDelta() == nil {
			return false
		}
		now := time.Now()
		gaps = append(gaps, now.Sub(last))
		last = now
		if startSeq == 0 {
			startSeq = fast.lastSeq
		}
		return fast.lastSeq >= startSeq+40
	})
	testwait.For(t, "stale drops counted for the slow client", func() bool { return stale() > before })
	if len(slow.c.out) != cap(slow.c.out) {
		t.Fatal("the slow client was not stalled throughout")
	}
	// Every tick reached the fast client (sequences advance one by one).
	if n := len(gaps); n < 41 || n > 45 {
		t.Logf("fast client received %d snapshots for 40 ticks", n)
	}
	maxGap := time.Duration(0)
	for _, g := range gaps[1:] {
		maxGap = max(maxGap, g)
	}
	t.Logf("while another client was stalled: %d snapshots, max gap %s (tick 50ms), stale drops %.0f", len(gaps), maxGap, stale()-before)
}

func TestPresenceCoalesced(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 10})
	obs := observe(t, e.shards["s1"].Addr(), "orun-grove")
	c := e.serve("webtransport", true)
	h := c.handshake(e.hello("ada", "orun-grove"))
	const n = 200
	for i := 1; i <= n; i++ {
		c.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Presence{Presence: &codec.PresencePacket{Seq: uint64(i), Position: &codec.Vec3{XMm: int32(i), YMm: 5}}}})
	}
	// The latest presence wins at the shard...
	testwait.For(t, "latest presence applied", func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		var newest *codec.World
		for _, w := range obs.worlds {
			if newest == nil || w.Sequence > newest.Sequence {
				newest = w
			}
		}
		if newest == nil {
			return false
		}
		for _, en := range newest.Entities {
			if en.ID == h.EntityId {
				return en.X == n && en.Y == 5
			}
		}
		return false
	})
	// ...and what exceeded 20 Hz was coalesced and counted.
	if got := testutil.ToFloat64(e.g.m.presenceCoal); got == 0 {
		t.Fatal("no presence coalesced")
	}
}

func TestTier2AgentCapAndFocus(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 500})
	obs := observe(t, e.shards["s1"].Addr(), "orun-grove")
	c := e.serve("webrtc", true)
	h := e.hello("ada", "orun-grove")
	h.AuthorityKind = codec.AuthorityKind_TIER2_FALLBACK
	h.RendererProfile = &codec.RendererProfile{Renderer: codec.Renderer_WEBGL2, Constrained: true}
	sh := c.handshake(h)
	// Focus on the agent farthest from the client's position.
	var w *codec.World
	for w == nil {
		c.until("snapshot", func(env *codec.ServerEnvelope) bool {
			return env.GetSnapshot() != nil || env.GetDelta() != nil
		})
		w = obs.world(t, c.lastSeq)
	}
	var focus codec.Entity
	for _, en := range w.Entities {
		if !en.IsPlayer() && int64(en.X)*int64(en.X)+int64(en.Y)*int64(en.Y) > int64(focus.X)*int64(focus.X)+int64(focus.Y)*int64(focus.Y) {
			focus = en
		}
	}
	c.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Presence{Presence: &codec.PresencePacket{Seq: 1, Position: &codec.Vec3{}, FocusAgentId: focus.ID}}})
	c.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{}}})
	c.until("pong", func(env *codec.ServerEnvelope) bool { return env.GetPong() != nil })
	for n := 0; n < 5; {
		env := c.until("state", func(env *codec.ServerEnvelope) bool { return env.GetSnapshot() != nil || env.GetDelta() != nil })
		_ = env
		n++
		agents, _ := countKinds(c.last)
		if agents > 6 {
			t.Fatalf("constrained WebGL2 client got %d agents, cap 6", agents)
		}
		found := false
		for _, en := range c.last {
			found = found || en.ID == focus.ID
			if en.ID == sh.EntityId {
				t.Fatal("client sent its own avatar")
			}
		}
		if !found {
			t.Fatalf("focused agent %d culled", focus.ID)
		}
	}
}

func TestDrain(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.DrainWindow = 200 * time.Millisecond },
		shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 20})
	// A second edge sharing the pins (what a Redis PinStore gives a fleet).
	cfgB := e.g.cfg
	b, err := NewGateway(cfgB, Deps{Signer: e.signer, Now: e.clock.Now, Pins: e.g.pins})
	if err != nil {
		t.Fatal(err)
	}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); _ = b.Run(e.ctx) }()
	testwait.For(t, "edge B linked", b.Ready)

	const n = 10
	clients := make([]*tclient, n)
	hellos := make([]*codec.ServerHello, n)
	for i := range clients {
		clients[i] = e.serve("websocket", false)
		hellos[i] = clients[i].handshake(e.hello("ada", "orun-grove"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var drainErr error
	wg.Add(1)
	go func() { defer wg.Done(); drainErr = e.g.Drain(ctx) }()
	testwait.For(t, "unready", func() bool { return !e.g.Ready() })
	for i, c := range clients {
		env := c.until("drain", func(env *codec.ServerEnvelope) bool { return env.GetDrain() != nil })
		d := env.GetDrain()
		if d.ResumeToken == "" || time.Duration(d.ReconnectAfterMs)*time.Millisecond > e.g.cfg.DrainReconnectMax {
			t.Fatalf("bad drain %+v", d)
		}
		<-c.c.done
		if got := c.c.code.Load(); got != codec.CodeDraining.CloseCode() {
			t.Fatalf("close code %d", got)
		}
		// The token works on the other edge: same session, same shard.
		rc := &tclient{t: t, c: newMemConn("webtransport", true), states: map[uint64][]codec.Entity{}}
		e.wg.Add(1)
		go func() { defer e.wg.Done(); b.Serve(e.ctx, rc.c) }()
		h := e.hello("ada", "")
		h.ResumeToken = d.ResumeToken
		if rh := rc.handshake(h); rh.SessionId != hellos[i].SessionId || rh.ShardId != "s1" {
			t.Fatalf("resume after drain: %+v", rh)
		}
	}
	wg.Wait()
	if drainErr != nil {
		t.Fatal(drainErr)
	}
	// A draining edge refuses new sessions.
	c := e.serve("websocket", false)
	c.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: e.hello("ada", "orun-grove")}})
	if got, _ := c.expectError(); codec.Code(got.Code) != codec.CodeDraining {
		t.Fatalf("got %q", got.Code)
	}
}
