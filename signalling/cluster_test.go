package signalling

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/redisstate"
)

// Two Servers on one real redis-server are two edges of a fleet, each
// behind its own loopback listeners; the clients are real gorilla sockets.

// redisConn connects to addr with short timeouts (fault tests) through
// the state handle every store of the fleet shares (its availability
// tracker included), and counts the commands that reach Redis.
func redisConn(t testing.TB, addr string) (*redisstate.Conn, *redistest.Counter) {
	t.Helper()
	conn, err := redisstate.Open("redis://"+addr+"/?dial_timeout=300ms&read_timeout=1s&write_timeout=1s&max_retries=-1",
		redisstate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := redistest.Count(conn.Client()) // inside the tracker's hook: what reaches Redis
	t.Cleanup(func() { _ = conn.Close() })
	return conn, h
}

// redisFleet is the fleet's stores on conn as edge id sees them, its
// membership with ttl (0: the default).
func redisFleet(t testing.TB, conn *redisstate.Conn, id string, ttl time.Duration) FleetState {
	t.Helper()
	m, err := redisstate.NewMembers(conn, state.Member{ID: id}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return FleetState{Streamers: redisstate.NewStreamers(conn), Inbox: redisstate.NewInbox(conn, 0, nil), Members: m, Health: conn}
}

// edge starts one clustered Server named id on the fleet's stores in conn;
// ttl 0 keeps the defaults. Its membership is beaten, as its edge process
// does, until the test ends or the edge crashes.
func edge(t testing.TB, conn *redisstate.Conn, id string, cfg Config, d Deps, ttl time.Duration) (*harness, *Cluster) {
	t.Helper()
	return fleetEdge(t, redisFleet(t, conn, id, ttl), id, cfg, d, ttl)
}

// fleetEdge starts one clustered Server named id on fs.
func fleetEdge(t testing.TB, fs FleetState, id string, cfg Config, d Deps, ttl time.Duration) (*harness, *Cluster) {
	t.Helper()
	cl, err := NewCluster(id, fs, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl.block = 100 * time.Millisecond // quick Close
	if ttl > 0 {
		cl.setTTL(ttl)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = fs.Members.(interface{ Run(context.Context) error }).Run(ctx)
	}()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	cl.onCrash = stop // a killed edge stops beating too
	t.Cleanup(stop)
	d.Cluster = cl
	return newHarness(t, cfg, d), cl
}

func TestNewClusterValidates(t *testing.T) {
	fs := FleetState{Streamers: state.NewMemoryStreamers(nil), Inbox: state.NewMemoryInbox()}
	mem, _ := state.NewMemoryMembers(nil, 0).For(state.Member{ID: "a"})
	fs.Members = mem
	for _, id := range []string{"", "a b", "{x}", string(make([]byte, 200))} {
		if _, err := NewCluster(id, fs, nil); !errors.Is(err, ErrBadConfig) {
			t.Errorf("edge id %q: %v, want ErrBadConfig", id, err)
		}
	}
	if _, err := NewCluster("a", FleetState{}, nil); !errors.Is(err, ErrBadConfig) {
		t.Errorf("no stores: %v", err)
	}
}

// TestClusterCrossEdge: the streamer is on edge B, the players on edge A;
// every step is the one-edge behaviour.
func TestClusterCrossEdge(t *testing.T) {
	addr, _ := redistest.Start(t)
	conn, ops := redisConn(t, addr)
	a, _ := edge(t, conn, "edge-a", Default(), Deps{}, 0)
	b, _ := edge(t, conn, "edge-b", Default(), Deps{}, 0)
	b.tr = a.tr

	s := b.streamerUp("S1@B", "/?pop=eu-west-1&codecs=H264,VP8", "DefaultStreamer")
	testwait.For(t, "B's streamer in the fleet", func() bool { _, ok := a.srv.Registry().Get("DefaultStreamer"); return ok })
	if info, _ := a.srv.Registry().Get("DefaultStreamer"); info.POP != "eu-west-1" || len(info.Codecs) != 2 || info.State != StateIdle {
		t.Fatalf("fleet view from A: %+v", info)
	}
	a.srv.Registry().Snapshot()                           // as the matchmaker does: refreshes A's view of other edges' ids
	local := a.streamerUp("S2@A", "/", "DefaultStreamer") // taken on B: suffixed fleet-wide

	start := ops.Load()
	ops.Reset()
	p := a.playerUp("P0@A", "/")
	p.send(`{"type":"listStreamers"}`)
	p.expectRaw(`{"type":"streamerList","ids":["DefaultStreamer","DefaultStreamer1"]}`)
	p.send(`{"type":"subscribe","streamerId":"DefaultStreamer"}`)
	pc := s.expect("playerConnected")
	pid, _ := pc["playerId"].(string)
	if want := "Player" + strconv.FormatUint(a.srv.cl.playerBase(), 10); pid != want || pc["dataChannel"] != true || pc["sfu"] != false {
		t.Fatalf("playerConnected %v, want playerId %s", pc, want)
	}
	testwait.For(t, "streaming in the fleet", func() bool {
		i, _ := b.srv.Registry().Get("DefaultStreamer")
		return i.State == StateStreaming && i.Players == 1
	})

	// Offer, then four ICE candidates each way, in order.
	s.send(`{"type":"offer","playerId":"` + pid + `","sdp":"v=0\r\n","x-unknown":[1,2.50]}`)
	for i := range 4 {
		s.send(fmt.Sprintf(`{"type":"iceCandidate","playerId":"%s","candidate":{"candidate":"candidate:%d 1 udp 1 10.0.0.1 5000 typ host","sdpMid":"0","sdpMLineIndex":0}}`, pid, i))
	}
	p.expectRaw(`{"type":"offer","sdp":"v=0\r\n","x-unknown":[1,2.50]}`)
	for i := range 4 {
		p.expectRaw(fmt.Sprintf(`{"type":"iceCandidate","candidate":{"candidate":"candidate:%d 1 udp 1 10.0.0.1 5000 typ host","sdpMid":"0","sdpMLineIndex":0}}`, i))
	}
	p.send(`{"type":"answer","sdp":"v=0\r\n","minBitrateBps":0,"maxBitrateBps":0}`)
	for i := range 4 {
		p.send(fmt.Sprintf(`{"type":"iceCandidate","candidate":{"candidate":"candidate:%d 1 udp 1 10.0.0.2 6000 typ host","sdpMid":"0","sdpMLineIndex":0}}`, 10+i))
	}
	s.expectRaw(`{"type":"answer","sdp":"v=0\r\n","minBitrateBps":0,"maxBitrateBps":0,"playerId":"` + pid + `"}`)
	for i := range 4 {
		s.expectRaw(fmt.Sprintf(`{"type":"iceCandidate","candidate":{"candidate":"candidate:%d 1 udp 1 10.0.0.2 6000 typ host","sdpMid":"0","sdpMLineIndex":0},"playerId":"%s"}`, 10+i, pid))
	}
	t.Logf("Redis round trips (both edges, blocking XREADs included) for connect, list, subscribe, offer, answer, 4+4 ICE: %d; commands %v",
		ops.Load()-start, ops.Reset())
	p.sync()
	s.sync()

	// A player's forged playerId is overwritten; pass-through types pass.
	p.send(`{"type":"dataChannelRequest","playerId":"Player9"}`)
	s.expectRaw(`{"type":"dataChannelRequest","playerId":"` + pid + `"}`)

	// Rename: subscribed players get streamerIdChanged first.
	s.send(`{"type":"endpointId","id":"Renamed"}`)
	p.expectRaw(`{"type":"streamerIdChanged","newID":"Renamed"}`)
	s.expectRaw(`{"type":"endpointIdConfirm","committedId":"Renamed"}`)
	testwait.For(t, "rename in the fleet", func() bool { _, ok := a.srv.Registry().Get("Renamed"); return ok })

	// disconnectPlayer closes the player on A with 1011 and the reason;
	// the streamer then gets playerDisconnected.
	s.send(`{"type":"disconnectPlayer","playerId":"` + pid + `","reason":"kicked"}`)
	p.expectClose(websocket.CloseInternalServerErr, "kicked")
	s.expectRaw(`{"type":"playerDisconnected","playerId":"` + pid + `"}`)

	// unsubscribe, and re-subscribe to a streamer on the player's own edge.
	p1 := a.playerUp("P1@A", "/")
	p1.send(`{"type":"subscribe","streamerId":"Renamed"}`)
	pid1, _ := s.expect("playerConnected")["playerId"].(string)
	p1.send(`{"type":"subscribe","streamerId":"DefaultStreamer1"}`)
	s.expectRaw(`{"type":"playerDisconnected","playerId":"` + pid1 + `"}`)
	local.expect("playerConnected")
	p1.send(`{"type":"subscribe","streamerId":"Renamed"}`)
	local.expectRaw(`{"type":"playerDisconnected","playerId":"` + pid1 + `"}`)
	s.expect("playerConnected")
	p1.send(`{"type":"unsubscribe"}`)
	s.expectRaw(`{"type":"playerDisconnected","playerId":"` + pid1 + `"}`)

	// A player closing its socket: the streamer on B gets playerDisconnected.
	p1.send(`{"type":"subscribe","streamerId":"Renamed"}`)
	s.expect("playerConnected")
	p1.hangUp()
	s.expectRaw(`{"type":"playerDisconnected","playerId":"` + pid1 + `"}`)

	// Unknown ids fail as on one edge.
	p2 := a.playerUp("P2@A", "/")
	p2.send(`{"type":"subscribe","streamerId":"Nobody"}`)
	p2.expectRaw(`{"type":"subscribeFailed","message":"Streamer Nobody does not exist."}`)

	// The streamer leaving closes its remote players with no status (1005).
	p2.send(`{"type":"subscribe","streamerId":"Renamed"}`)
	s.expect("playerConnected")
	s.hangUp()
	p2.expectClose(websocket.CloseNoStatusReceived, "")
	testwait.For(t, "B's streamer gone from the fleet", func() bool { _, ok := a.srv.Registry().Get("Renamed"); return !ok })
}

// TestClusterMaxPlayers: MaxPlayers is enforced on the streamer's edge, for
// players of every edge.
func TestClusterMaxPlayers(t *testing.T) {
	addr, _ := redistest.Start(t)
	conn, _ := redisConn(t, addr)
	cfg := Default()
	cfg.MaxPlayers = 1
	a, _ := edge(t, conn, "edge-a", cfg, Deps{}, 0)
	b, _ := edge(t, conn, "edge-b", cfg, Deps{}, 0)
	s := b.streamerUp("S", "/", "Full")
	testwait.For(t, "fleet", func() bool { _, ok := a.srv.Registry().Get("Full"); return ok })
	pb := b.playerUp("PB", "/")
	pb.send(`{"type":"subscribe","streamerId":"Full"}`)
	s.expect("playerConnected")
	pa := a.playerUp("PA", "/")
	pa.send(`{"type":"subscribe","streamerId":"Full"}`)
	pa.expectRaw(`{"type":"subscribeFailed","message":"Streamer Full is full. Max players = 1."}`)
	pa.sync()
	s.sync()
}

// TestClusterLeaseIdleRace: matchmakers on two edges lease the fleet
// concurrently; no streamer is ever leased twice.
func TestClusterLeaseIdleRace(t *testing.T) {
	addr, _ := redistest.Start(t)
	conn, _ := redisConn(t, addr)
	a, _ := edge(t, conn, "edge-a", Default(), Deps{}, 0)
	b, _ := edge(t, conn, "edge-b", Default(), Deps{}, 0)
	const perEdge = 4
	for i := range perEdge {
		a.streamerUp(fmt.Sprintf("SA%d", i), "/?pop=p1&codecs=H264", fmt.Sprintf("a%d", i))
		b.streamerUp(fmt.Sprintf("SB%d", i), "/?pop=p1&codecs=H264,AV1", fmt.Sprintf("b%d", i))
	}
	testwait.For(t, "fleet of 8", func() bool { return a.srv.Registry().Counts()["p1"].Idle == 2*perEdge })

	until := time.Now().Add(time.Minute)
	var mu sync.Mutex
	won := make(map[string]string) // streamer -> session
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := range 40 {
		reg := a.srv.Registry()
		if i%2 == 1 {
			reg = b.srv.Registry()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sess := "sess-" + strconv.Itoa(i)
			info, err := reg.LeaseIdle("p1", "h264", sess, until)
			if errors.Is(err, ErrNoIdleStreamer) {
				refused.Add(1)
				return
			}
			if err != nil {
				t.Errorf("LeaseIdle: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if prev, ok := won[info.ID]; ok {
				t.Errorf("%s leased twice: %s and %s", info.ID, prev, sess)
			}
			won[info.ID] = sess
			if info.State != StateLeased || info.SessionID != sess {
				t.Errorf("leased info %+v", info)
			}
		}()
	}
	wg.Wait()
	if len(won) != 2*perEdge || refused.Load() != 40-2*perEdge {
		t.Fatalf("%d leased, %d refused", len(won), refused.Load())
	}
	// The longest idle went first: a0 (registered first) is leased.
	if _, ok := won["a0"]; !ok {
		t.Errorf("a0 not leased: %v", won)
	}
	c := b.srv.Registry().Counts()["p1"]
	if c.Leased != 2*perEdge || c.Idle != 0 {
		t.Fatalf("counts %+v", c)
	}
	// Idempotent retry, release, codec filter.
	sess := won["b0"]
	if info, err := a.srv.Registry().LeaseIdle("p1", "", sess, until); err != nil || info.ID != "b0" {
		t.Fatalf("retry: %+v %v", info, err)
	}
	if _, err := a.srv.Registry().LeaseIdle("p2", "", sess, until); !errors.Is(err, ErrSessionLeased) {
		t.Fatalf("other pop while holding a lease: %v", err)
	}
	if err := a.srv.Registry().Release(sess); err != nil {
		t.Fatal(err)
	}
	if err := a.srv.Registry().Release(sess); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("second release: %v", err)
	}
	if info, err := b.srv.Registry().LeaseIdle("p1", "AV1", "new", until); err != nil || info.ID != "b0" {
		t.Fatalf("AV1 after release: %+v %v", info, err)
	}
	if err := a.srv.Registry().Lease("a1", "other", until); !errors.Is(err, ErrNotIdle) {
		t.Fatalf("Lease of a leased streamer: %v", err)
	}
	if err := a.srv.Registry().Lease("zz", "other", until); !errors.Is(err, ErrUnknownStreamer) {
		t.Fatalf("Lease of unknown: %v", err)
	}
}

// TestClusterLeaseExpiry: leases lapse by the injected clock, and the
// reconnect grace starts when the last player leaves, as in memory.
func TestClusterLeaseExpiry(t *testing.T) {
	addr, _ := redistest.Start(t)
	conn, _ := redisConn(t, addr)
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	clock := func() time.Time { return time.UnixMilli(now.Load()) }
	cfg := Default()
	cfg.LeaseGrace = 10 * time.Second
	a, _ := edge(t, conn, "edge-a", cfg, Deps{Now: clock}, 0)
	s := a.streamerUp("S", "/?pop=p1", "x")
	reg := a.srv.Registry()
	testwait.For(t, "registered", func() bool { _, ok := reg.Get("x"); return ok })
	if _, err := reg.LeaseIdle("p1", "", "s1", clock().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	now.Add(1001)
	if i, _ := reg.Get("x"); i.State != StateIdle || i.SessionID != "" {
		t.Fatalf("after until: %+v", i)
	}
	if _, err := reg.LeaseIdle("p1", "", "s2", clock().Add(time.Hour)); err != nil {
		t.Fatalf("lease after lapse: %v", err)
	}
	p := a.playerUp("P", "/")
	p.send(`{"type":"subscribe","streamerId":"x"}`)
	s.expect("playerConnected")
	testwait.For(t, "streaming", func() bool { i, _ := reg.Get("x"); return i.State == StateStreaming })
	p.hangUp()
	s.expect("playerDisconnected")
	testwait.For(t, "leased in grace", func() bool {
		i, _ := reg.Get("x")
		return i.State == StateLeased && i.LeaseUntil.Equal(clock().Add(cfg.LeaseGrace))
	})
	now.Add(cfg.LeaseGrace.Milliseconds())
	if i, _ := reg.Get("x"); i.State != StateIdle {
		t.Fatalf("after grace: %+v", i)
	}
}

// TestClusterEdgeDies: an edge killed without cleanup: its streamers leave
// the fleet after the TTL and players of other edges bound to them are
// closed as if the streamer left.
func TestClusterEdgeDies(t *testing.T) {
	addr, _ := redistest.Start(t)
	conn, _ := redisConn(t, addr)
	const ttl = 600 * time.Millisecond
	a, _ := edge(t, conn, "edge-a", Default(), Deps{}, ttl)
	b, clB := edge(t, conn, "edge-b", Default(), Deps{}, ttl)
	s := b.streamerUp("S", "/", "OnB")
	testwait.For(t, "fleet", func() bool { _, ok := a.srv.Registry().Get("OnB"); return ok })
	p := a.playerUp("P", "/")
	p.send(`{"type":"subscribe","streamerId":"OnB"}`)
	s.expect("playerConnected")

	died := time.Now()
	clB.crash() // kill -9: no unregistering, no more heartbeats
	testwait.For(t, "B's streamer expired", func() bool { _, ok := a.srv.Registry().Get("OnB"); return !ok })
	p.expectClose(websocket.CloseNoStatusReceived, "")
	t.Logf("dead edge (TTL %v): out of the fleet and its players closed %v after it died", ttl, time.Since(died))
	p2 := a.playerUp("P2", "/")
	p2.send(`{"type":"listStreamers"}`)
	p2.expectRaw(`{"type":"streamerList","ids":[]}`)
}

// TestClusterRedisOutage: Redis killed: pairs on one edge keep signalling,
// cross-edge subscribes and fleet leases are refused with typed errors;
// Redis back (empty): edges re-register and cross-edge works again, with
// no restart.
func TestClusterRedisOutage(t *testing.T) {
	rs := redistest.StartServer(t)
	conn, _ := redisConn(t, rs.Addr)
	a, _ := edge(t, conn, "edge-a", Default(), Deps{}, 0)
	b, _ := edge(t, conn, "edge-b", Default(), Deps{}, 0)
	sa := a.streamerUp("SA", "/", "LocalA")
	sb := b.streamerUp("SB", "/", "RemoteB")
	testwait.For(t, "fleet", func() bool { _, ok := a.srv.Registry().Get("RemoteB"); return ok })
	pl := a.playerUp("PL", "/")
	pl.send(`{"type":"subscribe","streamerId":"LocalA"}`)
	pidL, _ := sa.expect("playerConnected")["playerId"].(string)

	rs.Kill()
	// Local pair: unaffected.
	sa.send(`{"type":"offer","playerId":"` + pidL + `","sdp":"v=0\r\n"}`)
	pl.expectRaw(`{"type":"offer","sdp":"v=0\r\n"}`)
	pl.send(`{"type":"answer","sdp":"v=0\r\n"}`)
	sa.expectRaw(`{"type":"answer","sdp":"v=0\r\n","playerId":"` + pidL + `"}`)
	// Cross-edge: a clear, typed refusal.
	pr := a.playerUp("PR", "/")
	pr.send(`{"type":"listStreamers"}`)
	pr.expectRaw(`{"type":"streamerList","ids":["LocalA"]}`)
	pr.send(`{"type":"subscribe","streamerId":"RemoteB"}`)
	pr.expectRaw(`{"type":"subscribeFailed","message":"Streamer RemoteB is unavailable: the streamer registry cannot be reached."}`)
	if _, err := a.srv.Registry().LeaseIdle("local", "", "m1", time.Now().Add(time.Minute)); !errors.Is(err, ErrFleetUnavailable) {
		t.Fatalf("LeaseIdle while Redis is down: %v", err)
	}
	if err := a.srv.Registry().Available(); !errors.Is(err, ErrFleetUnavailable) {
		t.Fatalf("Available while Redis is down: %v", err)
	}
	// A local subscribe still works, listing still answers.
	pr.send(`{"type":"subscribe","streamerId":"LocalA"}`)
	sa.expect("playerConnected")

	rs.Restart() // empty
	back := time.Now()
	testwait.For(t, "B re-registered", func() bool { _, ok := a.srv.Registry().Get("RemoteB"); return ok })
	if err := a.srv.Registry().Available(); err != nil {
		t.Fatalf("Available after Redis returned: %v", err)
	}
	t.Logf("fleet re-registered %v after Redis came back empty", time.Since(back))
	pr2 := a.playerUp("PR2", "/")
	pr2.send(`{"type":"subscribe","streamerId":"RemoteB"}`)
	pid, _ := sb.expect("playerConnected")["playerId"].(string)
	sb.send(`{"type":"offer","playerId":"` + pid + `","sdp":"v=0\r\n"}`)
	pr2.expectRaw(`{"type":"offer","sdp":"v=0\r\n"}`)
	pr2.send(`{"type":"answer","sdp":"v=0\r\n"}`)
	sb.expectRaw(`{"type":"answer","sdp":"v=0\r\n","playerId":"` + pid + `"}`)
	// Both streamers are streaming: the answer is a fleet answer again.
	if _, err := b.srv.Registry().LeaseIdle("local", "", "m2", time.Now().Add(time.Minute)); !errors.Is(err, ErrNoIdleStreamer) {
		t.Fatalf("LeaseIdle after Redis returned: %v", err)
	}
}

// TestClusterTokenMode: a session player on edge A bound to a streamer on
// edge B; the lease claim runs fleet-wide, the hooks run where the
// streamer is, and the codec check rejects a bad offer across edges.
func TestClusterTokenMode(t *testing.T) {
	addr, _ := redistest.Start(t)
	conn, _ := redisConn(t, addr)
	clk := newFakeClock()
	signer := mustSigner(t, secret, clk.Now)
	cfg := Default()
	cfg.Auth = AuthToken
	k := &hooks{reject: errors.New("no H264 in m=video")}
	a, _ := edge(t, conn, "edge-a", cfg, Deps{Signer: signer, Now: clk.Now}, 0)
	b, _ := edge(t, conn, "edge-b", cfg, Deps{Signer: signer, Now: clk.Now, Leases: k}, 0)
	s := b.streamerUp("S1", streamerToken(t, signer, "ue-1", "eu-west-1", "H264"), "ue-1")
	a.streamerUp("S2", streamerToken(t, signer, "ue-2", "eu-west-1", "H264"), "ue-2")
	testwait.For(t, "fleet", func() bool { return len(a.srv.Registry().Snapshot()) == 2 })

	p := a.playerUp("P0", sessionToken(t, signer, "s1", "ue-1"))
	p.send(`{"type":"listStreamers"}`)
	p.expectRaw(`{"type":"streamerList","ids":["ue-1"]}`)
	p.send(`{"type":"subscribe","streamerId":"ue-1"}`)
	pid, _ := s.expect("playerConnected")["playerId"].(string)
	if i, _ := a.srv.Registry().Get("ue-1"); i.SessionID != "s1" {
		t.Fatalf("claim not in the fleet: %+v", i)
	}
	// Another session cannot take the streamer, from either edge.
	p2 := a.playerUp("P2", sessionToken(t, signer, "s2", "ue-1"))
	p2.send(`{"type":"subscribe","streamerId":"ue-1"}`)
	p2.expectRaw(`{"type":"subscribeFailed","message":"Streamer ue-1 is leased to another session."}`)
	// The codec check runs on B for the session, and its refusal reaches A.
	s.send(`{"type":"offer","playerId":"` + pid + `","sdp":"m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 VP8/90000\r\n"}`)
	p.expectRaw(`{"type":"subscribeFailed","message":"Streamer ue-1 offer rejected: no H264 in m=video"}`)
	s.expectRaw(`{"type":"playerDisconnected","playerId":"` + pid + `"}`)
	testwait.For(t, "lease released fleet-wide", func() bool { i, _ := a.srv.Registry().Get("ue-1"); return i.State == StateIdle })
	if got := k.get(); !strings.Contains(got, "subscribed s1 ue-1") || !strings.HasSuffix(got, "left s1") {
		t.Fatalf("hooks on B: %q", got)
	}
	p.sync()
	s.sync()
}

// TestClusterAutoSubscribe: an unsubscribed player signalling on an edge
// with no streamer is subscribed to the fleet's first, and its message
// follows.
func TestClusterAutoSubscribe(t *testing.T) {
	addr, _ := redistest.Start(t)
	conn, _ := redisConn(t, addr)
	a, _ := edge(t, conn, "edge-a", Default(), Deps{}, 0)
	b, _ := edge(t, conn, "edge-b", Default(), Deps{}, 0)
	s := b.streamerUp("S", "/", "OnB")
	testwait.For(t, "fleet", func() bool { _, ok := a.srv.Registry().Get("OnB"); return ok })
	p := a.playerUp("P", "/")
	p.send(`{"type":"iceCandidate","candidate":{"candidate":"","sdpMid":"0","sdpMLineIndex":0}}`)
	pid, _ := s.expect("playerConnected")["playerId"].(string)
	s.expectRaw(`{"type":"iceCandidate","candidate":{"candidate":"","sdpMid":"0","sdpMLineIndex":0},"playerId":"` + pid + `"}`)
	s.sync()
}

// TestClusterOrderBurst: bursts both ways across edges arrive complete and
// in order.
func TestClusterOrderBurst(t *testing.T) {
	addr, _ := redistest.Start(t)
	conn, _ := redisConn(t, addr)
	a, _ := edge(t, conn, "edge-a", Default(), Deps{}, 0)
	b, _ := edge(t, conn, "edge-b", Default(), Deps{}, 0)
	s := b.streamerUp("S", "/", "OnB")
	testwait.For(t, "fleet", func() bool { _, ok := a.srv.Registry().Get("OnB"); return ok })
	p := a.playerUp("P", "/")
	p.send(`{"type":"subscribe","streamerId":"OnB"}`)
	pid, _ := s.expect("playerConnected")["playerId"].(string)
	const n = 50
	for i := range n {
		s.sendQuiet(websocket.TextMessage, fmt.Appendf(nil, `{"type":"iceCandidate","playerId":"%s","candidate":{"candidate":"s%d"}}`, pid, i))
		p.sendQuiet(websocket.TextMessage, fmt.Appendf(nil, `{"type":"iceCandidate","candidate":{"candidate":"p%d"}}`, i))
	}
	for i := range n {
		if f := p.next(); string(f.data) != fmt.Sprintf(`{"type":"iceCandidate","candidate":{"candidate":"s%d"}}`, i) {
			t.Fatalf("player got %q at %d", f.data, i)
		}
		want := fmt.Sprintf(`{"type":"iceCandidate","candidate":{"candidate":"p%d"},"playerId":"%s"}`, i, pid)
		if f := s.next(); string(f.data) != want {
			t.Fatalf("streamer got %q at %d, want %s", f.data, i, want)
		}
	}
	p.sync()
	s.sync()
}

// TestClusterPlayerEdgeDies: the player's edge dies: after the TTL the
// streamer's edge drops its proxy and the streamer gets playerDisconnected.
func TestClusterPlayerEdgeDies(t *testing.T) {
	addr, _ := redistest.Start(t)
	conn, _ := redisConn(t, addr)
	const ttl = 600 * time.Millisecond
	a, clA := edge(t, conn, "edge-a", Default(), Deps{}, ttl)
	b, _ := edge(t, conn, "edge-b", Default(), Deps{}, ttl)
	s := b.streamerUp("S", "/", "OnB")
	testwait.For(t, "fleet", func() bool { _, ok := a.srv.Registry().Get("OnB"); return ok })
	p := a.playerUp("P", "/")
	p.send(`{"type":"subscribe","streamerId":"OnB"}`)
	pid, _ := s.expect("playerConnected")["playerId"].(string)
	clA.crash()
	s.expectRaw(`{"type":"playerDisconnected","playerId":"` + pid + `"}`)
	testwait.For(t, "idle again", func() bool { i, _ := b.srv.Registry().Get("OnB"); return i.State == StateIdle })
}
