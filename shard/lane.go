package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/quic-go/quic-go"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/shard/internal/linkio"
)

// A link's sessions are multiplexed over a few QUIC streams, its lanes
// (codec/link.proto, version 2). Each lane has one reader goroutine, which
// hands every frame to its session without ever waiting for the session's
// client, and one writer goroutine, which writes everything sessions queued
// in one stream write. A session costs the link a map entry and its share
// of the lanes' buffers: no stream, no goroutine, no buffered reader.

// laneMaxBuffered bounds what a lane holds for the shard. Session readers
// that would pass it wait (actions and squad comms are reliable: a shard
// that reads slowly slows its clients' readers); presence, latest-wins, is
// dropped and counted instead.
const laneMaxBuffered = 1 << 20

// linkConn is one connection of a link, with its lanes and the sessions
// open on them. Sessions do not survive it: when it ends, each is told
// shard_unavailable with a resume token.
type linkConn struct {
	l     *link      // immutable
	conn  *quic.Conn // immutable
	lanes []*lane    // immutable after start

	mu       sync.Mutex
	sessions map[uint32]*session // guarded by mu: open (and opening) sessions by handle
	next     uint32              // guarded by mu: the last handle given out
	closed   bool                // guarded by mu: no new sessions
}

// lane is one session lane: a stream, its reader and its writer.
type lane struct {
	lc  *linkConn    // immutable
	st  *quic.Stream // immutable
	idx int          // immutable

	mu     sync.Mutex
	out    []byte        // guarded by mu: frames for the shard, not yet written
	closed bool          // guarded by mu: the writer has stopped
	room   chan struct{} // guarded by mu: closed after a write drains out (nil: nobody waits)
	notify chan struct{} // cap 1: out is no longer empty
}

func newLinkConn(l *link, conn *quic.Conn) *linkConn {
	return &linkConn{l: l, conn: conn, sessions: map[uint32]*session{}}
}

// openLanes opens n lanes. Their goroutines run under wg until ctx is done
// or the connection fails.
func (lc *linkConn) openLanes(ctx context.Context, n int, wg *sync.WaitGroup) error {
	for i := range n {
		st, err := lc.conn.OpenStreamSync(ctx)
		if err != nil {
			return fmt.Errorf("%w: open lane: %w", ErrLinkDown, err)
		}
		ln := &lane{lc: lc, st: st, idx: i, notify: make(chan struct{}, 1)}
		hello, _ := linkio.Frame(&codec.LinkEdgeFrame{Msg: &codec.LinkEdgeFrame_Lane{Lane: &codec.LinkLaneOpen{Index: uint32(i)}}})
		ln.out = hello
		ln.notify <- struct{}{}
		lc.lanes = append(lc.lanes, ln)
	}
	for _, ln := range lc.lanes {
		wg.Add(2)
		go func() { defer wg.Done(); ln.writeLoop(ctx) }()
		go func() { defer wg.Done(); ln.readLoop() }()
	}
	return nil
}

// close ends the connection's sessions (the link is down or shutting
// down) and refuses new ones.
func (lc *linkConn) close() {
	lc.mu.Lock()
	lc.closed = true
	list := make([]*session, 0, len(lc.sessions))
	for _, s := range lc.sessions {
		list = append(list, s)
	}
	clear(lc.sessions)
	lc.mu.Unlock()
	for _, s := range list {
		s.linkDown()
	}
	for _, ln := range lc.lanes {
		ln.mu.Lock()
		ln.closed = true
		if ln.room != nil {
			close(ln.room)
			ln.room = nil
		}
		ln.mu.Unlock()
	}
}

// add gives s a handle and a lane.
func (lc *linkConn) add(s *session) error {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.closed || len(lc.lanes) == 0 {
		return fmt.Errorf("%w: %s", ErrLinkDown, lc.l.id)
	}
	for {
		lc.next++
		if _, taken := lc.sessions[lc.next]; lc.next != 0 && !taken {
			break
		}
	}
	s.handle, s.lane = lc.next, lc.lanes[int(lc.next)%len(lc.lanes)]
	lc.sessions[s.handle] = s
	return nil
}

// remove forgets s and tells the shard (LinkSessionClose; the shard keeps
// the session's state for its retention, for a resume).
func (lc *linkConn) remove(s *session) {
	lc.mu.Lock()
	own := lc.sessions[s.handle] == s
	if own {
		delete(lc.sessions, s.handle)
	}
	lc.mu.Unlock()
	if own {
		b, _ := linkio.Frame(&codec.LinkEdgeFrame{Session: s.handle, Msg: &codec.LinkEdgeFrame_Close{Close: &codec.LinkSessionClose{}}})
		s.lane.sendAlways(b)
	}
}

func (lc *linkConn) session(h uint32) *session {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.sessions[h]
}

// send queues frame b (whole, length-prefixed) for the shard, waiting while
// the lane is over laneMaxBuffered until ctx is done. False once the lane
// (the link) is down or ctx is done.
func (ln *lane) send(ctx context.Context, b []byte) bool {
	for {
		ln.mu.Lock()
		if ln.closed {
			ln.mu.Unlock()
			return false
		}
		if len(ln.out) < laneMaxBuffered {
			ln.appendLocked(b)
			ln.mu.Unlock()
			return true
		}
		if ln.room == nil {
			ln.room = make(chan struct{})
		}
		room := ln.room
		ln.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return false
		}
	}
}

// sendAlways queues b whatever the lane holds (a session's last frame).
func (ln *lane) sendAlways(b []byte) {
	ln.mu.Lock()
	if !ln.closed {
		ln.appendLocked(b)
	}
	ln.mu.Unlock()
}

// sendPresence queues a presence frame for session h, unless the lane is
// full (then it is dropped: a newer one will follow). It does not allocate.
func (ln *lane) sendPresence(h uint32, p *codec.Presence) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.closed || len(ln.out) >= laneMaxBuffered {
		return false
	}
	wasEmpty := len(ln.out) == 0
	ln.out = codec.AppendPresenceFrame(ln.out, h, p)
	if wasEmpty {
		ln.wake()
	}
	return true
}

func (ln *lane) appendLocked(b []byte) {
	wasEmpty := len(ln.out) == 0
	ln.out = append(ln.out, b...)
	if wasEmpty {
		ln.wake()
	}
}

func (ln *lane) wake() {
	select {
	case ln.notify <- struct{}{}:
	default:
	}
}

// writeLoop is the lane's only writer: everything queued, one write.
func (ln *lane) writeLoop(ctx context.Context) {
	defer ln.st.Close()
	var spare []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-ln.notify:
		}
		ln.mu.Lock()
		batch := ln.out
		ln.out = spare[:0]
		ln.mu.Unlock()
		if len(batch) == 0 {
			spare = batch
			continue
		}
		_, err := ln.st.Write(batch)
		ln.mu.Lock()
		if ln.room != nil {
			close(ln.room)
			ln.room = nil
		}
		ln.mu.Unlock()
		if err != nil {
			_ = ln.lc.conn.CloseWithError(linkio.CodeProtocol, "lane write failed")
			return
		}
		// Keep the larger buffer for the next batch, but never hold on to a
		// burst's: a link that once buffered a megabyte need not keep it.
		if cap(batch) <= 64<<10 {
			spare = batch[:0]
		} else {
			spare = nil
		}
	}
}

// readLoop is the lane's only reader: each frame goes to its session at
// once. It never waits for a client: acks go to a latest-wins slot,
// everything else to the session's bounded queue (dropped and counted when
// full).
func (ln *lane) readLoop() {
	r := linkio.NewReader(ln.st)
	var f codec.ShardFrame
	m := ln.lc.l.g.m
	for {
		if err := r.ReadShardFrame(&f); err != nil {
			if errors.Is(err, linkio.ErrBadFrame) || errors.Is(err, codec.ErrFrameTooLarge) {
				_ = ln.lc.conn.CloseWithError(linkio.CodeProtocol, "bad lane frame")
			}
			return
		}
		s := ln.lc.session(f.Session)
		if s == nil {
			m.drops.WithLabelValues(dropUnknownSession).Inc()
			continue
		}
		s.fromShard(&f)
	}
}
