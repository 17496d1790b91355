package shardsim

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/shard/internal/linkio"
)

// edgeLink is one edge's QUIC connection.
type edgeLink struct {
	s      *Server
	conn   *quic.Conn    // immutable
	notify chan struct{} // cap 1: something is pending for the control writer

	mu     sync.Mutex
	subs   map[string]bool   // guarded by mu
	snaps  map[string][]byte // guarded by mu: latest unsent snapshot per instance
	events [][]byte          // guarded by mu: bounded FIFO of event frames
	pong   []byte            // guarded by mu: latest unsent pong
	drops  uint64            // guarded by mu

	handles map[uint32]*sessionState // guarded by Server.mu: this edge's open sessions by handle
}

// maxEvents bounds a link's queued instance events.
const maxEvents = 256

func (l *edgeLink) subscribed(instance string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.subs[instance]
}

func (l *edgeLink) wake() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// offerSnapshot makes f the instance's next snapshot on this link (latest
// wins: a slow edge gets fresh state, never a backlog).
func (l *edgeLink) offerSnapshot(instance string, f []byte) {
	l.mu.Lock()
	if l.snaps[instance] != nil {
		l.drops++
	}
	l.snaps[instance] = f
	l.mu.Unlock()
	l.wake()
}

func (l *edgeLink) offerEvent(f []byte) {
	l.mu.Lock()
	if len(l.events) >= maxEvents {
		l.drops++
	} else {
		l.events = append(l.events, f)
	}
	l.mu.Unlock()
	l.wake()
}

func (l *edgeLink) offerPong(f []byte) {
	l.mu.Lock()
	l.pong = f
	l.mu.Unlock()
	l.wake()
}

// next takes what the control writer should send now: the pong first, then
// events, then snapshots.
func (l *edgeLink) next(buf [][]byte) [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pong != nil {
		buf = append(buf, l.pong)
		l.pong = nil
	}
	buf = append(buf, l.events...)
	clear(l.events)
	l.events = l.events[:0]
	for id, f := range l.snaps {
		buf = append(buf, f)
		delete(l.snaps, id)
	}
	return buf
}

// serve runs the link until the connection ends.
func (l *edgeLink) serve(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer l.conn.CloseWithError(linkio.CodeNone, "")
	cctx := l.conn.Context()
	for {
		st, err := l.conn.AcceptStream(ctx)
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.stream(cctx, st)
		}()
	}
}

// stream tells the control stream from a session lane by its first frame.
func (l *edgeLink) stream(ctx context.Context, st *quic.Stream) {
	r := linkio.NewReader(st)
	var f codec.LinkEdgeFrame
	if err := r.ReadEdge(&f); err != nil {
		st.CancelRead(linkio.CodeProtocol)
		st.CancelWrite(linkio.CodeProtocol)
		return
	}
	switch m := f.Msg.(type) {
	case *codec.LinkEdgeFrame_Hello:
		l.control(ctx, st, r, m.Hello)
	case *codec.LinkEdgeFrame_Lane:
		l.s.lane(ctx, l, st, r)
	default:
		st.CancelRead(linkio.CodeProtocol)
		st.CancelWrite(linkio.CodeProtocol)
	}
}

func (l *edgeLink) control(ctx context.Context, st *quic.Stream, r *linkio.Reader, h *codec.LinkHello) {
	if want := l.s.cfg.LinkToken; want != "" && subtle.ConstantTimeCompare([]byte(h.Token), []byte(want)) != 1 {
		l.s.log.Warn("link refused: bad token", "edge", h.EdgeId, "remote", l.conn.RemoteAddr())
		_ = l.conn.CloseWithError(linkio.CodeAuth, "link token refused")
		return
	}
	hello, err := linkio.Frame(&codec.LinkShardFrame{Msg: &codec.LinkShardFrame_Hello{Hello: &codec.LinkShardHello{
		Version: linkio.Version, ShardId: l.s.cfg.ShardID, Instances: l.s.cfg.Instances,
		Capacity: uint32(l.s.cfg.Capacity), Sessions: uint32(l.s.Sessions()), TickHz: uint32(l.s.cfg.TickHz),
	}}})
	if err != nil {
		return
	}
	if _, err := st.Write(hello); err != nil {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Add(1)
	go func() { // the control writer: the only writer of st
		defer wg.Done()
		var batch [][]byte
		for {
			select {
			case <-wctx.Done():
				return
			case <-l.notify:
			}
			batch = l.next(batch[:0])
			for _, f := range batch {
				if _, err := st.Write(f); err != nil {
					_ = l.conn.CloseWithError(linkio.CodeProtocol, "control write failed")
					return
				}
			}
		}
	}()
	var f codec.LinkEdgeFrame
	for {
		if err := r.ReadEdge(&f); err != nil {
			if !errors.Is(err, io.EOF) {
				_ = l.conn.CloseWithError(linkio.CodeProtocol, "bad control frame")
			}
			return
		}
		switch m := f.Msg.(type) {
		case *codec.LinkEdgeFrame_Ping:
			pong, err := linkio.Frame(&codec.LinkShardFrame{Msg: &codec.LinkShardFrame_Pong{Pong: &codec.LinkPong{
				Nonce: m.Ping.Nonce, EdgeTimeNs: m.Ping.EdgeTimeNs,
				ShardTimeMs: uint64(time.Now().UnixMilli()), Sessions: uint32(l.s.Sessions()),
			}}})
			if err == nil {
				l.offerPong(pong)
			}
		case *codec.LinkEdgeFrame_Subscribe:
			subs := make(map[string]bool, len(m.Subscribe.InstanceIds))
			for _, id := range m.Subscribe.InstanceIds {
				subs[id] = true
			}
			l.mu.Lock()
			l.subs = subs
			l.mu.Unlock()
		}
	}
}
