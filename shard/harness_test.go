package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/shard/shardsim"
)

// memConn is an in-memory ClientConn: the server end of a test client.
type memConn struct {
	transport string
	json      bool
	unrel     bool

	in    chan []byte // client -> server
	out   chan []byte // server -> client, reliable
	dgram chan []byte // server -> client, unreliable

	done      chan struct{}
	closeOnce sync.Once
	code      atomic.Uint32

	// Reliable writes are delivered only by Flush (the batched-write
	// contract): a writer that forgets to flush is caught by every test.
	pending [][]byte // owned by the writer
}

var errMemClosed = errors.New("memconn: closed")

func newMemConn(transport string, unreliable bool) *memConn {
	return &memConn{transport: transport, unrel: unreliable, in: make(chan []byte, 64),
		out: make(chan []byte, 64), dgram: make(chan []byte, 16), done: make(chan struct{})}
}

func (c *memConn) Transport() string     { return c.transport }
func (c *memConn) JSON() bool            { return c.json }
func (c *memConn) RemoteAddr() net.Addr  { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *memConn) HasUnreliable() bool   { return c.unrel }
func (c *memConn) Done() <-chan struct{} { return c.done }

func (c *memConn) Read(ctx context.Context) ([]byte, bool, error) {
	select {
	case b := <-c.in:
		if b == nil { // the test's stand-in for an oversized message
			return nil, false, fmt.Errorf("memconn: %w", codec.ErrFrameTooLarge)
		}
		return b, false, nil
	case <-c.done:
		return nil, false, errMemClosed
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// Flush delivers what WriteReliable buffered, blocking while the client
// does not read (backpressure).
func (c *memConn) Flush(ctx context.Context) error {
	for len(c.pending) > 0 {
		select {
		case c.out <- c.pending[0]:
			c.pending[0] = nil
			c.pending = c.pending[1:]
		case <-c.done:
			return errMemClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// WriteReliable buffers a copy of msg; a full buffer (as many messages as
// the client's channel holds) is flushed first, as a transport's buffered
// writer would.
func (c *memConn) WriteReliable(ctx context.Context, msg []byte) error {
	select {
	case <-c.done:
		return errMemClosed
	default:
	}
	if len(c.pending) >= cap(c.out) {
		if err := c.Flush(ctx); err != nil {
			return err
		}
	}
	c.pending = append(c.pending, append([]byte(nil), msg...))
	return nil
}

func (c *memConn) WriteUnreliable(msg []byte) error {
	if !c.unrel {
		return errors.New("memconn: no unreliable lane")
	}
	select {
	case c.dgram <- append([]byte(nil), msg...):
		return nil
	default:
		return errors.New("memconn: dropped")
	}
}

func (c *memConn) Close(code uint32, _ string) error {
	c.closeOnce.Do(func() { c.code.Store(code); close(c.done) })
	return nil
}

var _ ClientConn = (*memConn)(nil)

// fakeClock is real time plus a skew the test moves forward; the signer and
// the gateway share it.
type fakeClock struct {
	mu   sync.Mutex
	skew time.Duration
}

func (f *fakeClock) Now() time.Time      { f.mu.Lock(); defer f.mu.Unlock(); return time.Now().Add(f.skew) }
func (f *fakeClock) Add(d time.Duration) { f.mu.Lock(); f.skew += d; f.mu.Unlock() }

// testEnv is a gateway linked to reference shards on loopback.
type testEnv struct {
	t      testing.TB
	g      *Gateway
	signer *auth.Signer
	clock  *fakeClock
	shards map[string]*shardsim.Server
	reg    *prometheus.Registry
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ctx    context.Context
}

type shardSpec struct {
	id        string
	instances []string
	agents    int
	still     bool // no bot players either: a world that stands still
}

func newTestEnv(t testing.TB, mut func(*Config), specs ...shardSpec) *testEnv {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e := &testEnv{t: t, clock: &fakeClock{}, shards: map[string]*shardsim.Server{}, reg: prometheus.NewRegistry(), cancel: cancel, ctx: ctx}
	var err error
	if e.signer, err = auth.New([]byte("0123456789abcdef0123456789abcdef"), e.clock.Now); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.HandshakeTimeout = 5 * time.Second
	for _, sp := range specs {
		players := 2
		if sp.still {
			players = 0
		}
		s, err := shardsim.Start(ctx, shardsim.Config{Listen: "127.0.0.1:0", ShardID: sp.id, Instances: sp.instances, Agents: sp.agents, Players: players, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		e.shards[sp.id] = s
		cfg.Shards[sp.id] = s.Addr()
		for _, in := range sp.instances {
			cfg.Instances[in] = sp.id
		}
	}
	if mut != nil {
		mut(&cfg)
	}
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("EGBE_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	e.g, err = NewGateway(cfg, Deps{Signer: e.signer, Now: e.clock.Now, Registerer: e.reg, Logger: logger,
		FallbackChain: func() []string { return []string{"webtransport", "webrtc", "websocket"} }})
	if err != nil {
		t.Fatal(err)
	}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); _ = e.g.Run(ctx) }()
	t.Cleanup(e.close)
	for id := range cfg.Shards {
		testwait.For(t, "link "+id+" up", func() bool { return e.g.LinkUp(id) })
	}
	return e
}

func (e *testEnv) close() {
	e.cancel()
	e.wg.Wait()
	for _, s := range e.shards {
		_ = s.Close()
	}
}

// serve runs a session on a new in-memory connection.
func (e *testEnv) serve(transport string, unreliable bool) *tclient {
	return e.serveConn(newMemConn(transport, unreliable))
}

func (e *testEnv) serveConn(c *memConn) *tclient {
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.g.Serve(e.ctx, c) }()
	return &tclient{t: e.t, c: c, states: map[uint64][]codec.Entity{}}
}

func (e *testEnv) token(sub string) string {
	tok, err := e.signer.IssueAccess(auth.Access{Subject: sub}, time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

func (e *testEnv) hello(sub, instance string) *codec.ClientHello {
	return &codec.ClientHello{AccessToken: e.token(sub), InstanceId: instance, AuthorityKind: codec.AuthorityKind_UE_CLIENT,
		ProtocolVersion: codec.ProtocolVersion, Capabilities: codec.ServerCapabilities}
}

// tclient drives a memConn from the client side.
type tclient struct {
	t       testing.TB
	c       *memConn
	hello   *codec.ServerHello
	states  map[uint64][]codec.Entity // applied states by sequence (delta bases)
	last    []codec.Entity
	lastSeq uint64
}

func (tc *tclient) send(env *codec.ClientEnvelope) {
	tc.t.Helper()
	b, err := codec.EncodeClient(nil, env, tc.c.json)
	if err != nil {
		tc.t.Fatal(err)
	}
	select {
	case tc.c.in <- b:
	case <-tc.c.done:
	}
}

func (tc *tclient) sendRaw(b []byte) {
	select {
	case tc.c.in <- b:
	case <-tc.c.done:
	}
}

// next returns the next server message (nil once the connection closed and
// nothing is left), and whether it came on the unreliable lane.
func (tc *tclient) next() (*codec.ServerEnvelope, bool) {
	tc.t.Helper()
	t := time.NewTimer(20 * time.Second)
	defer t.Stop()
	var b []byte
	unrel := false
	select {
	case b = <-tc.c.out:
	case b = <-tc.c.dgram:
		unrel = true
	case <-tc.c.done:
		select {
		case b = <-tc.c.out:
		default:
			return nil, false
		}
	case <-t.C:
		tc.t.Fatal("no server message")
	}
	var env codec.ServerEnvelope
	if err := codec.DecodeServer(b, tc.c.json, &env); err != nil {
		tc.t.Fatalf("decode server message: %v", err)
	}
	return &env, unrel
}

// until reads messages, applying state, until pick returns true.
func (tc *tclient) until(what string, pick func(*codec.ServerEnvelope) bool) *codec.ServerEnvelope {
	tc.t.Helper()
	for {
		env, _ := tc.next()
		if env == nil {
			tc.t.Fatalf("connection closed while waiting for %s", what)
		}
		tc.apply(env)
		if pick(env) {
			return env
		}
	}
}

// apply folds a snapshot or delta into the client's state and acks it.
func (tc *tclient) apply(env *codec.ServerEnvelope) {
	tc.t.Helper()
	var seq uint64
	switch m := env.Msg.(type) {
	case *codec.ServerEnvelope_Snapshot:
		var w codec.World
		w.FromSnapshot(m.Snapshot)
		seq = m.Snapshot.Sequence
		tc.last = w.Entities
	case *codec.ServerEnvelope_Delta:
		base, ok := tc.states[m.Delta.BaseSequence]
		if !ok {
			tc.t.Fatalf("delta against unknown base %d", m.Delta.BaseSequence)
		}
		ups := make([]codec.Entity, len(m.Delta.Upserts))
		for i, u := range m.Delta.Upserts {
			ups[i] = codec.EntityFromProto(u)
		}
		seq = m.Delta.Sequence
		tc.last = codec.Apply(nil, base, ups, m.Delta.RemovedIds)
	default:
		return
	}
	tc.states[seq] = tc.last
	tc.lastSeq = seq
	tc.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ack{Ack: &codec.Ack{SnapshotSequence: seq}}})
}

func (tc *tclient) handshake(h *codec.ClientHello) *codec.ServerHello {
	tc.t.Helper()
	tc.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: h}})
	env, _ := tc.next()
	if env == nil || env.GetHello() == nil {
		tc.t.Fatalf("want ServerHello, got %v", env)
	}
	tc.hello = env.GetHello()
	return tc.hello
}

// expectError reads until an Error and returns its code (and the close code).
func (tc *tclient) expectError() (*codec.Error, uint32) {
	tc.t.Helper()
	for {
		env, _ := tc.next()
		if env == nil {
			tc.t.Fatal("closed without an Error")
		}
		if e := env.GetError(); e != nil {
			<-tc.c.done
			return e, tc.c.code.Load()
		}
	}
}
