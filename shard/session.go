package shard

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/shard/internal/linkio"
)

// historyLen bounds the sent projections a session keeps as possible delta
// bases (1.6 s at 20 Hz): an ack older than that gets a full snapshot.
// Only the projections from the newest acknowledged one on are kept, so a
// client that acks in time holds one or two.
const historyLen = 32

// writeGrace is how long a stopping session's writer may take to flush
// what is queued and the final message.
const writeGrace = time.Second

// session is one client's proxied session. It has two goroutines: the
// reader (the caller of Gateway.Serve: readLoop) and the writer
// (writeLoop), the only writer of the client. Shard frames reach it from
// the link's lane and control readers, which never wait for it.
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
	lc                                        *linkConn // the link connection the session is open on
	lane                                      *lane     // its lane on lc
	handle                                    uint32    // its handle on lc
	release                                   func()
	openCh                                    chan openResult // cap 1: the shard's answer to the open

	ctx    context.Context // cancelled by stop: ends the reader
	cancel context.CancelFunc
	wctx   context.Context // the writer's context: cancelled a grace period after stop
	wstop  context.CancelFunc
	ended  chan struct{} // closed when run has returned
	opened atomic.Bool   // the shard answered the open (later errors stop the session)

	graceMu  sync.Mutex
	grace    *time.Timer // guarded by graceMu: cancels wctx writeGrace after stop
	stopOnce sync.Once
	causeMu  sync.Mutex
	cause    stopCause // guarded by causeMu; written once in stop

	notify chan struct{} // cap 1: something is queued for the writer
	ctrl   ctrlQueue     // reliable messages, written by writeLoop

	// The writer goroutine runs while there is something to write and for
	// writerIdle after: an idle session keeps only its reader's stack.
	writerOn   atomic.Bool    // a writer is running (or starting)
	writerMu   sync.Mutex     // orders writer starts against endWriters
	writerDone bool           // guarded by writerMu: the session is over, no more writers
	writers    sync.WaitGroup // every writer goroutine
	// actionAck is the newest action id the shard acknowledged (a
	// latest-wins slot: acks are cumulative, so none is ever lost to a full
	// queue); sentAck is the newest the writer sent. Owned by the lane
	// reader (actionAck) and the writer (sentAck).
	actionAck atomic.Uint64
	sentAck   uint64

	snapMu      sync.Mutex
	snapPending *sharedSnap // guarded by snapMu: newest unsent instance snapshot (holds a reference)

	// settled is the content version at which the client holds everything
	// its window shows (0: not settled). The link's fanout skips a session
	// settled at the snapshot's version. Written under winMu.
	settled atomic.Uint64

	winMu    sync.Mutex
	win      codec.Window // guarded by winMu
	winDirty bool         // guarded by winMu: changed since the writer last read it
	presSeq  uint64       // owned by readLoop: newest presence seq seen

	// Presence towards the shard, latest wins, at most PresenceHz: sent at
	// once when the interval has passed, else by presTimer.
	presMu      sync.Mutex
	pres        codec.Presence // guarded by presMu: the newest unsent presence
	presPending bool           // guarded by presMu
	presNext    time.Time      // guarded by presMu: the earliest next send
	presTimer   *time.Timer    // guarded by presMu; nil until first needed
	presArmed   bool           // guarded by presMu
	presClosed  bool           // guarded by presMu: no more sends or timers
	presWG      sync.WaitGroup // the timer's callback, waited for at the end

	acked atomic.Uint64 // newest snapshot sequence the client acknowledged

	pinMu    sync.Mutex
	pinFinal bool // guarded by pinMu: the disconnect pin is stored

	// Owned by writeLoop.
	budget     codec.Budget
	buf        []byte
	hist       []sentState      // oldest first; from the newest acked state on
	free       [][]codec.Entity // spare history arrays
	deltaCount uint64
	unflushed  bool // a reliable write since the last Flush

	// Owned by readLoop.
	msg   codec.ClientMsg
	upBuf []byte
	hello []byte // the ServerHello, encoded by the handshake; sent first
}

// sentState is one projection the client was sent: a possible delta base.
type sentState struct {
	seq      uint64
	ents     []codec.Entity
	reliable bool      // sent on the reliable lane: it will arrive
	at       time.Time // when it was sent
}

type openResult struct {
	opened *codec.LinkSessionOpened
	err    error
}

// stopCause is why a session ends and what the client is told.
type stopCause struct {
	code    codec.Code // "" for a plain end (client gone, shutdown)
	msg     string
	final   *codec.ServerEnvelope // sent last, after the queued messages
	noFinal bool                  // close without sending an Error for code
}

func newSession(ctx context.Context, g *Gateway, c ClientConn, l *link, h *codec.ClientHello, acc auth.Access, neg codec.Negotiation) *session {
	s := &session{
		g: g, c: c, link: l, subject: acc.Subject, access: acc, transport: c.Transport(), json: c.JSON(),
		deltas: neg.Has("deltas"), unreliable: neg.Has("unreliable-lane") && c.HasUnreliable(),
		events: neg.Has("world-events"), squad: neg.Has("squad-comms"), voice: neg.Has("voice"), acks: neg.Has("action-acks"),
		ended:  make(chan struct{}),
		openCh: make(chan openResult, 1),
		notify: make(chan struct{}, 1),
		ctrl:   ctrlQueue{max: g.cfg.ControlQueue},
		budget: codec.NewBudget(g.cfg.ReplicationBps, 0),
	}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.wctx, s.wstop = context.WithCancel(context.WithoutCancel(ctx))
	if h.AuthorityKind == codec.AuthorityKind_TIER2_FALLBACK {
		s.profile = h.RendererProfile
	}
	return s
}

// abort undoes a session whose handshake failed after newSession.
func (s *session) abort() {
	if s.lc != nil {
		s.lc.remove(s)
	}
	s.cancel()
	s.wstop()
	s.dropSnap()
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

// run proxies the session until it ends: the calling goroutine is the
// reader, one more is the writer.
func (s *session) run(parent context.Context) {
	defer close(s.ended)
	defer s.wstop()
	g := s.g
	s.ctrl.tryPush(outItem{kind: outPre, raw: s.hello}) // the queue is empty: the hello goes first
	s.hello = nil
	g.register(s)
	s.link.attach(s)
	g.m.sessions.WithLabelValues(s.transport, s.shardID).Inc()
	// No logger With the session's attributes is kept: that would hold a
	// formatted copy of them for the session's whole life.
	g.log.Debug("session start", "session", s.id, "shard", s.shardID, "transport", s.transport, "resumed", s.resumed)

	s.wake()               // starts the writer: the hello goes out
	if g.draining.Load() { // Drain began while this session was in its handshake
		s.drain()
	}
	s.readLoop()
	s.stop(stopCause{})
	s.endWriters()
	s.endPresence()

	s.lc.remove(s) // LinkSessionClose: the shard keeps the session's state for a resume
	s.link.detach(s)
	g.unregister(s)
	g.m.sessions.WithLabelValues(s.transport, s.shardID).Dec()
	if err := s.putPin(context.WithoutCancel(parent), true); err != nil {
		g.log.Warn("pin refresh failed", "session", s.id, "shard", s.shardID, "err", err)
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
	s.dropSnap()
	g.log.Debug("session end", "session", s.id, "shard", s.shardID, "code", s.stopCause().code)
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
		s.wake() // a writer flushes what is queued and the final message, then closes
	})
}

func (s *session) stopCause() stopCause {
	s.causeMu.Lock()
	defer s.causeMu.Unlock()
	return s.cause
}

// drain sends Drain with a fresh resume token and ends the session.
func (s *session) drain() {
	d := &codec.Drain{
		ReconnectAfterMs: uint32(jitter(s.g.cfg.DrainReconnectMax) / time.Millisecond),
		ResumeToken:      s.g.resumeToken(s, s.g.cfg.ResumeTTL),
	}
	s.stop(stopCause{code: codec.CodeDraining, msg: "edge draining", final: &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Drain{Drain: d}}})
}

// linkDown ends the session because its link connection ended (or answers
// a pending open with the same).
func (s *session) linkDown() {
	if s.opened.CompareAndSwap(false, true) {
		s.openCh <- openResult{err: ErrLinkDown} // cap 1, and only the CAS winner sends
		return
	}
	s.stop(s.linkLost())
}

// linkLost is the cause when the shard side fails under a live session.
func (s *session) linkLost() stopCause {
	e := &codec.Error{Code: string(codec.CodeShardUnavailable), Message: "the world shard is unreachable; resume with the token",
		ResumeToken: s.g.resumeToken(s, s.g.cfg.ResumeTTL)}
	return stopCause{code: codec.CodeShardUnavailable, final: &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Error{Error: e}}}
}

// wake tells the writer something is queued, starting one if none runs.
func (s *session) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
	if !s.writerOn.Load() {
		s.startWriter()
	}
}

func (s *session) startWriter() {
	s.writerMu.Lock()
	defer s.writerMu.Unlock()
	if s.writerDone || !s.writerOn.CompareAndSwap(false, true) {
		return
	}
	s.writers.Add(1)
	go func() {
		defer s.writers.Done()
		s.writeLoop()
	}()
}

// endWriters waits for the stopping session's writer (which writes the
// final message and closes the connection) and lets no other start.
func (s *session) endWriters() {
	s.wake()
	s.writerMu.Lock()
	s.writerDone = true
	s.writerMu.Unlock()
	s.writers.Wait()
}

// enqueue queues a reliable message from the reader, waiting while the
// queue is full (the session's own backpressure). False once the session
// is stopping.
func (s *session) enqueue(it outItem) bool {
	if !s.ctrl.push(s.ctx, it) {
		return false
	}
	s.wake()
	return true
}

// tryEnqueue queues without waiting; a full queue drops and counts.
func (s *session) tryEnqueue(it outItem, reason string) bool {
	if !s.ctrl.tryPush(it) {
		s.g.m.drops.WithLabelValues(reason).Inc()
		return false
	}
	s.wake()
	return true
}

// offerSnap makes sn the session's next snapshot (latest wins).
func (s *session) offerSnap(sn *sharedSnap) {
	sn.retain()
	s.snapMu.Lock()
	old := s.snapPending
	s.snapPending = sn
	s.snapMu.Unlock()
	if old != nil {
		s.g.m.dropStaleC.Inc()
		old.release()
	}
	s.wake()
}

// takeSnap takes the pending snapshot (and its reference).
func (s *session) takeSnap() *sharedSnap {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	sn := s.snapPending
	s.snapPending = nil
	return sn
}

func (s *session) dropSnap() {
	if sn := s.takeSnap(); sn != nil {
		sn.release()
	}
}

// fromShard takes one lane frame for this session (on the lane's reader:
// it must not wait).
func (s *session) fromShard(f *codec.ShardFrame) {
	m := s.g.m
	switch f.Kind {
	case codec.ShardOpenedKind:
		if s.opened.CompareAndSwap(false, true) {
			s.openCh <- openResult{opened: f.Msg.GetOpened()}
		}
	case codec.ShardErrorKind:
		code := codec.Code(f.Msg.GetError().GetCode())
		if !code.Valid() {
			code = codec.CodeInternal
		}
		if s.opened.CompareAndSwap(false, true) {
			s.openCh <- openResult{err: &codec.WireError{Code: code, Message: f.Msg.GetError().GetMessage()}}
			return
		}
		s.stop(stopCause{code: code, msg: f.Msg.GetError().GetMessage()})
	case codec.ShardActionAckKind:
		if !s.acks {
			return
		}
		for {
			old := s.actionAck.Load()
			if f.ActionAck <= old || s.actionAck.CompareAndSwap(old, f.ActionAck) {
				break
			}
		}
		s.wake()
	case codec.ShardSessionEventKind:
		// World events are best effort (as the instance-wide ones): a
		// client that cannot keep up loses events, and never holds the lane.
		if s.events {
			m.messages.WithLabelValues("down", "event").Inc()
			s.tryEnqueue(outItem{kind: outEnv, env: &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Event{Event: f.Msg.GetSessionEvent()}}}, dropEventQueue)
		}
	case codec.ShardSquadKind:
		if s.squad {
			m.messages.WithLabelValues("down", "squad").Inc()
			s.tryEnqueue(outItem{kind: outEnv, env: &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Squad{Squad: f.Msg.GetSquad()}}}, dropSquadQueue)
		}
	}
}

// readLoop reads the client until it leaves or the session stops. It acts
// on each message at once: presence to the latest-wins slot, actions and
// squad comms to the session's lane, acks to an atomic, pings to the
// writer's queue.
func (s *session) readLoop() {
	g := s.g
	m := &s.msg
	for {
		data, _, err := s.c.Read(s.ctx)
		if err != nil {
			if isTooLarge(err) {
				s.stop(stopCause{code: codec.CodeFrameTooLarge, msg: "message too large"})
			}
			return
		}
		if err := codec.DecodeClientMsg(data, s.json, m); err != nil {
			// A bad message is answered and counted; the session goes on.
			g.m.drops.WithLabelValues(dropBadMessage).Inc()
			s.tryEnqueue(outItem{kind: outEnv, env: &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Error{Error: &codec.Error{Code: string(codec.CodeBadMessage), Message: "message does not decode"}}}}, dropEventQueue)
			continue
		}
		switch m.Kind {
		case codec.ClientPresenceKind:
			g.m.upPresence.Inc()
			s.onPresence(&m.Presence)
		case codec.ClientAckKind:
			if seq := m.AckSeq; seq > s.acked.Load() { // only this goroutine writes acked
				s.acked.Store(seq)
			}
		case codec.ClientPingKind:
			if !s.enqueue(outItem{kind: outPong, a: m.PingTimeMs, b: uint64(g.now().UnixMilli())}) {
				return
			}
		case codec.ClientActionsKind:
			g.m.messages.WithLabelValues("up", "actions").Inc()
			if !s.sendUp(&codec.LinkEdgeFrame{Session: s.handle, Msg: &codec.LinkEdgeFrame_Actions{Actions: m.Env.GetActions()}}) {
				return
			}
		case codec.ClientSquadKind:
			if !s.squad {
				g.m.drops.WithLabelValues(dropUnexpected).Inc()
				continue
			}
			g.m.messages.WithLabelValues("up", "squad").Inc()
			sq := m.Env.GetSquad()
			sq.FromSessionId = s.id
			if !s.sendUp(&codec.LinkEdgeFrame{Session: s.handle, Msg: &codec.LinkEdgeFrame_Squad{Squad: sq}}) {
				return
			}
		case codec.ClientVoiceKind:
			if g.d.Voice != nil && s.voice {
				if err := g.d.Voice.OnControl(s.id, m.Env.GetVoice()); err != nil {
					s.tryEnqueue(outItem{kind: outEnv, env: &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Error{Error: codec.ToProto(err)}}}, dropEventQueue)
				}
			}
		default: // a second hello
			g.m.drops.WithLabelValues(dropUnexpected).Inc()
		}
	}
}

// sendUp queues a reliable frame for the shard on the session's lane
// (waiting while the lane is full). False once the session stops or the
// link is down.
func (s *session) sendUp(f *codec.LinkEdgeFrame) bool {
	b, err := linkio.AppendFrame(s.upBuf[:0], f)
	if err != nil {
		s.g.m.drops.WithLabelValues(dropBadMessage).Inc()
		return true
	}
	s.upBuf = b
	if !s.lane.send(s.ctx, b) {
		if s.ctx.Err() == nil {
			s.stop(s.linkLost())
		}
		return false
	}
	return true
}

// onPresence updates the interest window and offers the packet to the
// shard: latest wins, at most PresenceHz (excess coalesced and counted).
func (s *session) onPresence(p *codec.Presence) {
	if p.Seq != 0 { // presence may ride the unreliable lane: drop reordered packets
		if p.Seq <= s.presSeq {
			s.g.m.drops.WithLabelValues(dropPresenceOld).Inc()
			return
		}
		s.presSeq = p.Seq
	}
	w := codec.WindowForPresence(p, s.entity, s.profile)
	s.winMu.Lock()
	if w != s.win {
		s.win, s.winDirty = w, true
		s.settled.Store(0)
	}
	s.winMu.Unlock()

	now := s.g.now()
	s.presMu.Lock()
	if s.presClosed {
		s.presMu.Unlock()
		return
	}
	if s.presPending {
		s.g.m.presenceCoal.Inc()
	}
	s.pres, s.presPending = *p, true
	if s.presArmed {
		s.presMu.Unlock()
		return
	}
	if wait := s.presNext.Sub(now); wait > 0 {
		if s.presTimer == nil {
			s.presTimer = time.AfterFunc(wait, s.presenceDue)
		} else {
			s.presTimer.Reset(wait)
		}
		s.presArmed = true
		s.presWG.Add(1)
		s.presMu.Unlock()
		return
	}
	s.sendPresenceLocked(now)
	s.presMu.Unlock()
}

// presenceDue is presTimer's callback: the interval has passed.
func (s *session) presenceDue() {
	defer s.presWG.Done()
	s.presMu.Lock()
	defer s.presMu.Unlock()
	s.presArmed = false
	if !s.presClosed && s.presPending {
		s.sendPresenceLocked(s.g.now())
	}
}

// sendPresenceLocked hands the pending presence to the lane.
func (s *session) sendPresenceLocked(now time.Time) {
	s.presPending = false
	s.presNext = now.Add(time.Second / time.Duration(s.g.cfg.PresenceHz))
	if !s.lane.sendPresence(s.handle, &s.pres) {
		s.g.m.drops.WithLabelValues(dropLaneFull).Inc()
		return
	}
	if s.g.d.Voice != nil && s.voice {
		s.g.d.Voice.OnPresence(s.id, s.pres.Position.X, s.pres.Position.Y, s.pres.Position.Z)
	}
}

// endPresence stops the pacing timer and waits for a callback in flight.
func (s *session) endPresence() {
	s.presMu.Lock()
	s.presClosed = true
	if s.presArmed && s.presTimer.Stop() {
		s.presArmed = false
		s.presWG.Done()
	}
	s.presMu.Unlock()
	s.presWG.Wait()
}
