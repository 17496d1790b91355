package shard

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/redisstate"
)

// resumeHello is a hello presenting tok.
func (e *testEnv) resumeHello(sub, tok string) *codec.ClientHello {
	h := e.hello(sub, "")
	h.ResumeToken = tok
	return h
}

// expectRefused sends h on a new connection to g and wants the code as both
// the Error and the close code.
func (e *testEnv) expectRefused(t *testing.T, g *Gateway, h *codec.ClientHello, want codec.Code) {
	t.Helper()
	c := e.serveOn(g, "websocket", false)
	c.t = t
	c.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: h}})
	got, closeCode := c.expectError()
	if codec.Code(got.Code) != want || closeCode != want.CloseCode() {
		t.Fatalf("got %q (%s) close %d, want %q close %d", got.Code, got.Message, closeCode, want, want.CloseCode())
	}
}

// expectEnded reads c until the session's Error and wants code, both as the
// Error and as the close code.
func expectEnded(t *testing.T, c *tclient, want codec.Code) {
	t.Helper()
	got, closeCode := c.expectError()
	if codec.Code(got.Code) != want || closeCode != want.CloseCode() {
		t.Fatalf("session ended with %q close %d, want %q close %d", got.Code, closeCode, want, want.CloseCode())
	}
	if got.ResumeToken != "" {
		t.Fatal("a revoked session was handed a resume token")
	}
}

func pingPong(c *tclient, n uint64) {
	c.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: n}}})
	c.until("pong", func(env *codec.ServerEnvelope) bool { return env.GetPong().GetClientTimeMs() == n })
}

// TestRevocation: two gateways (a fleet) share pins and revocations. A
// revoked session cannot resume on either; a session revoked on the edge
// that holds it ends at once; one revoked on another edge is ended by its
// own edge's pin refresh (PinTTL 3 s: every second); other sessions,
// including a resume, go on.
func TestRevocation(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.PinTTL = 3 * time.Second },
		shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 10})
	pins, revs := NewMemoryPins(e.clock.Now), state.NewMemoryRevocations(e.clock.Now)
	a := e.newGateway(t, Deps{Pins: pins, Revocations: revs})
	b := e.newGateway(t, Deps{Pins: pins, Revocations: revs})
	if ttl := a.RevocationTTL(); ttl != time.Hour {
		t.Fatalf("revocation TTL %v, want the session token's 1h", ttl)
	}

	bystander := e.serveOn(a, "websocket", false)
	bystander.handshake(e.hello("bea", "orun-grove"))
	local := e.serveOn(a, "websocket", false)
	hLocal := local.handshake(e.hello("ada", "orun-grove"))
	remote := e.serveOn(a, "webtransport", true)
	hRemote := remote.handshake(e.hello("cy", "orun-grove"))
	gone := e.serveOn(a, "websocket", false)
	hGone := gone.handshake(e.hello("dee", "orun-grove"))
	_ = gone.c.Close(1006, "network lost")
	testwait.For(t, "dee's session gone", func() bool { _, ok := a.Session(hGone.SessionId); return !ok })

	t.Run("disconnected session cannot resume anywhere", func(t *testing.T) {
		until, here, err := b.Revoke(context.Background(), hGone.SessionId)
		if err != nil || here {
			t.Fatalf("revoke: here=%v err=%v", here, err)
		}
		if d := until.Sub(e.clock.Now()); d < 59*time.Minute || d > time.Hour {
			t.Fatalf("revoked until %v from now, want the token lifetime", d)
		}
		e.expectRefused(t, a, e.resumeHello("dee", hGone.ResumeToken), codec.CodeResumeRevoked)
		e.expectRefused(t, b, e.resumeHello("dee", hGone.ResumeToken), codec.CodeResumeRevoked)
	})

	t.Run("live here: ended at once", func(t *testing.T) {
		// here: the gateway stopped the session itself, not its refresh.
		_, here, err := a.Revoke(context.Background(), hLocal.SessionId)
		if err != nil || !here {
			t.Fatalf("revoke: here=%v err=%v", here, err)
		}
		local.t = t
		expectEnded(t, local, codec.CodeResumeRevoked)
		e.expectRefused(t, a, e.resumeHello("ada", hLocal.ResumeToken), codec.CodeResumeRevoked)
	})

	t.Run("live on another edge: ended by its refresh", func(t *testing.T) {
		_, here, err := b.Revoke(context.Background(), hRemote.SessionId)
		if err != nil || here {
			t.Fatalf("revoke on b: here=%v err=%v", here, err)
		}
		remote.t = t
		expectEnded(t, remote, codec.CodeResumeRevoked)
		testwait.For(t, "cy's session gone from a", func() bool { _, ok := a.Session(hRemote.SessionId); return !ok })
		e.expectRefused(t, b, e.resumeHello("cy", hRemote.ResumeToken), codec.CodeResumeRevoked)
	})

	t.Run("others unaffected", func(t *testing.T) {
		bystander.t = t
		pingPong(bystander, 7)
		// A session that is not revoked still resumes, on the other edge.
		c := e.serveOn(a, "websocket", false)
		c.t = t
		h := c.handshake(e.hello("eve", "orun-grove"))
		_ = c.c.Close(1006, "network lost")
		testwait.For(t, "eve's session gone", func() bool { _, ok := a.Session(h.SessionId); return !ok })
		c2 := e.serveOn(b, "websocket", false)
		c2.t = t
		if h2 := c2.handshake(e.resumeHello("eve", h.ResumeToken)); h2.SessionId != h.SessionId || !h2.Resumed {
			t.Fatalf("resume: %+v", h2)
		}
		pingPong(c2, 8)
		if a.Sessions() != 1 || b.Sessions() != 1 {
			t.Fatalf("sessions a=%d b=%d, want bea's on a and eve's on b", a.Sessions(), b.Sessions())
		}
	})

	if _, _, err := a.Revoke(context.Background(), ""); !errors.Is(err, state.ErrBadArgument) {
		t.Fatalf("empty id: %v", err)
	}
}

// handshakeMark marks the context of one handshake, so the round-trip
// counter sees only what that handshake sends (not pin refreshes, not
// lease releases).
type handshakeMark struct{}

// markedTrips counts round trips made under a marked context: each command
// sent alone and each pipeline is one. A new connection's set-up (HELLO,
// CLIENT SETINFO) is not counted.
type markedTrips struct {
	mu   sync.Mutex
	sent []string // guarded by mu: one entry per round trip, its commands joined by "+"
}

func (c *markedTrips) count(ctx context.Context, cmds []redis.Cmder) {
	if ctx.Value(handshakeMark{}) == nil {
		return
	}
	names := make([]string, len(cmds))
	for i, cmd := range cmds {
		if names[i] = cmd.Name(); names[i] == "hello" || names[i] == "client" {
			return
		}
	}
	c.mu.Lock()
	c.sent = append(c.sent, strings.Join(names, "+"))
	c.mu.Unlock()
}

func (c *markedTrips) trips() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sent)
}

func (c *markedTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *markedTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(ctx, []redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (c *markedTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.count(ctx, cmds); return next(ctx, cmds) }
}

// leaseAdmitter is the edge's handshake admission reduced to its Redis
// cost: one lease script per handshake.
type leaseAdmitter struct{ l state.Leases }

func (a leaseAdmitter) Admit(ctx context.Context, r AdmitRequest) (func(), error) {
	holder := newSessionID()
	keys := []string{"rt:user:" + r.Access.Subject, "rt:net:127.0.0"}
	blocked, err := a.l.Acquire(ctx, holder, []state.LeaseLimit{{Key: keys[0], Limit: 5}, {Key: keys[1], Limit: 50}}, time.Minute, time.Now())
	if err != nil {
		return nil, codec.Errorf(codec.CodeStateUnavailable, "leases: %v", err)
	}
	if blocked >= 0 {
		return nil, codec.Errorf(codec.CodeUserCap, "cap")
	}
	return func() { _ = a.l.Release(context.Background(), holder, keys) }, nil
}

// TestRevocationOverRedis: two gateways share pins, leases and revocations
// in one real Redis. A resume makes exactly three round trips (pin and
// revocation in one pipeline, the lease script, the pin write): the
// revocation check adds none. A session live on gateway B and revoked on
// gateway A is ended by B's refresh; its resume is refused on both.
func TestRevocationOverRedis(t *testing.T) {
	addr, _ := redistest.Start(t)
	trips := &markedTrips{}
	client := func() *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		rdb.AddHook(trips)
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	rdbA, rdbB := client(), client() // closed after the gateways (cleanups run last-in first-out)
	e := newTestEnv(t, func(c *Config) { c.PinTTL = 3 * time.Second },
		shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 10})
	deps := func(rdb *redis.Client) Deps {
		conn := redisstate.New(rdb, redisstate.Options{})
		return Deps{
			Pins:        NewStatePins(redisstate.NewKV(conn, redisstate.KVPins), e.g.cfg.PinTTL, e.clock.Now),
			Revocations: redisstate.NewRevocations(conn, e.clock.Now),
			Admit:       leaseAdmitter{redisstate.NewLeases(conn)},
		}
	}
	a := e.newGateway(t, deps(rdbA))
	b := e.newGateway(t, deps(rdbB))

	bystander := e.serveOn(b, "websocket", false)
	bystander.handshake(e.hello("bea", "orun-grove"))
	c1 := e.serveOn(a, "websocket", false)
	h1 := c1.handshake(e.hello("ada", "orun-grove"))
	_ = c1.c.Close(1006, "network lost")
	testwait.For(t, "ada's disconnect pin stored", func() bool {
		v, err := rdbA.Get(context.Background(), "egbe:pin:"+h1.SessionId).Result()
		return err == nil && strings.Contains(v, `"exp"`)
	})

	// The resume, on B, counted.
	ctx, cancel := context.WithCancel(context.WithValue(e.ctx, handshakeMark{}, true))
	defer cancel()
	c2 := &tclient{t: t, c: newMemConn("websocket", false), states: map[uint64][]codec.Entity{}}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); b.Serve(ctx, c2.c) }()
	if h2 := c2.handshake(e.resumeHello("ada", h1.ResumeToken)); h2.SessionId != h1.SessionId || !h2.Resumed {
		t.Fatalf("resume: %+v", h2)
	}
	// The session's own end (its disconnect pin) also runs under ctx:
	// count only up to the ServerHello.
	sent := trips.trips()
	t.Logf("resume round trips: %q", sent)
	if len(sent) != 3 || sent[0] != "get+exists" {
		t.Fatalf("the resume made %d Redis round trips %q, want 3, the first the pin read and the revocation check in one pipeline", len(sent), sent)
	}

	// Revoked on A, live on B: B's refresh ends it.
	if _, here, err := a.Revoke(context.Background(), h1.SessionId); err != nil || here {
		t.Fatalf("revoke on a: here=%v err=%v", here, err)
	}
	expectEnded(t, c2, codec.CodeResumeRevoked)
	e.expectRefused(t, a, e.resumeHello("ada", h1.ResumeToken), codec.CodeResumeRevoked)
	e.expectRefused(t, b, e.resumeHello("ada", h1.ResumeToken), codec.CodeResumeRevoked)
	pingPong(bystander, 9)
	// The client sees its close before the gateway has unregistered the
	// session: wait for the count, bounded.
	testwait.For(t, "b holding the bystander only", func() bool { return b.Sessions() == 1 })
}
