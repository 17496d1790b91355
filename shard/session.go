package shard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/shard/internal/linkio"
)

// historyLen is how many sent projections a session keeps as possible delta
// bases (1.6 s at 20 Hz): an ack older than that gets a full snapshot.
const historyLen = 32

// writeGrace is how long a stopping session's writer may take to flush
// what is queued and the final message.
const writeGrace = time.Second

// upQueue bounds a session's reliable frames towards the shard.
const upQueue = 64

// session is one client's proxied session.
type session struct {
	g    *Gateway   // immutable
	c    ClientConn // immutable
	link *link      // immutable

	// Immutable once the handshake is done.
	id, subject, instance, shardID, transport string
	entity                                    uint32
	resumed, json                             bool
	deltas, unreliable, events, squad, voice  bool
	acks                                      bool
	access                                    auth.Access
	profile                                   *codec.RendererProfile
	st                                        *quic.Stream
	sr                                        *linkio.Reader
	release                                   func()
	helloEnv                                  *codec.ServerEnvelope

	ctx    context.Context // cancelled by stop: ends the reader and the shard side
	cancel context.CancelFunc
	wctx   context.Context // the writer's context: cancelled a grace period after stop
	wstop  context.CancelFunc
	ended  chan struct{} // closed when run has returned

	graceMu  sync.Mutex
	grace    *time.Timer // guarded by graceMu: cancels wctx writeGrace after stop
	stopOnce sync.Once
	causeMu  sync.Mutex
	cause    stopCause // guarded by causeMu; written once in stop

	ctrl chan *codec.ServerEnvelope // reliable lane, written by writeLoop; bounded
	up   chan []byte                // frames to the shard, written by upLoop; bounded

	snapMu      sync.Mutex
	snapPending *codec.World  // guarded by snapMu: latest unsent instance snapshot
	snapNotify  chan struct{} // cap 1

	presMu      sync.Mutex
	presPending []byte        // guarded by presMu: latest unsent presence frame
	presPos     [3]int32      // guarded by presMu: its position
	presNotify  chan struct{} // cap 1

	winMu   sync.Mutex
	win     codec.Window // guarded by winMu
	presSeq uint64       // owned by readLoop: newest presence seq seen

	acked atomic.Uint64 // newest snapshot sequence the client acknowledged

	pinMu    sync.Mutex
	pinFinal bool // guarded by pinMu: the disconnect pin is stored

	// Owned by writeLoop.
	budget     codec.Budget
	cur        []codec.Entity
	ups        []codec.Entity
	rms        []uint32
	buf        []byte
	hist       [historyLen]sent
	histPos    int
	deltaCount uint64
}

// sent is one projection the client was sent: a possible delta base.
type sent struct {
	seq  uint64
	ents []codec.Entity
}

// stopCause is why a session ends and what the client is told.
type stopCause struct {
	code    codec.Code // "" for a plain end (client gone, shutdown)
	msg     string
	final   *codec.ServerEnvelope // sent last, after the queued messages
	noFinal bool                  // close without sending an Error for code
}

func newSession(g *Gateway, c ClientConn, l *link, h *codec.ClientHello, acc auth.Access, neg codec.Negotiation) *session {
	s := &session{
		g: g, c: c, link: l, subject: acc.Subject, access: acc, transport: c.Transport(), json: c.JSON(),
		deltas: neg.Has("deltas"), unreliable: neg.Has("unreliable-lane") && c.HasUnreliable(),
		events: neg.Has("world-events"), squad: neg.Has("squad-comms"), voice: neg.Has("voice"), acks: neg.Has("action-acks"),
		ended:      make(chan struct{}),
		ctrl:       make(chan *codec.ServerEnvelope, g.cfg.ControlQueue),
		up:         make(chan []byte, upQueue),
		snapNotify: make(chan struct{}, 1),
		presNotify: make(chan struct{}, 1),
		budget:     codec.NewBudget(g.cfg.ReplicationBps, 0),
	}
	if h.AuthorityKind == codec.AuthorityKind_TIER2_FALLBACK {
		s.profile = h.RendererProfile
	}
	return s
}

// pin is the session's pin while it is connected.
func (s *session) pin() Pin {
	return Pin{SessionID: s.id, ShardID: s.shardID, InstanceID: s.instance, Subject: s.subject, EntityID: s.entity}
}

// putPin stores the session's pin: refreshed while connected, or (final)
// expiring min(PinTTL, ResumeTTL) from now. Nothing refreshes it after the
// final put.
func (s *session) putPin(ctx context.Context, final bool) error {
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	if s.pinFinal {
		return nil
	}
	p := s.pin()
	if final {
		s.pinFinal = true
		p.ExpiresAt = s.g.now().Add(min(s.g.cfg.PinTTL, s.g.cfg.ResumeTTL))
	}
	return s.g.pins.Put(ctx, p)
}

func (s *session) info() SessionInfo {
	return SessionInfo{ID: s.id, Subject: s.subject, InstanceID: s.instance, ShardID: s.shardID,
		EntityID: s.entity, Transport: s.transport, Access: s.access}
}

// run proxies the session until it ends.
func (s *session) run(parent context.Context) {
	defer close(s.ended)
	s.ctx, s.cancel = context.WithCancel(parent)
	s.wctx, s.wstop = context.WithCancel(context.WithoutCancel(parent))
	defer s.wstop()
	g := s.g
	s.ctrl <- s.helloEnv // the queue is empty: the hello goes first
	g.register(s)
	s.link.attach(s)
	g.m.sessions.WithLabelValues(s.transport, s.shardID).Inc()
	log := g.log.With("session", s.id, "shard", s.shardID)
	log.Debug("session start", "transport", s.transport, "resumed", s.resumed)

	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		s.writeLoop()
		// Everything the client will get is written: closing now also
		// unblocks a transport Read that does not watch its context.
		s.closeConn()
	}()
	go func() { defer wg.Done(); s.upLoop() }()
	go func() { defer wg.Done(); s.downLoop() }()
	if g.draining.Load() { // Drain began while this session was in its handshake
		s.drain()
	}
	s.readLoop()
	s.stop(stopCause{})
	wg.Wait()

	s.link.detach(s)
	g.unregister(s)
	g.m.sessions.WithLabelValues(s.transport, s.shardID).Dec()
	if err := s.putPin(context.WithoutCancel(parent), true); err != nil {
		log.Warn("pin refresh failed", "err", err)
	}
	if s.release != nil {
		s.release()
	}
	if g.d.Voice != nil {
		g.d.Voice.OnClose(s.id)
	}
	s.closeConn()
	s.graceMu.Lock()
	if s.grace != nil {
		s.grace.Stop()
	}
	s.graceMu.Unlock()
	log.Debug("session end", "code", s.stopCause().code)
}

// closeConn closes the client connection with the stop cause's code.
func (s *session) closeConn() {
	cause := s.stopCause()
	code, reason := uint32(1000), "session ended"
	if cause.code != "" {
		code, reason = cause.code.CloseCode(), string(cause.code)
	}
	_ = s.c.Close(code, reason)
}

// stop ends the session (first cause wins). The writer gets a grace period
// to flush queued messages and the final one.
func (s *session) stop(c stopCause) {
	s.stopOnce.Do(func() {
		if c.code != "" && c.final == nil && !c.noFinal {
			c.final = &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Error{Error: &codec.Error{Code: string(c.code), Message: c.msg}}}
		}
		s.causeMu.Lock()
		s.cause = c
		s.causeMu.Unlock()
		s.cancel()
		s.graceMu.Lock()
		s.grace = time.AfterFunc(writeGrace, s.wstop)
		s.graceMu.Unlock()
	})
}

func (s *session) stopCause() stopCause {
	s.causeMu.Lock()
	defer s.causeMu.Unlock()
	return s.cause
}

// drain sends Drain with a fresh resume token and ends the session.
func (s *session) drain() {
	if s.ctx == nil {
		return
	}
	d := &codec.Drain{
		ReconnectAfterMs: uint32(jitter(s.g.cfg.DrainReconnectMax) / time.Millisecond),
		ResumeToken:      s.g.resumeToken(s, s.g.cfg.ResumeTTL),
	}
	s.stop(stopCause{code: codec.CodeDraining, msg: "edge draining", final: &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Drain{Drain: d}}})
}

// enqueue queues a reliable message, waiting while the queue is full (the
// session's own backpressure). False once the session is stopping.
func (s *session) enqueue(env *codec.ServerEnvelope) bool {
	select {
	case s.ctrl <- env:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// tryEnqueue queues without waiting; a full queue drops and counts.
func (s *session) tryEnqueue(env *codec.ServerEnvelope, reason string) bool {
	select {
	case s.ctrl <- env:
		return true
	default:
		s.g.m.drops.WithLabelValues(reason).Inc()
		return false
	}
}

// offerWorld makes w the session's next snapshot (latest wins).
func (s *session) offerWorld(w *codec.World) {
	s.snapMu.Lock()
	if s.snapPending != nil {
		s.g.m.dropStaleC.Inc()
	}
	s.snapPending = w
	s.snapMu.Unlock()
	select {
	case s.snapNotify <- struct{}{}:
	default:
	}
}

// readLoop reads the client until it leaves or the session stops.
func (s *session) readLoop() {
	g := s.g
	var env codec.ClientEnvelope
	for {
		data, _, err := s.c.Read(s.ctx)
		if err != nil {
			if isTooLarge(err) {
				s.stop(stopCause{code: codec.CodeFrameTooLarge, msg: "message too large"})
			}
			return
		}
		env.Reset()
		if err := codec.DecodeClient(data, s.json, &env); err != nil {
			// A bad message is answered and counted; the session goes on.
			g.m.drops.WithLabelValues(dropBadMessage).Inc()
			s.tryEnqueue(&codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Error{Error: &codec.Error{Code: string(codec.CodeBadMessage), Message: "message does not decode"}}}, dropEventQueue)
			continue
		}
		switch m := env.Msg.(type) {
		case *codec.ClientEnvelope_Presence:
			g.m.upPresence.Inc()
			s.onPresence(m.Presence)
		case *codec.ClientEnvelope_Actions:
			g.m.messages.WithLabelValues("up", "actions").Inc()
			if !s.sendUp(&codec.LinkEdgeFrame{Msg: &codec.LinkEdgeFrame_Actions{Actions: m.Actions}}) {
				return
			}
		case *codec.ClientEnvelope_Squad:
			if !s.squad {
				g.m.drops.WithLabelValues(dropUnexpected).Inc()
				continue
			}
			g.m.messages.WithLabelValues("up", "squad").Inc()
			m.Squad.FromSessionId = s.id
			if !s.sendUp(&codec.LinkEdgeFrame{Msg: &codec.LinkEdgeFrame_Squad{Squad: m.Squad}}) {
				return
			}
		case *codec.ClientEnvelope_Ack:
			seq := m.Ack.SnapshotSequence
			for {
				old := s.acked.Load()
				if seq <= old || s.acked.CompareAndSwap(old, seq) {
					break
				}
			}
		case *codec.ClientEnvelope_Ping:
			pong := &codec.Pong{ClientTimeMs: m.Ping.ClientTimeMs, ServerTimeMs: uint64(g.now().UnixMilli())}
			if !s.enqueue(&codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Pong{Pong: pong}}) {
				return
			}
		case *codec.ClientEnvelope_Voice:
			if g.d.Voice != nil && s.voice {
				if err := g.d.Voice.OnControl(s.id, m.Voice); err != nil {
					s.tryEnqueue(&codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Error{Error: codec.ToProto(err)}}, dropEventQueue)
				}
			}
		default: // a second hello, or an empty envelope
			g.m.drops.WithLabelValues(dropUnexpected).Inc()
		}
	}
}

func (s *session) sendUp(f *codec.LinkEdgeFrame) bool {
	b, err := linkio.Frame(f)
	if err != nil {
		s.g.m.drops.WithLabelValues(dropBadMessage).Inc()
		return true
	}
	select {
	case s.up <- b:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// onPresence updates the interest window and offers the packet to the
// shard (latest wins; the up loop paces it).
func (s *session) onPresence(p *codec.PresencePacket) {
	if p.Seq != 0 { // presence may ride the unreliable lane: drop reordered packets
		if p.Seq <= s.presSeq {
			s.g.m.drops.WithLabelValues(dropPresenceOld).Inc()
			return
		}
		s.presSeq = p.Seq
	}
	w := codec.WindowFor(p, s.entity, s.profile)
	s.winMu.Lock()
	s.win = w
	s.winMu.Unlock()
	b, err := linkio.Frame(&codec.LinkEdgeFrame{Msg: &codec.LinkEdgeFrame_Presence{Presence: p}})
	if err != nil {
		return
	}
	s.presMu.Lock()
	if s.presPending != nil {
		s.g.m.presenceCoal.Inc()
	}
	s.presPending = b
	s.presPos = [3]int32{p.GetPosition().GetXMm(), p.GetPosition().GetYMm(), p.GetPosition().GetZMm()}
	s.presMu.Unlock()
	select {
	case s.presNotify <- struct{}{}:
	default:
	}
}

// upLoop is the only writer of the shard stream: reliable frames in order,
// presence at most PresenceHz.
func (s *session) upLoop() {
	defer s.st.Close()                     // FIN: the shard keeps the session's state for a resume
	defer s.st.CancelRead(linkio.CodeNone) // ends downLoop's read
	interval := time.Second / time.Duration(s.g.cfg.PresenceHz)
	var last time.Time
	pace := time.NewTimer(time.Hour)
	pace.Stop()
	defer pace.Stop()
	armed := false
	write := func(b []byte) bool {
		if _, err := s.st.Write(b); err != nil {
			s.stop(s.linkLost())
			return false
		}
		return true
	}
	sendPresence := func() bool {
		s.presMu.Lock()
		b, pos := s.presPending, s.presPos
		s.presPending = nil
		s.presMu.Unlock()
		if b == nil {
			return true
		}
		last = time.Now()
		if s.g.d.Voice != nil && s.voice {
			s.g.d.Voice.OnPresence(s.id, pos[0], pos[1], pos[2])
		}
		return write(b)
	}
	for {
		select {
		case <-s.ctx.Done():
			return
		case b := <-s.up:
			if !write(b) {
				return
			}
		case <-s.presNotify:
			if armed {
				continue
			}
			if wait := interval - time.Since(last); wait > 0 {
				pace.Reset(wait)
				armed = true
				continue
			}
			if !sendPresence() {
				return
			}
		case <-pace.C:
			armed = false
			if !sendPresence() {
				return
			}
		}
	}
}

// linkLost is the cause when the shard side fails under a live session.
func (s *session) linkLost() stopCause {
	e := &codec.Error{Code: string(codec.CodeShardUnavailable), Message: "the world shard is unreachable; resume with the token",
		ResumeToken: s.g.resumeToken(s, s.g.cfg.ResumeTTL)}
	return stopCause{code: codec.CodeShardUnavailable, final: &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Error{Error: e}}}
}

// downLoop reads the session's shard stream.
func (s *session) downLoop() {
	var f codec.LinkShardFrame
	for {
		f.Reset()
		if err := s.sr.ReadShard(&f); err != nil {
			if s.ctx.Err() == nil {
				s.stop(s.linkLost())
			}
			return
		}
		var env *codec.ServerEnvelope
		switch m := f.Msg.(type) {
		case *codec.LinkShardFrame_ActionAck:
			if s.acks {
				env = &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_ActionAck{ActionAck: m.ActionAck}}
			}
		case *codec.LinkShardFrame_SessionEvent:
			// World events are best effort (as the instance-wide ones in
			// link.event): a client that cannot keep up loses events, never
			// stalls its link stream.
			if s.events {
				s.g.m.messages.WithLabelValues("down", "event").Inc()
				s.tryEnqueue(&codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Event{Event: m.SessionEvent}}, dropEventQueue)
			}
		case *codec.LinkShardFrame_Squad:
			if s.squad {
				env = &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Squad{Squad: m.Squad}}
			}
		case *codec.LinkShardFrame_Error:
			code := codec.Code(m.Error.Code)
			if !code.Valid() {
				code = codec.CodeInternal
			}
			s.stop(stopCause{code: code, msg: m.Error.Message})
			return
		}
		if env != nil {
			s.g.m.messages.WithLabelValues("down", kindOf(env)).Inc()
			if !s.enqueue(env) {
				return
			}
		}
	}
}

func kindOf(env *codec.ServerEnvelope) string {
	switch env.Msg.(type) {
	case *codec.ServerEnvelope_ActionAck:
		return "action_ack"
	case *codec.ServerEnvelope_Event:
		return "event"
	case *codec.ServerEnvelope_Squad:
		return "squad"
	}
	return "other"
}
