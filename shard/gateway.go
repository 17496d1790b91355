package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/state"
)

// ClientConn is what the gateway needs of a client's realtime connection
// (the edge adapts transport.Conn to it). Read is called by one goroutine
// (its data is valid until the next Read); WriteReliable, WriteUnreliable
// and Flush by one goroutine (the writer); Close by any.
type ClientConn interface {
	Transport() string // "webtransport", "webrtc", "websocket"
	JSON() bool        // envelopes are protojson (WebSocket egbe.v1.json)
	RemoteAddr() net.Addr
	// Read blocks for the next message on either lane.
	Read(ctx context.Context) (data []byte, unreliable bool, err error)
	// WriteReliable buffers msg on the reliable lane; it is sent at the
	// latest by the next successful Flush. It blocks only under
	// backpressure (or until ctx is done). msg is not retained.
	WriteReliable(ctx context.Context, msg []byte) error
	// Flush hands everything buffered to the network.
	Flush(ctx context.Context) error
	// WriteUnreliable never blocks; it errs when there is no such lane or
	// the message was dropped.
	WriteUnreliable(msg []byte) error
	HasUnreliable() bool
	// Close ends the connection with an application close code
	// (codec.Code.CloseCode). Idempotent.
	Close(code uint32, reason string) error
	// Done is closed once the connection has ended.
	Done() <-chan struct{}
}

// AdmitRequest is what admission sees of a handshake.
type AdmitRequest struct {
	Access     auth.Access
	Hello      *codec.ClientHello
	RemoteAddr net.Addr
	Resume     bool // the client presented a valid resume token
}

// Admitter runs admission for a handshake. It returns a release func (called
// once when the session ends; may be nil) or a *codec.WireError refusal.
type Admitter interface {
	Admit(ctx context.Context, r AdmitRequest) (release func(), err error)
}

// VoiceHooks let the voice SFU follow realtime sessions. Calls must not
// block.
type VoiceHooks interface {
	OnPresence(sessionID string, x, y, z int32)
	OnControl(sessionID string, c *codec.VoiceControl) error
	OnClose(sessionID string)
}

// Deps are the gateway's collaborators.
type Deps struct {
	Signer        *auth.Signer // required
	Admit         Admitter     // nil: admit all
	Voice         VoiceHooks   // nil: voice controls are ignored
	Pins          PinStore     // nil: NewMemoryPins(Now)
	FallbackChain func() []string
	Logger        *slog.Logger
	Now           func() time.Time
	Registerer    prometheus.Registerer
	// Revocations: nil is state.NewMemoryRevocations(Now); see revocation.go.
	Revocations state.Revocations
	// Shards is the fleet's shard directory: nil, links come from config
	// only; see discovery.go.
	Shards state.ShardDirectory
}

// SessionInfo describes a live session (for the voice SFU).
type SessionInfo struct {
	ID, Subject, InstanceID, ShardID string
	EntityID                         uint32
	Transport                        string
	Access                           auth.Access
}

// Gateway runs realtime sessions and the shard links behind them.
type Gateway struct {
	cfg   Config       // immutable after New
	d     Deps         // immutable after New
	log   *slog.Logger // immutable after New
	now   func() time.Time
	m     *metrics
	dir   *Directory
	pins  PinStore
	links map[string]*link // guarded by linksMu; discovery adds links, none is removed

	linksMu sync.Mutex
	disc    discovery // immutable after New (tests shorten it before Run)

	draining atomic.Bool

	scratch scratchPool // a projection's working arrays, lent to session writers

	mu       sync.Mutex
	sessions map[string]*session // guarded by mu: live sessions by id
	changed  chan struct{}       // guarded by mu: closed and replaced when sessions changes
}

// NewGateway builds a gateway; Run starts its links.
func NewGateway(cfg Config, d Deps) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Signer == nil {
		return nil, fmt.Errorf("%w: a signer is required", ErrConfig)
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Pins == nil {
		d.Pins = NewMemoryPins(d.Now)
	}
	if d.Revocations == nil {
		d.Revocations = state.NewMemoryRevocations(d.Now)
	}
	m, err := newMetrics(d.Registerer)
	if err != nil {
		return nil, fmt.Errorf("shard: metrics: %w", err)
	}
	g := &Gateway{
		cfg: cfg, d: d, log: d.Logger.With("component", "shard"), now: d.Now, m: m,
		dir: NewDirectory(cfg.Shards, cfg.Instances), pins: d.Pins,
		links: map[string]*link{}, sessions: map[string]*session{}, changed: make(chan struct{}),
	}
	for id, addr := range cfg.Shards {
		g.links[id] = newLink(g, id, addr)
		m.linkUp.WithLabelValues(id).Set(0)
	}
	return g, nil
}

// Directory is the gateway's shard directory.
func (g *Gateway) Directory() *Directory { return g.dir }

// Run owns the shard links; it returns when ctx is done and every link
// goroutine has ended.
func (g *Gateway) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, l := range g.linkList() {
		wg.Add(1)
		go func() { defer wg.Done(); l.run(ctx) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); g.refreshPins(ctx) }()
	if n, ok := g.d.Revocations.(state.RevocationNotices); ok {
		wg.Add(1)
		go func() { defer wg.Done(); g.watchRevocations(ctx, n) }()
	}
	if g.d.Shards != nil {
		wg.Add(1)
		go func() { defer wg.Done(); g.runDiscovery(ctx) }() // also runs the links it creates
	}
	wg.Wait()
	return nil
}

// refreshPins re-puts the pin of every connected session every third of
// the pin TTL, so a store that expires keys by itself (Redis) keeps them
// while the session lives.
func (g *Gateway) refreshPins(ctx context.Context) {
	t := time.NewTicker(max(g.cfg.PinTTL/3, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.mu.Lock()
		list := make([]*session, 0, len(g.sessions))
		for _, s := range g.sessions {
			list = append(list, s)
		}
		g.mu.Unlock()
		list = g.closeRevoked(ctx, list) // revoked elsewhere in the fleet: end them here
		for _, s := range list {
			if err := s.putPin(ctx, false); err != nil {
				g.log.Warn("pin refresh failed", "session", s.id, "err", err)
			}
		}
	}
}

// Ready reports whether the gateway takes new sessions: not draining and
// every shard link up.
func (g *Gateway) Ready() bool {
	if g.draining.Load() {
		return false
	}
	// One dead shard must not take every edge out of its load balancer:
	// sessions for that shard's instances are refused with a typed
	// shard_unavailable, everything else is served. Unready only when no
	// shard at all can be reached.
	links := g.linkList()
	if len(links) == 0 {
		return true
	}
	for _, l := range links {
		if l.up() {
			return true
		}
	}
	return false
}

// LinkUp reports whether the link to shard is connected.
func (g *Gateway) LinkUp(shard string) bool {
	l := g.link(shard)
	return l != nil && l.up()
}

// Session describes a live session.
func (g *Gateway) Session(id string) (SessionInfo, bool) {
	g.mu.Lock()
	s := g.sessions[id]
	g.mu.Unlock()
	if s == nil {
		return SessionInfo{}, false
	}
	return s.info(), true
}

// Sessions is the number of live sessions.
func (g *Gateway) Sessions() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sessions)
}

// SendVoiceEvent queues a VoiceEvent for a session; false if the session is
// gone, has no voice, or its queue is full.
func (g *Gateway) SendVoiceEvent(sessionID string, ev *codec.VoiceEvent) bool {
	g.mu.Lock()
	s := g.sessions[sessionID]
	g.mu.Unlock()
	if s == nil || !s.voice {
		return false
	}
	return s.tryEnqueue(outItem{kind: outEnv, env: &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Voice{Voice: ev}}}, dropVoiceQueue)
}

// Drain turns readiness off, then sends every session Drain{reconnect_after_ms,
// resume_token}, spread over DrainWindow (compressed to ctx's deadline), and
// closes it. It returns when every session has ended or ctx is done.
func (g *Gateway) Drain(ctx context.Context) error {
	g.draining.Store(true)
	g.mu.Lock()
	list := make([]*session, 0, len(g.sessions))
	for _, s := range g.sessions {
		list = append(list, s)
	}
	g.mu.Unlock()
	window := g.cfg.DrainWindow
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl) / 2; left < window {
			window = max(left, 0)
		}
	}
	start := time.Now()
	for i, s := range list {
		at := start.Add(time.Duration(int64(window) * int64(i) / int64(len(list))))
		if d := time.Until(at); d > 0 && ctx.Err() == nil {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		s.drain()
	}
	for {
		g.mu.Lock()
		n, ch := len(g.sessions), g.changed
		g.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("shard: drain: %d sessions left: %w", n, ctx.Err())
		}
	}
}

func (g *Gateway) register(s *session) (old *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old = g.sessions[s.id]
	g.sessions[s.id] = s
	close(g.changed)
	g.changed = make(chan struct{})
	return old
}

func (g *Gateway) unregister(s *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sessions[s.id] == s {
		delete(g.sessions, s.id)
		close(g.changed)
		g.changed = make(chan struct{})
	}
}

func (g *Gateway) lookup(id string) *session {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sessions[id]
}

// resumeToken mints a resume token for a session.
func (g *Gateway) resumeToken(s *session, ttl time.Duration) string {
	tok, err := g.d.Signer.IssueResume(auth.Resume{
		SessionID: s.id, ShardID: s.shardID, InstanceID: s.instance, Subject: s.subject, EntityID: s.entity,
	}, ttl)
	if err != nil {
		g.log.Error("issue resume token", "session", s.id, "err", err)
		return ""
	}
	return tok
}

func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "s_" + hex.EncodeToString(b[:])
}

func jitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return time.Duration(mrand.Int64N(int64(max)))
}
