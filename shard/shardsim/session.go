package shardsim

import (
	"context"
	"sync"

	"github.com/quic-go/quic-go"
	"google.golang.org/protobuf/proto"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/shard/internal/linkio"
)

// maxApplied bounds the per-session applied-action log kept for tests.
const maxApplied = 100_000

// maxLaneFrames bounds a lane's queued frames (events, squad comms) for
// the edge; beyond it they are dropped. Opened and Error frames and action
// acks are never dropped.
const maxLaneFrames = 4096

// sessionState is what the shard keeps of a session, live or retained for a
// resume. Guarded by Server.mu.
type sessionState struct {
	id         string
	instance   string
	entity     uint32
	lastAction uint64
	applied    []uint64
	live       *liveSession // nil while retained
	closedAt   int64        // unix nanos when the session was closed
}

// liveSession is a session open on a lane, under the edge's handle.
type liveSession struct {
	lane   *shardLane // immutable
	handle uint32     // immutable
}

// shardLane is one session lane of an edge link: a stream that carries
// many sessions. Its writer sends queued frames in order, then the newest
// action ack of each session (acks are cumulative: a latest-wins slot per
// session, never lost behind a queue full of events).
type shardLane struct {
	l      *edgeLink     // immutable
	st     *quic.Stream  // immutable
	notify chan struct{} // cap 1

	mu       sync.Mutex
	frames   [][]byte          // guarded by mu: FIFO
	acks     map[uint32]uint64 // guarded by mu: newest unsent ack by handle
	ackOrder []uint32          // guarded by mu: handles with an unsent ack
	drops    uint64            // guarded by mu
}

func (ln *shardLane) wake() {
	select {
	case ln.notify <- struct{}{}:
	default:
	}
}

// send queues a frame unless the lane is full (always: never dropped).
func (ln *shardLane) send(f []byte, always bool) bool {
	ln.mu.Lock()
	if !always && len(ln.frames) >= maxLaneFrames {
		ln.drops++
		ln.mu.Unlock()
		return false
	}
	ln.frames = append(ln.frames, f)
	ln.mu.Unlock()
	ln.wake()
	return true
}

func (ln *shardLane) acknowledge(h uint32, id uint64) {
	ln.mu.Lock()
	if _, ok := ln.acks[h]; !ok {
		ln.ackOrder = append(ln.ackOrder, h)
	}
	ln.acks[h] = id
	ln.mu.Unlock()
	ln.wake()
}

// writeLoop is the lane's only writer.
func (ln *shardLane) writeLoop(ctx context.Context) {
	defer ln.st.Close()
	var batch [][]byte
	var order []uint32
	acks := map[uint32]uint64{}
	var buf []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-ln.notify:
		}
		ln.mu.Lock()
		batch = append(batch[:0], ln.frames...)
		clear(ln.frames)
		ln.frames = ln.frames[:0]
		order = append(order[:0], ln.ackOrder...)
		ln.ackOrder = ln.ackOrder[:0]
		clear(acks)
		for h, id := range ln.acks {
			acks[h] = id
		}
		clear(ln.acks)
		ln.mu.Unlock()
		buf = buf[:0]
		for _, f := range batch {
			buf = append(buf, f...)
		}
		for _, h := range order {
			buf = append(buf, shardFrame(&codec.LinkShardFrame{Session: h, Msg: &codec.LinkShardFrame_ActionAck{ActionAck: &codec.ActionAck{ActionId: acks[h]}}})...)
		}
		if len(buf) == 0 {
			continue
		}
		if _, err := ln.st.Write(buf); err != nil {
			return
		}
	}
}

func shardFrame(m *codec.LinkShardFrame) []byte {
	f, _ := linkio.Frame(m)
	return f
}

// lane serves one session lane until it ends; its sessions end with it
// (retained for a resume).
func (s *Server) lane(ctx context.Context, l *edgeLink, st *quic.Stream, r *linkio.Reader) {
	defer st.CancelRead(linkio.CodeNone)
	ln := &shardLane{l: l, st: st, notify: make(chan struct{}, 1), acks: map[uint32]uint64{}}
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	wg.Add(1)
	go func() { defer wg.Done(); ln.writeLoop(wctx) }()
	defer func() {
		cancel()
		wg.Wait()
		s.mu.Lock()
		for h, ss := range l.handles {
			if ss.live != nil && ss.live.lane == ln {
				s.endLocked(ss)
				delete(l.handles, h)
			}
		}
		s.mu.Unlock()
	}()

	var f codec.LinkEdgeFrame
	for {
		if err := r.ReadEdge(&f); err != nil {
			return
		}
		h := f.Session
		if open := f.GetOpen(); open != nil {
			s.open(l, ln, h, open)
			continue
		}
		s.mu.Lock()
		ss := l.handles[h]
		if ss == nil || ss.live == nil || ss.live.handle != h || ss.live.lane != ln {
			s.mu.Unlock()
			continue // a session already closed (or replaced by a resume)
		}
		in := s.instances[ss.instance]
		switch m := f.Msg.(type) {
		case *codec.LinkEdgeFrame_Presence:
			p := m.Presence.GetPosition()
			if e := in.players[ss.entity]; e != nil {
				e.X, e.Y, e.Z, e.HeadingMdeg = p.GetXMm(), p.GetYMm(), p.GetZMm(), m.Presence.HeadingMdeg
			}
			s.mu.Unlock()
		case *codec.LinkEdgeFrame_Actions:
			s.applyActionsLocked(in, ss, m.Actions)
			s.mu.Unlock()
		case *codec.LinkEdgeFrame_Squad:
			body, _ := proto.Marshal(&codec.LinkShardFrame{Msg: &codec.LinkShardFrame_Squad{Squad: m.Squad}}) // once, for every recipient
			for _, other := range in.sessions {
				if o := other.live; o != nil {
					o.lane.send(linkio.SessionFrame(o.handle, body), false)
				}
			}
			s.mu.Unlock()
		case *codec.LinkEdgeFrame_Close:
			s.endLocked(ss)
			delete(l.handles, h)
			s.mu.Unlock()
		default:
			s.mu.Unlock()
		}
	}
}

// open opens (or resumes) a session under handle h on lane ln.
func (s *Server) open(l *edgeLink, ln *shardLane, h uint32, open *codec.LinkSessionOpen) {
	refuse := func(code codec.Code, msg string) {
		ln.send(shardFrame(&codec.LinkShardFrame{Session: h, Msg: &codec.LinkShardFrame_Error{Error: &codec.Error{Code: string(code), Message: msg}}}), true)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.instances[open.InstanceId]
	if in == nil {
		refuse(codec.CodeInstanceNotFound, "this shard does not hold "+open.InstanceId)
		return
	}
	if s.cfg.Capacity > 0 && len(in.sessions) >= s.cfg.Capacity {
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
		// A resume raced the old session's close: the new one wins, and
		// the old handle's frames are ignored from now on.
		delete(old.lane.l.handles, old.handle)
	}
	ss.live = &liveSession{lane: ln, handle: h}
	l.handles[h] = ss
	in.sessions[ss.id] = ss
	in.players[ss.entity] = &codec.Entity{ID: ss.entity, Kind: codec.EntityKind_PLAYER}
	ln.send(shardFrame(&codec.LinkShardFrame{Session: h, Msg: &codec.LinkShardFrame_Opened{Opened: &codec.LinkSessionOpened{
		EntityId: ss.entity, LastActionId: ss.lastAction, Resumed: resumed,
	}}}), true)
}

// endLocked retains a live session's state for a resume.
func (s *Server) endLocked(ss *sessionState) {
	if ss.live == nil {
		return
	}
	ss.live = nil
	ss.closedAt = nowNanos()
	if in := s.instances[ss.instance]; in != nil {
		delete(in.sessions, ss.id)
		delete(in.players, ss.entity)
	}
}

// applyActionsLocked applies a batch in order, skipping any action at or
// below the session's last applied id (a resend after a resume), then
// acknowledges.
func (s *Server) applyActionsLocked(in *instance, ss *sessionState, b *codec.ActionBatch) {
	var events []*codec.WorldEvent
	for _, a := range b.Actions {
		if a.ActionId <= ss.lastAction {
			continue
		}
		ss.lastAction = a.ActionId
		if len(ss.applied) < maxApplied {
			ss.applied = append(ss.applied, a.ActionId)
		}
		in.eventSeq++
		events = append(events, &codec.WorldEvent{Seq: in.eventSeq, Kind: "action." + a.Kind, EntityId: ss.entity, ServerTimeMs: uint64(nowNanos() / 1e6)})
	}
	// The ack must not be lost: it skips the bounded frame queue.
	ss.live.lane.acknowledge(ss.live.handle, ss.lastAction)
	for _, ev := range events {
		body, _ := proto.Marshal(&codec.LinkShardFrame{Msg: &codec.LinkShardFrame_SessionEvent{SessionEvent: ev}}) // once, for every recipient
		for _, other := range in.sessions {
			if o := other.live; o != nil {
				o.lane.send(linkio.SessionFrame(o.handle, body), false)
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
