package shard

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/shard/internal/linkio"
)

// link is the edge's one QUIC connection to one shard, redialled with
// jittered backoff for as long as the gateway runs.
type link struct {
	g   *Gateway     // immutable
	id  string       // immutable: shard id
	log *slog.Logger // immutable

	subNotify chan struct{} // cap 1: the subscription set changed
	moved     chan struct{} // cap 1: addr changed while down (moveTo); redial now

	mu sync.Mutex
	// addr is where the link dials. Fixed for a configured shard; a
	// discovered one follows the fleet directory while down (moveTo).
	addr     string                           // guarded by mu
	conn     *quic.Conn                       // guarded by mu; nil while down
	lc       *linkConn                        // guarded by mu; nil while down
	upCh     chan struct{}                    // guarded by mu; closed when conn is set
	sessions map[string]map[*session]struct{} // instance -> sessions; guarded by mu

	feeds map[string]*snapFeed // owned by the control reader: instance -> shared snapshots

	rttNanos atomic.Int64
	lastSeen atomic.Int64 // unix nanos of the last control frame (any frame proves the link alive)
}

func newLink(g *Gateway, id, addr string) *link {
	return &link{
		g: g, id: id, addr: addr, log: g.log.With("shard", id),
		subNotify: make(chan struct{}, 1),
		moved:     make(chan struct{}, 1),
		upCh:      make(chan struct{}),
		sessions:  map[string]map[*session]struct{}{},
		feeds:     map[string]*snapFeed{},
	}
}

func (l *link) up() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn != nil
}

// address returns where the link dials (and, while up, is connected).
func (l *link) address() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr
}

// moveTo points a link that is down at addr and cuts its backoff short,
// reporting whether it moved. A link that is up keeps its address: a live
// connection proves it, whatever else is announced.
func (l *link) moveTo(addr string) bool {
	l.mu.Lock()
	if l.conn != nil || l.addr == addr {
		l.mu.Unlock()
		return false
	}
	l.addr = addr
	l.g.dir.setAddr(l.id, addr) // under mu: ordered with serve's
	l.mu.Unlock()
	select {
	case l.moved <- struct{}{}:
	default:
	}
	return true
}

// run dials and serves the link until ctx is done.
func (l *link) run(ctx context.Context) {
	backoff := l.g.cfg.ReconnectMin
	for ctx.Err() == nil {
		addr := l.address()
		conn, err := l.dial(ctx, addr)
		if err != nil {
			l.g.m.linkConnects.WithLabelValues(l.id, "error").Inc()
			l.log.Debug("link dial failed", "addr", addr, "err", err)
		} else {
			l.g.m.linkConnects.WithLabelValues(l.id, "ok").Inc()
			if l.serve(ctx, conn, addr) {
				backoff = l.g.cfg.ReconnectMin // it was up: start the backoff over
			}
		}
		// Full jitter: sleep uniformly in [backoff/2, backoff].
		d := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-l.moved:
			t.Stop()
			backoff = l.g.cfg.ReconnectMin // a new address: its own backoff
			continue
		case <-t.C:
		}
		backoff = min(backoff*2, l.g.cfg.ReconnectMax)
	}
}

// linkStreamWindow is a stream's initial receive window (the control
// stream and each lane; each grows to 4x under a steady flow). The edge
// reads every link stream continuously (its readers never wait for a
// client), so a window is only ever held up by the edge itself.
const linkStreamWindow = 64 << 10

func (l *link) dial(ctx context.Context, addr string) (*quic.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tlsConf := &tls.Config{NextProtos: []string{linkio.ALPN}, InsecureSkipVerify: l.g.cfg.LinkInsecure, ServerName: "egbe-shard", MinVersion: tls.VersionTLS13} //nolint:gosec // shards present self-signed certs in dev (Config.LinkInsecure)
	return quic.DialAddr(dctx, addr, tlsConf, &quic.Config{
		MaxIdleTimeout:        l.g.cfg.HeartbeatTimeout + l.g.cfg.HeartbeatInterval,
		KeepAlivePeriod:       l.g.cfg.HeartbeatInterval,
		MaxIncomingStreams:    -1,
		MaxIncomingUniStreams: -1,
		// Small stream windows and a connection window far above them:
		// credit is not memory until data is buffered.
		InitialStreamReceiveWindow:     linkStreamWindow,
		MaxStreamReceiveWindow:         4 * linkStreamWindow,
		InitialConnectionReceiveWindow: 8 << 20,
		MaxConnectionReceiveWindow:     1 << 30,
	})
}

// serve runs one connection (dialled at addr): hello, then the control
// stream, until it dies. It reports whether the link came up.
func (l *link) serve(ctx context.Context, conn *quic.Conn, addr string) bool {
	defer conn.CloseWithError(linkio.CodeNone, "")
	st, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return false
	}
	hello, _ := linkio.Frame(&codec.LinkEdgeFrame{Msg: &codec.LinkEdgeFrame_Hello{Hello: &codec.LinkHello{Version: linkio.Version, EdgeId: l.g.cfg.EdgeID, Token: l.g.cfg.LinkToken}}})
	if _, err := st.Write(hello); err != nil {
		return false
	}
	r := linkio.NewReader(st)
	// A socket deadline is on the wall clock, whatever the gateway's says.
	_ = st.SetReadDeadline(time.Now().Add(l.g.cfg.HeartbeatTimeout + time.Second))
	var f codec.LinkShardFrame
	if err := r.ReadShard(&f); err != nil {
		l.log.Warn("link hello failed", "err", err)
		return false
	}
	sh := f.GetHello()
	if sh == nil || sh.Version != linkio.Version {
		l.log.Warn("link hello refused", "err", ErrProtocol)
		_ = conn.CloseWithError(linkio.CodeProtocol, "bad hello")
		return false
	}
	_ = st.SetReadDeadline(time.Time{})
	l.g.dir.Register(l.id, sh.Instances, int(sh.Capacity), int(sh.Sessions))
	l.lastSeen.Store(l.g.now().UnixNano())

	// The lanes' and the control writer's goroutines end with cctx or the
	// connection; the connection is closed before they are waited for.
	var wg sync.WaitGroup
	cctx, cancel := context.WithCancel(ctx)
	defer wg.Wait()
	defer cancel()
	defer conn.CloseWithError(linkio.CodeNone, "")
	lc := newLinkConn(l, conn)
	if err := lc.openLanes(cctx, l.g.cfg.LinkLanes, &wg); err != nil {
		l.log.Warn("link lanes failed", "err", err)
		lc.close()
		return false
	}

	l.mu.Lock()
	l.conn, l.lc = conn, lc
	if l.addr != addr { // moveTo landed while this dial was in flight
		l.addr = addr // what is announced is what answered
		l.g.dir.setAddr(l.id, addr)
	}
	close(l.upCh)
	l.mu.Unlock()
	l.g.dir.SetHealth(l.id, true)
	l.g.m.linkUp.WithLabelValues(l.id).Set(1)
	l.log.Info("link up", "addr", addr, "instances", sh.Instances, "lanes", len(lc.lanes))
	select {
	case l.subNotify <- struct{}{}:
	default:
	}

	defer func() {
		l.mu.Lock()
		l.conn, l.lc = nil, nil
		l.upCh = make(chan struct{})
		l.mu.Unlock()
		lc.close() // every session of this connection: shard_unavailable
		for _, f := range l.feeds {
			f.drop()
		}
		l.g.dir.SetHealth(l.id, false)
		l.g.m.linkUp.WithLabelValues(l.id).Set(0)
		l.log.Warn("link down")
	}()

	wg.Add(2)
	go func() { defer wg.Done(); l.writeLoop(cctx, conn, st) }()
	go func() { defer wg.Done(); <-cctx.Done(); st.CancelRead(linkio.CodeNone) }() // unblocks the reader below
	l.readLoop(conn, r)
	return true
}

// writeLoop is the control stream's only writer: heartbeats and the
// instance subscription.
func (l *link) writeLoop(ctx context.Context, conn *quic.Conn, st *quic.Stream) {
	t := time.NewTicker(l.g.cfg.HeartbeatInterval)
	defer t.Stop()
	var nonce uint64
	write := func(b []byte) bool {
		if _, err := st.Write(b); err != nil {
			_ = conn.CloseWithError(linkio.CodeProtocol, "control write failed")
			return false
		}
		return true
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.subNotify:
			if !write(l.subscription()) {
				return
			}
		case now := <-t.C:
			// lastSeen is on the gateway's clock; the ping's timestamp is
			// the wall clock the pong's RTT is measured against.
			if age := l.g.now().UnixNano() - l.lastSeen.Load(); age > int64(l.g.cfg.HeartbeatTimeout) {
				l.log.Warn("link heartbeat lost", "since", time.Duration(age))
				_ = conn.CloseWithError(linkio.CodeHeartbeat, "heartbeat timeout")
				return
			}
			nonce++
			ping, _ := linkio.Frame(&codec.LinkEdgeFrame{Msg: &codec.LinkEdgeFrame_Ping{Ping: &codec.LinkPing{Nonce: nonce, EdgeTimeNs: now.UnixNano()}}})
			if !write(ping) {
				return
			}
		}
	}
}

func (l *link) subscription() []byte {
	l.mu.Lock()
	ids := make([]string, 0, len(l.sessions))
	for id, set := range l.sessions {
		if len(set) > 0 {
			ids = append(ids, id)
		}
	}
	l.mu.Unlock()
	slices.Sort(ids)
	b, _ := linkio.Frame(&codec.LinkEdgeFrame{Msg: &codec.LinkEdgeFrame_Subscribe{Subscribe: &codec.LinkSubscribe{InstanceIds: ids}}})
	return b
}

// readLoop reads the control stream: snapshots (decoded once, shared by
// every session of the instance), instance events, pongs. It returns when
// the stream or connection ends.
func (l *link) readLoop(conn *quic.Conn, r *linkio.Reader) {
	var f codec.ShardFrame // reused: a steady link decodes without allocating
	for {
		if err := r.ReadShardFrame(&f); err != nil {
			if errors.Is(err, linkio.ErrBadFrame) || errors.Is(err, codec.ErrFrameTooLarge) {
				_ = conn.CloseWithError(linkio.CodeProtocol, "bad control frame")
			}
			return
		}
		l.lastSeen.Store(l.g.now().UnixNano())
		switch f.Kind {
		case codec.ShardSnapshotKind:
			feed := l.feeds[f.Snapshot.InstanceID]
			if feed == nil {
				feed = &snapFeed{}
				l.feeds[f.Snapshot.InstanceID] = feed
			}
			l.fanout(feed.publish(&f.Snapshot))
		case codec.ShardEventKind:
			l.event(f.Msg.GetEvent())
		case codec.ShardPongKind:
			now := time.Now().UnixNano()
			rtt := time.Duration(now - f.PongEdgeTimeNs)
			l.rttNanos.Store(int64(rtt))
			l.g.m.linkRTT.WithLabelValues(l.id).Set(rtt.Seconds())
			l.g.dir.SetLoad(l.id, int(f.PongSessions))
		case codec.ShardHelloKind:
			h := f.Msg.GetHello()
			l.g.dir.Register(l.id, h.Instances, int(h.Capacity), int(h.Sessions))
		}
	}
}

// fanout offers an instance snapshot to every session of the instance that
// may need it: a session settled at this content version (its client holds
// this projection and its window has not moved) is not woken at all.
func (l *link) fanout(sn *sharedSnap) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.sessions[sn.world.InstanceID] {
		if s.settled.Load() != sn.ver {
			s.offerSnap(sn)
		}
	}
}

// event relays an instance-wide world event: encoded once, the same bytes
// queued for every session of the instance that takes events.
func (l *link) event(ev *codec.LinkInstanceEvent) {
	if ev.GetEvent() == nil {
		return
	}
	env := &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Event{Event: ev.Event}}
	raw, err := codec.EncodeServer(nil, env, false)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.sessions[ev.InstanceId] {
		if s.events {
			s.tryEnqueue(outItem{kind: outRaw, raw: raw, env: env}, dropEventQueue)
		}
	}
}

func (l *link) attach(s *session) {
	l.mu.Lock()
	set := l.sessions[s.instance]
	if set == nil {
		set = map[*session]struct{}{}
		l.sessions[s.instance] = set
	}
	set[s] = struct{}{}
	changed := len(set) == 1
	l.mu.Unlock()
	if changed {
		select {
		case l.subNotify <- struct{}{}:
		default:
		}
	}
}

func (l *link) detach(s *session) {
	l.mu.Lock()
	set := l.sessions[s.instance]
	delete(set, s)
	changed := len(set) == 0
	if changed {
		delete(l.sessions, s.instance)
	}
	l.mu.Unlock()
	if changed {
		select {
		case l.subNotify <- struct{}{}:
		default:
		}
	}
}

// openSession opens s on the link (a handle on one of its lanes) and waits
// for the shard's answer. A link that is down is given until ctx (bounded
// by linkWait) to come up.
func (l *link) openSession(ctx context.Context, s *session, open *codec.LinkSessionOpen) (*codec.LinkSessionOpened, error) {
	l.mu.Lock()
	lc, upCh := l.lc, l.upCh
	l.mu.Unlock()
	if lc == nil {
		t := time.NewTimer(linkWait)
		defer t.Stop()
		select {
		case <-upCh:
		case <-t.C:
		case <-ctx.Done():
		}
		l.mu.Lock()
		lc = l.lc
		l.mu.Unlock()
		if lc == nil {
			return nil, fmt.Errorf("%w: %s", ErrLinkDown, l.id)
		}
	}
	if err := lc.add(s); err != nil {
		return nil, err
	}
	s.lc = lc
	open.SessionId = s.id
	b, err := linkio.Frame(&codec.LinkEdgeFrame{Session: s.handle, Msg: &codec.LinkEdgeFrame_Open{Open: open}})
	if err == nil && !s.lane.send(ctx, b) {
		err = fmt.Errorf("%w: %s", ErrLinkDown, l.id)
	}
	if err != nil {
		lc.remove(s)
		return nil, err
	}
	select {
	case r := <-s.openCh:
		if r.err != nil {
			lc.remove(s)
			return nil, r.err
		}
		return r.opened, nil
	case <-ctx.Done():
		lc.remove(s)
		return nil, fmt.Errorf("%w: %s: no answer to the session open: %w", ErrLinkDown, l.id, ctx.Err())
	}
}

// linkWait bounds how long a handshake waits for a link that is down.
const linkWait = 2 * time.Second
