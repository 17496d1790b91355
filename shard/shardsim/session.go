package shardsim

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/shard/internal/linkio"
)

// maxApplied bounds the per-session applied-action log kept for tests.
const maxApplied = 100_000

// sessionState is what the shard keeps of a session, live or retained for a
// resume. Guarded by Server.mu.
type sessionState struct {
	id         string
	instance   string
	entity     uint32
	lastAction uint64
	applied    []uint64
	live       *liveSession // nil while retained
	closedAt   int64        // unix nanos when the stream ended
}

// liveSession is a session with an open stream.
type liveSession struct {
	out chan []byte // frames to the edge, owned by the session writer; bounded
	// Acks are cumulative, so the newest one is all that must reach the
	// edge: a latest-wins slot the writer always drains, never dropped
	// behind a queue full of broadcast events.
	ack       atomic.Uint64
	ackNotify chan struct{} // cap 1
}

// acknowledge hands the writer the newest applied action id.
func (ls *liveSession) acknowledge(id uint64) {
	ls.ack.Store(id)
	select {
	case ls.ackNotify <- struct{}{}:
	default:
	}
}

func (ls *liveSession) send(f []byte) bool {
	select {
	case ls.out <- f:
		return true
	default:
		return false
	}
}

func shardFrame(m *codec.LinkShardFrame) []byte {
	f, _ := linkio.Frame(m)
	return f
}

// session serves one session stream.
func (s *Server) session(ctx context.Context, l *edgeLink, st *quic.Stream, r *linkio.Reader, open *codec.LinkSessionOpen) {
	defer st.CancelRead(linkio.CodeNone)
	refuse := func(code codec.Code, msg string) {
		_, _ = st.Write(shardFrame(&codec.LinkShardFrame{Msg: &codec.LinkShardFrame_Error{Error: &codec.Error{Code: string(code), Message: msg}}}))
		_ = st.Close()
	}
	s.mu.Lock()
	in := s.instances[open.InstanceId]
	if in == nil {
		s.mu.Unlock()
		refuse(codec.CodeInstanceNotFound, "this shard does not hold "+open.InstanceId)
		return
	}
	if s.cfg.Capacity > 0 && len(in.sessions) >= s.cfg.Capacity {
		s.mu.Unlock()
		refuse(codec.CodeShardUnavailable, "shard at capacity")
		return
	}
	s.expireLocked()
	ss := s.sessions[open.SessionId]
	resumed := ss != nil && ss.instance == open.InstanceId
	if !resumed {
		s.nextID++
		ss = &sessionState{id: open.SessionId, instance: open.InstanceId, entity: s.nextID}
		s.sessions[open.SessionId] = ss
	}
	if old := ss.live; old != nil {
		// A resume raced the old stream's end: the new stream wins.
		close(old.out)
	}
	ls := &liveSession{out: make(chan []byte, 256), ackNotify: make(chan struct{}, 1)}
	ss.live = ls
	in.sessions[ss.id] = ss
	in.players[ss.entity] = &codec.Entity{ID: ss.entity, Kind: codec.EntityKind_PLAYER}
	opened := shardFrame(&codec.LinkShardFrame{Msg: &codec.LinkShardFrame_Opened{Opened: &codec.LinkSessionOpened{
		EntityId: ss.entity, LastActionId: ss.lastAction, Resumed: resumed,
	}}})
	ls.out <- opened
	s.mu.Unlock()

	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	wg.Add(1)
	go func() { // the session writer: the only writer of st
		defer wg.Done()
		defer st.Close()
		if _, err := st.Write(<-ls.out); err != nil { // Opened goes first
			return
		}
		for {
			select {
			case <-wctx.Done():
				return
			case <-ls.ackNotify:
				ack := shardFrame(&codec.LinkShardFrame{Msg: &codec.LinkShardFrame_ActionAck{ActionAck: &codec.ActionAck{ActionId: ls.ack.Load()}}})
				if _, err := st.Write(ack); err != nil {
					return
				}
			case f, ok := <-ls.out:
				if !ok {
					return
				}
				if _, err := st.Write(f); err != nil {
					return
				}
			}
		}
	}()
	defer func() {
		cancel()
		wg.Wait()
		s.mu.Lock()
		if ss.live == ls {
			ss.live = nil
			ss.closedAt = nowNanos()
			delete(in.sessions, ss.id)
			delete(in.players, ss.entity)
		}
		s.mu.Unlock()
	}()

	var f codec.LinkEdgeFrame
	for {
		if err := r.ReadEdge(&f); err != nil {
			return
		}
		switch m := f.Msg.(type) {
		case *codec.LinkEdgeFrame_Presence:
			p := m.Presence.GetPosition()
			s.mu.Lock()
			if e := in.players[ss.entity]; e != nil && ss.live == ls {
				e.X, e.Y, e.Z, e.HeadingMdeg = p.GetXMm(), p.GetYMm(), p.GetZMm(), m.Presence.HeadingMdeg
			}
			s.mu.Unlock()
		case *codec.LinkEdgeFrame_Actions:
			s.applyActions(in, ss, ls, m.Actions)
		case *codec.LinkEdgeFrame_Squad:
			sq := shardFrame(&codec.LinkShardFrame{Msg: &codec.LinkShardFrame_Squad{Squad: m.Squad}})
			s.mu.Lock()
			for _, other := range in.sessions {
				if other.live != nil {
					other.live.send(sq)
				}
			}
			s.mu.Unlock()
		case *codec.LinkEdgeFrame_Close:
			return
		}
	}
}

// applyActions applies a batch in order, skipping any action at or below the
// session's last applied id (a resend after a resume), then acknowledges.
func (s *Server) applyActions(in *instance, ss *sessionState, ls *liveSession, b *codec.ActionBatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var events [][]byte
	for _, a := range b.Actions {
		if a.ActionId <= ss.lastAction {
			continue
		}
		ss.lastAction = a.ActionId
		if len(ss.applied) < maxApplied {
			ss.applied = append(ss.applied, a.ActionId)
		}
		in.eventSeq++
		events = append(events, shardFrame(&codec.LinkShardFrame{Msg: &codec.LinkShardFrame_SessionEvent{SessionEvent: &codec.WorldEvent{
			Seq: in.eventSeq, Kind: "action." + a.Kind, EntityId: ss.entity, ServerTimeMs: uint64(nowNanos() / 1e6),
		}}}))
	}
	if ss.live != ls {
		return
	}
	// The ack must not be lost: it skips the bounded event queue.
	ls.acknowledge(ss.lastAction)
	for _, ev := range events {
		for _, other := range in.sessions {
			if other.live != nil {
				other.live.send(ev)
			}
		}
	}
}

// expireLocked forgets retained sessions older than the retention.
func (s *Server) expireLocked() {
	cut := nowNanos() - s.cfg.Retention.Nanoseconds()
	for id, ss := range s.sessions {
		if ss.live == nil && ss.closedAt < cut {
			delete(s.sessions, id)
		}
	}
}
