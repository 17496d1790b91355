package signalling

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
)

// The idle lifecycle of leased streamers (token mode) is an egbe extension
// to Epic's protocol. Epic peers never see these messages unless they send
// one first; the edge neither relays nor answers them otherwise.
//
//	streamer -> edge  {"type":"egbe.idle.input","playerId":"Player3"}   input seen on that player's data channel
//	player   -> edge  {"type":"egbe.idle.input"}                        input seen by the player itself
//	edge -> player    {"type":"egbe.idle.prompt","disconnectAtMs":<unix ms>,"message":"Still there? Move, press a key…"}
//	edge -> player    {"type":"egbe.idle.disconnect","reason":"idle","reconnect":"new-match"}, then close 1011 "idle"
//
// The rule: a session is tracked only once one of its peers has spoken the
// extension (its first egbe.idle.input starts the clock). Player input
// travels on the WebRTC data channel between the browser and the UE
// worker, which the broker never sees, so a session whose peers are
// unmodified Epic code gives the broker no signal of activity at all; it is
// never cut as idle. What still ends it is its budget (EndSession: the
// free-tier minutes, a ban) and its lease.
//
// After the disconnect the streamer's lease is released and the session's
// token no longer subscribes: a reconnect needs a new match.
const (
	typeIdleInput      = "egbe.idle.input"
	typeIdlePrompt     = "egbe.idle.prompt"
	typeIdleDisconnect = "egbe.idle.disconnect"
	typeSessionEnded   = "egbe.session.ended"
	typeInputStats     = "egbe.input.stats"
)

// InputReport is what a UE worker saw of one player's input over a stretch
// of its session, sent to the edge as
//
//	{"type":"egbe.input.stats","playerId":"Player3","events":120,"spanMs":10000,"jitterMs":0.4,
//	 "mouse":120,"keyboard":0,"motion":60,"zeroInertia":58}
//
// events input events over spanMs, the standard deviation of their gaps
// (jitterMs), mouse and keyboard events among them, avatar motion samples
// and those that changed velocity with no acceleration ramp. Only a
// streamer's report counts (the worker is the operator's code; a player
// could claim anything). It feeds the abuse classifier's behavioural
// signals, and it is input for the idle lifecycle when events > 0.
type InputReport struct {
	Events      int64   `json:"events"`
	SpanMs      int64   `json:"spanMs"`
	JitterMs    float64 `json:"jitterMs"`
	Mouse       int64   `json:"mouse"`
	Keyboard    int64   `json:"keyboard"`
	Motion      int64   `json:"motion"`
	ZeroInertia int64   `json:"zeroInertia"`
}

// inputHook is Deps.Input.
type inputHook = func(sessionID, subject string, r InputReport)

// Bounds of one report: an hour of input at most, no negative counts.
const (
	maxReportSpanMs = 3_600_000
	maxReportCount  = 1_000_000
)

// parseInputReport decodes and bounds-checks a report.
func parseInputReport(raw []byte) (InputReport, bool) {
	var r InputReport
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, false
	}
	for _, n := range []int64{r.Events, r.Mouse, r.Keyboard, r.Motion, r.ZeroInertia} {
		if n < 0 || n > maxReportCount {
			return r, false
		}
	}
	if r.SpanMs < 0 || r.SpanMs > maxReportSpanMs || r.ZeroInertia > r.Motion ||
		math.IsNaN(r.JitterMs) || r.JitterMs < 0 || r.JitterMs > maxReportSpanMs {
		return r, false
	}
	return r, true
}

// inputStats handles a streamer's egbe.input.stats for one of its players.
func (s *Server) inputStats(st *streamer, m *Message) {
	r, ok := parseInputReport(m.Raw)
	if !ok {
		s.ignore(st.conn, dropBadJSON, m.Type)
		return
	}
	s.mu.Lock()
	p := st.lookupPlayer(m)
	if p == nil || p.session == nil {
		s.mu.Unlock()
		s.ignore(st.conn, dropUnknownPlayer, m.Type)
		return
	}
	if r.Events > 0 {
		s.idleInputLocked(p.session.SessionID)
	}
	sess := *p.session
	s.mu.Unlock()
	if s.onInput != nil {
		s.onInput(sess.SessionID, sess.Subject, r)
	}
}

// IdleStep is what an IdleMachine asks for.
type IdleStep int

const (
	IdleNone       IdleStep = iota
	IdlePrompt              // prompt the player
	IdleDisconnect          // disconnect it and release the streamer
)

// IdleMachine is one leased session's idle lifecycle (the edge wires
// admission's policy state machine). It is only used under the server's
// lock.
type IdleMachine interface {
	Input(now time.Time)
	// Tick returns each due step once.
	Tick(now time.Time) IdleStep
	// DisconnectAt is when the session will be disconnected without input.
	DisconnectAt() time.Time
}

const idlePromptText = "Still there? Move, press a key…"

// idleInputLocked records input for a leased session; the first one
// enrols the session in the idle lifecycle. Caller holds s.mu.
func (s *Server) idleInputLocked(sessionID string) {
	if m := s.idle[sessionID]; m != nil {
		m.Input(s.now())
		return
	}
	if s.newIdle == nil {
		return
	}
	if _, gone := s.idled[sessionID]; gone {
		return
	}
	s.idle[sessionID] = s.newIdle(s.now())
}

// idleStartLocked is called when a session's player subscribes. It starts
// nothing: the session is enrolled by its first egbe.idle.input (see the
// rule above). Caller holds s.mu.
func (s *Server) idleStartLocked(string) {}

// playersOfLocked lists the live players of a session. Caller holds s.mu.
func (s *Server) playersOfLocked(sessionID string) []*player {
	var out []*player
	for _, st := range s.streamers {
		for _, p := range st.players {
			if p.session != nil && p.session.SessionID == sessionID {
				out = append(out, p)
			}
		}
	}
	return out
}

// idleLoop ticks every session's idle machine.
func (s *Server) idleLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.IdleTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.idleTick()
		}
	}
}

func (s *Server) idleTick() {
	now := s.now()
	type due struct {
		sid     string
		step    IdleStep
		at      time.Time
		players []*player
	}
	var work []due
	s.mu.Lock()
	for sid, m := range s.idle {
		step := m.Tick(now)
		if step == IdleNone {
			continue
		}
		d := due{sid: sid, step: step, at: m.DisconnectAt(), players: s.playersOfLocked(sid)}
		if step == IdleDisconnect {
			s.endLocked(sid, EndIdle, now, d.players)
		}
		work = append(work, d)
	}
	// Forget ended sessions once their tokens can no longer be presented.
	for sid, e := range s.idled {
		if now.Sub(e.at) > idledMemory {
			delete(s.idled, sid)
		}
	}
	s.mu.Unlock()
	for _, d := range work {
		switch d.step {
		case IdlePrompt:
			msg := fmt.Appendf(nil, `{"type":%q,"disconnectAtMs":%s,"message":%s}`, typeIdlePrompt,
				strconv.FormatInt(d.at.UnixMilli(), 10), quote(idlePromptText))
			for _, p := range d.players {
				p.send(msg)
			}
			s.met.relay(typeIdlePrompt)
		case IdleDisconnect:
			msg := []byte(`{"type":"` + typeIdleDisconnect + `","reason":"idle","reconnect":"new-match"}`)
			for _, p := range d.players {
				p.send(msg)
				p.closeWith(CloseDisconnectPlayer, "idle")
			}
			s.met.relay(typeIdleDisconnect)
			if s.hooks != nil {
				s.hooks.OnPlayerLeft(d.sid)
			}
		}
	}
}

// idledMemory outlives any session token (TTL at most 900 s).
const idledMemory = 16 * time.Minute

// Why a session was ended by the edge (EndSession, the idle lifecycle).
const (
	EndIdle   = "idle"   // the idle lifecycle reclaimed the streamer
	EndBudget = "budget" // the free-tier minutes of the day are used up
	EndBanned = "banned" // the abuse classifier banned the subject
)

// ended records a session the edge ended: its token no longer subscribes.
type ended struct {
	at     time.Time
	reason string
}

// endLocked ends sessionID: it stops tracking its idleness, forgets its
// players' subscriptions, releases the streamer's lease and remembers the
// session so its token cannot take a streamer again. Caller holds s.mu
// and tells the players afterwards.
func (s *Server) endLocked(sid, reason string, now time.Time, players []*player) {
	delete(s.idle, sid)
	s.idled[sid] = ended{at: now, reason: reason}
	for _, p := range players {
		s.detachLocked(p)
	}
	_ = s.reg.Release(sid)
}

// EndSession ends a leased session on the edge's own authority (its
// budget ran out, its subject was banned): each of its players gets
// {"type":"egbe.session.ended","reason":<reason>,"reconnect":"new-match"}
// and is closed with 1011 and the reason, the streamer's lease is
// released, and the session's token no longer subscribes. It reports
// whether a player of the session was connected here. An unmodified Epic
// frontend ignores the unknown message and shows the close.
func (s *Server) EndSession(sessionID, reason string) bool {
	s.mu.Lock()
	players := s.playersOfLocked(sessionID)
	s.endLocked(sessionID, reason, s.now(), players)
	s.mu.Unlock()
	msg := []byte(`{"type":"` + typeSessionEnded + `","reason":` + string(quote(reason)) + `,"reconnect":"new-match"}`)
	for _, p := range players {
		p.send(msg)
		p.closeWith(CloseDisconnectPlayer, reason)
	}
	if len(players) > 0 {
		s.met.relay(typeSessionEnded)
		if s.hooks != nil {
			s.hooks.OnPlayerLeft(sessionID)
		}
	}
	return len(players) > 0
}

// endedText is the subscribeFailed message for a session the edge ended.
func endedText(reason string) string {
	switch reason {
	case EndIdle:
		return "Session ended for inactivity: a new match is required."
	case EndBudget:
		return "Session ended: today's free streaming minutes are used up."
	}
	return "Session ended by the edge (" + reason + "): a new match is required."
}
