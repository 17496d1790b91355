package shard

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
)

func holds(ents []codec.Entity, ids ...uint32) bool {
	for _, id := range ids {
		if !slices.ContainsFunc(ents, func(e codec.Entity) bool { return e.ID == id }) {
			return false
		}
	}
	return true
}

// readState reads the next snapshot or delta without acking it (a client
// that never acks). It returns the entity ids of a snapshot; a delta is
// unexpected for a client that never acked.
func readState(tc *tclient) (ids []uint32, ok bool) {
	for {
		env, _ := tc.next()
		if env == nil {
			return nil, false
		}
		if s := env.GetSnapshot(); s != nil {
			for _, e := range s.Entities {
				ids = append(ids, e.Id)
			}
			return ids, true
		}
		if env.GetDelta() != nil {
			tc.t.Fatalf("a delta to a client that never acked")
		}
	}
}

// countStates counts the snapshots and deltas tc receives for d (acking
// them as a client does).
func countStates(tc *tclient, d time.Duration) int {
	n := 0
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		var b []byte
		select {
		case <-deadline.C:
			return n
		case b = <-tc.c.out:
		case b = <-tc.c.dgram:
		}
		var env codec.ServerEnvelope
		if err := codec.DecodeServer(b, false, &env); err != nil {
			tc.t.Fatal(err)
		}
		if env.GetSnapshot() != nil || env.GetDelta() != nil {
			n++
			tc.apply(&env)
		}
	}
}

// TestUnchangedWorldSendsNothing: once three clients of a world that
// stands still hold its state, nothing is sent to the two that acked it
// (one on datagrams, one on the reliable lane) for 2 s, and a client that
// never acks gets at most a 1 Hz repeat; when one moves its window, it
// gets its new state at once.
func TestUnchangedWorldSendsNothing(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"still"}, still: true})
	a := e.serve("webtransport", true)
	ha := a.handshake(e.hello("ada", "still"))
	b := e.serve("websocket", false)
	hb := b.handshake(e.hello("bea", "still"))
	c := e.serve("webrtc", true)
	hc := c.handshake(e.hello("cy", "still"))
	all := []uint32{ha.EntityId, hb.EntityId, hc.EntityId}
	a.until("everyone in a's window", func(*codec.ServerEnvelope) bool { return holds(a.last, hb.EntityId, hc.EntityId) })
	b.until("everyone in b's window", func(*codec.ServerEnvelope) bool { return holds(b.last, ha.EntityId, hc.EntityId) })
	for {
		ids, ok := readState(c)
		if !ok {
			t.Fatal("c closed")
		}
		if slices.Contains(ids, ha.EntityId) && slices.Contains(ids, hb.EntityId) {
			break
		}
	}
	_ = all

	// The quiet window: the shard still ticks at 20 Hz.
	var na, nb, nc int
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); na = countStates(a, 2*time.Second) }()
	go func() { defer wg.Done(); nb = countStates(b, 2*time.Second) }()
	go func() {
		defer wg.Done()
		deadline := time.After(2 * time.Second)
		for {
			select {
			case <-deadline:
				return
			case <-c.c.dgram:
				nc++
			case <-c.c.out:
				nc++
			}
		}
	}()
	wg.Wait()
	if na != 0 || nb != 0 {
		t.Fatalf("a still world sent %d states to a and %d to b in 2 s, want none", na, nb)
	}
	if nc > 3 {
		t.Fatalf("a client that never acks got %d repeats in 2 s, want at most 1 Hz", nc)
	}
	t.Logf("2 s of a still world: %d, %d and %d (never acks) states", na, nb, nc)
	// With nothing to write, the writers of a and b end: an idle session
	// keeps one goroutine, its reader.
	for _, id := range []string{ha.SessionId, hb.SessionId} {
		s := e.g.lookup(id)
		testwait.For(t, "an idle session's writer ended", func() bool { return !s.writerOn.Load() })
	}

	// A moved window is sent at once, whatever the world does.
	a.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Presence{Presence: &codec.PresencePacket{Seq: 1, Position: &codec.Vec3{XMm: 150_000}}}})
	a.until("the window moved away from the others", func(env *codec.ServerEnvelope) bool {
		return (env.GetDelta() != nil || env.GetSnapshot() != nil) && !holds(a.last, hb.EntityId) && !holds(a.last, hc.EntityId)
	})
}

// TestGoroutinesPerSession counts the goroutines a session adds, shard
// link and all: the reader (the caller of Serve, the transport's own
// goroutine) and the writer. Nothing per session on the link.
func TestGoroutinesPerSession(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 50})
	warm := e.serve("websocket", false) // the link's lanes are all up and used
	warm.handshake(e.hello("warm", "orun-grove"))
	warm.until("state", func(env *codec.ServerEnvelope) bool { return env.GetSnapshot() != nil })
	g0 := runtime.NumGoroutine()
	const n = 40
	clients := make([]*tclient, n)
	for i := range clients {
		clients[i] = e.serve([]string{"webtransport", "webrtc", "websocket"}[i%3], i%3 != 2)
		clients[i].handshake(e.hello(fmt.Sprintf("u%d", i), "orun-grove"))
		clients[i].send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Presence{Presence: &codec.PresencePacket{Seq: 1, Position: &codec.Vec3{XMm: int32(i * 1000)}}}})
	}
	for _, tc := range clients {
		tc.until("state", func(env *codec.ServerEnvelope) bool { return env.GetSnapshot() != nil || env.GetDelta() != nil })
	}
	g1 := runtime.NumGoroutine()
	per := float64(g1-g0) / n
	t.Logf("%d sessions: %d goroutines more, %.2f per session", n, g1-g0, per)
	if g1-g0 > 2*n+4 { // a few presence timer callbacks may be in flight
		t.Fatalf("%.2f goroutines per session, want at most 2 (reader and writer)", per)
	}
	for _, tc := range clients {
		_ = tc.c.Close(1000, "")
	}
	testwait.For(t, "sessions gone", func() bool { return e.g.Sessions() == 1 })
}

// TestStalledClientDoesNotHoldLane puts every session on one lane: a
// client that never reads, flooded with world events, loses them (counted)
// while another client's actions are applied and acknowledged in full.
func TestStalledClientDoesNotHoldLane(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.LinkLanes, c.ControlQueue = 1, 8 },
		shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 5})
	sc := newMemConn("websocket", false)
	sc.out = make(chan []byte, 2)
	stalled := e.serveConn(sc)
	stalled.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: e.hello("stalled", "orun-grove")}})
	active := e.serve("webtransport", true)
	active.handshake(e.hello("active", "orun-grove"))
	testwait.For(t, "both sessions up", func() bool { return e.g.Sessions() == 2 })
	dropped := func() float64 { return testutil.ToFloat64(e.g.m.drops.WithLabelValues(dropEventQueue)) }
	const actions = 400
	for id := uint64(1); id <= actions; id += 20 {
		active.sendActions(id, id+19)
	}
	active.until("every action acknowledged", func(env *codec.ServerEnvelope) bool { return env.GetActionAck().GetActionId() == actions })
	testwait.For(t, "the stalled client's events dropped and counted", func() bool { return dropped() > 0 })
	if got := e.shards["s1"].Applied(active.hello.SessionId); len(got) != actions {
		t.Fatalf("applied %d actions, want %d", len(got), actions)
	}
	if len(sc.out) != cap(sc.out) {
		t.Fatal("the stalled client was not stalled")
	}
	t.Logf("events dropped for the stalled client: %.0f", dropped())
}

// newBenchSession is a session on discardConn with a gateway of default
// config and an unlimited budget, as the per-message tests use it.
func newBenchSession(t testing.TB) (*Gateway, *session) {
	signer, _ := auth.New([]byte("0123456789abcdef0123456789abcdef"), nil)
	cfg := DefaultConfig()
	cfg.ReplicationBps = 1 << 40
	g, err := NewGateway(cfg, Deps{Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(context.Background(), g, discardConn{}, nil, &codec.ClientHello{}, auth.Access{}, codec.Negotiation{Enabled: codec.ServerCapabilities})
	s.lane = &lane{notify: make(chan struct{}, 1)}
	s.handle = 7
	s.writerOn.Store(true) // the test is the writer
	s.win = codec.WindowFor(&codec.PresencePacket{Position: &codec.Vec3{XMm: 10_000, YMm: -20_000}}, 0, nil)
	return g, s
}

// TestSessionPathAllocs holds the per-message path to zero allocations:
// the shared snapshot and its index, projection, delta, encoding and send
// (a tick); decoding presence and acks and forwarding presence to the lane
// (the reader); a ping's pong and an action ack through the writer's
// batch.
func TestSessionPathAllocs(t *testing.T) {
	_, s := newBenchSession(t)
	worlds := benchWorlds(16, 500)
	feed := &snapFeed{}
	var scratch codec.World
	k := 0
	var sent float64
	tick := func() {
		w := worlds[k%len(worlds)]
		k++
		seq := uint64(k) // sequences only grow, as a shard's do
		scratch.InstanceID, scratch.Sequence, scratch.ServerTimeMs = w.InstanceID, seq, w.ServerTimeMs
		scratch.Entities = append(scratch.Entities[:0], w.Entities...)
		sn := feed.publish(&scratch)
		s.offerSnap(sn)
		got := s.takeSnap()
		if !s.sendState(got) {
			t.Fatal("send failed")
		}
		got.release()
		s.acked.Store(seq)
	}
	for range 40 { // warm: arrays, the feed's pool, the history
		tick()
	}
	bytesSent := func() float64 { return testutil.ToFloat64(s.g.m.bytesDelta) }
	sent = bytesSent()
	if n := testing.AllocsPerRun(100, tick); n != 0 {
		t.Errorf("tick: %.1f allocs, want 0", n)
	}
	if bytesSent()-sent < 100*100 { // ~100 bytes of delta or more each tick: the path ran in full
		t.Errorf("the ticks sent %.0f delta bytes: the measured path skipped the send", bytesSent()-sent)
	}

	pres, _ := proto.Marshal(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Presence{Presence: &codec.PresencePacket{
		Seq: 1, Position: &codec.Vec3{XMm: 1200, YMm: -300}, HeadingMdeg: 9000, RadiusMm: 40_000, ClientTimeMs: 1764690000123}}})
	ack, _ := proto.Marshal(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ack{Ack: &codec.Ack{SnapshotSequence: 9}}})
	seq := uint64(1)
	read := func() {
		if err := codec.DecodeClientMsg(pres, false, &s.msg); err != nil {
			t.Fatal(err)
		}
		seq++
		s.msg.Presence.Seq = seq
		s.presMu.Lock()
		s.presNext = time.Time{} // due now: forwarded at once, not by the timer
		s.presMu.Unlock()
		s.onPresence(&s.msg.Presence)
		s.lane.mu.Lock()
		s.lane.out = s.lane.out[:0]
		s.lane.mu.Unlock()
		if err := codec.DecodeClientMsg(ack, false, &s.msg); err != nil {
			t.Fatal(err)
		}
	}
	read()
	if n := testing.AllocsPerRun(100, read); n != 0 {
		t.Errorf("reader: %.1f allocs, want 0", n)
	}

	batch := func() {
		s.enqueue(outItem{kind: outPong, a: 1, b: 2})
		s.actionAck.Add(1)
		if !s.writeAll() || !s.flush() {
			t.Fatal("write failed")
		}
		<-s.notify
	}
	batch()
	if n := testing.AllocsPerRun(100, batch); n != 0 {
		t.Errorf("writer batch: %.1f allocs, want 0", n)
	}
}

// BenchmarkSessionRead is the reader's cost per presence (decode, window,
// forward) and per ack.
func BenchmarkSessionRead(b *testing.B) {
	_, s := newBenchSession(b)
	pres, _ := proto.Marshal(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Presence{Presence: &codec.PresencePacket{
		Seq: 1, Position: &codec.Vec3{XMm: 1200, YMm: -300}, HeadingMdeg: 9000, ClientTimeMs: 1764690000123}}})
	ack, _ := proto.Marshal(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ack{Ack: &codec.Ack{SnapshotSequence: 9}}})
	b.ReportAllocs()
	seq := uint64(1)
	for b.Loop() {
		_ = codec.DecodeClientMsg(pres, false, &s.msg)
		seq++
		s.msg.Presence.Seq = seq
		s.presNext = time.Time{}
		s.onPresence(&s.msg.Presence)
		s.lane.out = s.lane.out[:0]
		_ = codec.DecodeClientMsg(ack, false, &s.msg)
	}
}

// TestLaggingClientThrottled: a client that stops acking is sent at most
// maxInFlight states beyond its last ack (then one a second, counted as
// acks_behind), and gets deltas against its acked state again as soon as
// it acks.
func TestLaggingClientThrottled(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 50})
	c := e.serve("webtransport", true)
	c.handshake(e.hello("ada", "orun-grove"))
	c.until("a state, acked", func(env *codec.ServerEnvelope) bool { return env.GetSnapshot() != nil })
	behind := func() float64 { return testutil.ToFloat64(e.g.m.drops.WithLabelValues(dropInFlight)) }
	// Stop acking: read raw for 2 s (40 ticks).
	n := 0
	deadline := time.After(2 * time.Second)
	for done := false; !done; {
		select {
		case <-deadline:
			done = true
		case <-c.c.dgram:
			n++
		case <-c.c.out:
			n++
		}
	}
	if n > maxInFlight+1+3 {
		t.Fatalf("%d states in 2 s to a client that stopped acking, want at most %d (+1 Hz)", n, maxInFlight+1)
	}
	if behind() == 0 {
		t.Fatal("no acks_behind counted")
	}
	// Ack the state held: deltas against it resume.
	c.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ack{Ack: &codec.Ack{SnapshotSequence: c.lastSeq}}})
	c.until("a delta against the acked state", func(env *codec.ServerEnvelope) bool { return env.GetDelta() != nil })
	t.Logf("a client 2 s behind on acks got %d states; %.0f held back", n, behind())
}
