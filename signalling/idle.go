package signalling

import (
	"context"
	"fmt"
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
// After the disconnect the streamer's lease is released and the session's
// token no longer subscribes: a reconnect needs a new match.
const (
	typeIdleInput      = "egbe.idle.input"
	typeIdlePrompt     = "egbe.idle.prompt"
	typeIdleDisconnect = "egbe.idle.disconnect"
)

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

// idleInput records input for a leased session. Caller holds s.mu.
func (s *Server) idleInputLocked(sessionID string) {
	if m := s.idle[sessionID]; m != nil {
		m.Input(s.now())
	}
}

// idleStartLocked starts tracking a session when its player first
// subscribes. Caller holds s.mu.
func (s *Server) idleStartLocked(sessionID string) {
	if s.newIdle == nil || s.idle[sessionID] != nil {
		return
	}
	s.idle[sessionID] = s.newIdle(s.now())
}

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
			delete(s.idle, sid)
			s.idled[sid] = now
			for _, p := range d.players {
				s.detachLocked(p)
			}
			_ = s.reg.Release(sid)
		}
		work = append(work, d)
	}
	// Forget idled sessions once their tokens can no longer be presented.
	for sid, at := range s.idled {
		if now.Sub(at) > idledMemory {
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
