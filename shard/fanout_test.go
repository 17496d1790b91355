package shard

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/shard/internal/linkio"
)

// observer is a bare link client that records an instance's snapshots by
// sequence: the ground truth the edge's projections are checked against.
type observer struct {
	mu     sync.Mutex
	worlds map[uint64]*codec.World
	newest uint64
	wg     sync.WaitGroup
	conn   *quic.Conn
}

func observe(t *testing.T, addr, instance string) *observer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr, &tls.Config{NextProtos: []string{linkio.ALPN}, InsecureSkipVerify: true}, nil) //nolint:gosec // test shard, self-signed
	if err != nil {
		t.Fatal(err)
	}
	st, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*codec.LinkEdgeFrame{
		{Msg: &codec.LinkEdgeFrame_Hello{Hello: &codec.LinkHello{Version: linkio.Version, EdgeId: "observer"}}},
		{Msg: &codec.LinkEdgeFrame_Subscribe{Subscribe: &codec.LinkSubscribe{InstanceIds: []string{instance}}}},
	} {
		b, _ := linkio.Frame(m)
		if _, err := st.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	o := &observer{worlds: map[uint64]*codec.World{}, conn: conn}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		r := linkio.NewReader(st)
		for {
			var f codec.LinkShardFrame
			if err := r.ReadShard(&f); err != nil {
				return
			}
			if snap := f.GetSnapshot(); snap != nil {
				w := new(codec.World)
				w.FromSnapshot(snap)
				o.mu.Lock()
				o.worlds[w.Sequence] = w
				o.newest = max(o.newest, w.Sequence)
				o.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { _ = conn.CloseWithError(0, ""); o.wg.Wait() })
	return o
}

// world returns snapshot seq, or nil if the observer's link skipped it (a
// shard keeps only the latest snapshot for a slow link).
func (o *observer) world(t *testing.T, seq uint64) *codec.World {
	t.Helper()
	var w *codec.World
	testwait.For(t, fmt.Sprintf("observer has snapshot %d", seq), func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		w = o.worlds[seq]
		return w != nil || o.newest > seq
	})
	return w
}

func countKinds(ents []codec.Entity) (agents, players int) {
	for i := range ents {
		if ents[i].IsPlayer() {
			players++
		} else {
			agents++
		}
	}
	return
}

// TestFanout200 puts 200 clients on one 500-agent instance, each with its
// own interest window: every state a client holds (after applying deltas)
// stays within 32 agents / 8 players and equals the projection of the
// shard's snapshot for that client's window.
func TestFanout200(t *testing.T) {
	if testing.Short() {
		t.Skip("200 sessions")
	}
	const clients, checks = 200, 4
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 500})
	obs := observe(t, e.shards["s1"].Addr(), "orun-grove")

	type result struct {
		err  error
		lags []time.Duration
	}
	results := make(chan result, clients)
	var wg sync.WaitGroup
	for i := range clients {
		tc := e.serve([]string{"webtransport", "webrtc", "websocket"}[i%3], i%3 != 2)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lags, err := runFanoutClient(t, e, obs, tc, i, checks)
			results <- result{err: err, lags: lags}
		}()
	}
	wg.Wait()
	close(results)
	var lags []time.Duration
	for r := range results {
		if r.err != nil {
			t.Fatal(r.err)
		}
		lags = append(lags, r.lags...)
	}
	slices.Sort(lags)
	t.Logf("shard tick -> client: %d snapshots, p50 %s, p99 %s, max %s", len(lags),
		lags[len(lags)/2], lags[len(lags)*99/100], lags[len(lags)-1])
}

// runFanoutClient returns an error rather than failing: it runs off the
// test goroutine.
func runFanoutClient(t *testing.T, e *testEnv, obs *observer, tc *tclient, i, checks int) (lags []time.Duration, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("client %d: %v", i, r)
		}
	}()
	ft := &fatalT{TB: t}
	tc.t = ft
	h := tc.handshake(e.hello(fmt.Sprintf("user-%d", i), "orun-grove"))
	p := &codec.PresencePacket{Seq: 1, Position: &codec.Vec3{XMm: int32((i%20)*9000 - 90_000), YMm: int32((i/20)*18000 - 90_000)}, RadiusMm: 30_000}
	tc.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Presence{Presence: p}})
	tc.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: 1}}})
	// Every snapshot after the pong was projected with this window.
	tc.until("pong", func(env *codec.ServerEnvelope) bool { return env.GetPong() != nil })
	win := codec.WindowFor(p, h.EntityId, nil)
	// Deltas need this client's acks to have reached the edge; on a starved
	// machine the first few states can all be full snapshots, so keep
	// reading (bounded) until a delta has been checked too.
	deltas, seen := 0, 0
	for n := 0; n < checks || (deltas == 0 && seen < maxFanoutStates); seen++ {
		env, _ := tc.next()
		if env == nil {
			return nil, fmt.Errorf("client %d: closed", i)
		}
		tc.apply(env)
		if env.GetSnapshot() == nil && env.GetDelta() == nil {
			continue
		}
		lags = append(lags, time.Since(time.UnixMilli(int64(env.GetSnapshot().GetServerTimeMs()+env.GetDelta().GetServerTimeMs()))))
		if env.GetDelta() != nil {
			deltas++
		}
		if a, pl := countKinds(tc.last); a > codec.GroundVisibleAgentCap || pl > codec.GroundVisiblePlayerCap {
			return nil, fmt.Errorf("client %d: %d agents, %d players", i, a, pl)
		}
		w := obs.world(t, tc.lastSeq)
		if w == nil {
			continue // skipped by the observer's own link; check another
		}
		want := codec.Project(nil, w, win)
		if !slices.Equal(tc.last, want) {
			return nil, fmt.Errorf("client %d seq %d: applied state differs from the projection:\n got %v\nwant %v", i, tc.lastSeq, tc.last, want)
		}
		n++
	}
	if deltas == 0 {
		return nil, fmt.Errorf("client %d: no deltas", i)
	}
	_ = tc.c.Close(1000, "")
	return lags, nil
}

// maxFanoutStates bounds how long a fan-out client waits for its first delta.
const maxFanoutStates = 200

// fatalT turns Fatal into a panic recovered by the client goroutine.
type fatalT struct{ testing.TB }

func (f *fatalT) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (f *fatalT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (f *fatalT) Helper()                           {}
