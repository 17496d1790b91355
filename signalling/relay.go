package signalling

// Cross-edge relay: a player on this edge signalling with a streamer on
// another (README.md, "Fleet").
//
// The player's edge (A) keeps a link per such player; the streamer's edge
// (B) keeps a proxy: a *player whose conn has no socket, handled by exactly
// the code a local player is, so every rule (subscribe, MaxPlayers, token
// checks, playerId rewriting, disconnectPlayer, streamerIdChanged, close on
// streamer leave) is the one-edge rule. A forwards the player's frames to
// B's proxy; what B's code sends the proxy (frames, and its close) goes
// back to A for the real socket.
//
// Transport: each edge reads one inbox (state.Inbox: on Redis a stream,
// read with XREAD BLOCK) on one goroutine. Per connection the producer is
// one goroutine (the link's or the proxy's) that appends in queue order,
// so the store keeps a connection's entries in order and the single
// reader hands them to the connection in that order. Entries carry the
// link generation and a per-direction sequence number: a retried append
// that partly went through is deduplicated, and a late entry of an old
// link is dropped.
//
// Entries (relaywire.go): kind, sender edge, player id, generation,
// sequence, frame, close code and reason, session (JSON). Kinds towards
// the streamer's edge: O open, F frame, G gone. Towards the player's
// edge: f frame, c close, u unsubscribed, x killed (slow).

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/state"
)

// Inbox entry kinds.
const (
	kindOpen   byte = 'O'
	kindFrame  byte = 'F'
	kindGone   byte = 'G'
	kindToP    byte = 'f'
	kindClose  byte = 'c'
	kindUnsub  byte = 'u'
	kindKilled byte = 'x'
)

// Drop reasons of the relay (egbe_pxstream_messages_dropped_total).
const (
	dropFleetUnavailable = "fleet_unavailable"
	dropPeerEdgeDead     = "peer_edge_dead"
	dropBadRelayEntry    = "bad_relay_entry"
)

// relayEntry is one inbox entry to write.
type relayEntry struct {
	kind   byte
	data   []byte
	code   int
	reason string
	sess   []byte
}

// link is a local player bound to a streamer on another edge.
type link struct {
	p    *player // immutable
	edge string  // immutable: the streamer's edge
	gen  uint64  // immutable
	q    chan relayEntry
	quit chan struct{} // closed by stopLocked
	once sync.Once

	lastIn uint64 // owned by the inbox goroutine: last sequence from the proxy
}

func (l *link) stopLocked() { l.once.Do(func() { close(l.quit) }) }

// proxy is a player of another edge subscribed through this one.
type proxy struct {
	p    *player // immutable: the socketless player
	from string  // immutable: the player's edge
	key  string  // immutable
	gen  uint64  // immutable
	dead chan struct{}
	quit chan struct{} // closed by stopLocked
	once sync.Once

	lastIn uint64 // owned by the inbox goroutine: last sequence from the link
}

func (px *proxy) stopLocked() { px.once.Do(func() { close(px.quit) }) }

// deadConn stands in for a proxy's TCP connection: the conn code closes it
// when the proxy's queue overflows.
type deadConn struct {
	net.Conn
	once sync.Once
	ch   chan struct{}
}

func (d *deadConn) Close() error { d.once.Do(func() { close(d.ch) }); return nil }

// unsubscribed is queued on a proxy after what B sent it, when it is no
// longer subscribed: A forgets the link once that much has arrived. No
// frame the broker queues can equal it (they are JSON objects).
var unsubscribed = []byte("\x00unsubscribed")

func isUnsubscribed(f []byte) bool { return string(f) == string(unsubscribed) }

// ---- player side (A) ----

// fromPlayer runs on a local player's reader before the local handling; it
// reports whether it handled m.
func (c *Cluster) fromPlayer(p *player, m *Message) bool {
	c.rmu.Lock()
	_, isProxy := c.proxyOf[p]
	l := c.links[p]
	c.rmu.Unlock()
	if isProxy {
		return false
	}
	switch m.Type {
	case typeSubscribe:
		id, _ := m.IDString("streamerId")
		return c.subscribeRemote(p, id, m.Raw, l)
	case typeUnsubscribe:
		if l == nil {
			return false
		}
		c.unlink(p, true)
		return true
	case typeOffer, typeAnswer, typeIceCandidate, typeLayerPreference,
		typeDataChannelRequest, typePeerDataChannelsReady:
		if l != nil {
			c.forward(l, relayEntry{kind: kindFrame, data: m.Raw})
			return true
		}
		return c.autoSubscribeRemote(p, m)
	}
	return false
}

// autoSubscribeRemote: an unsubscribed player signals; when its target (its
// session's streamer, else the first registered) is on another edge, it is
// subscribed there first, as the one-edge rule does locally.
func (c *Cluster) autoSubscribeRemote(p *player, m *Message) bool {
	s := c.srv
	s.mu.Lock()
	subscribed := p.streamer != nil
	local := false
	if p.session != nil {
		local = s.byID[p.session.StreamerID] != nil
	} else {
		local = len(s.streamers) > 0
	}
	s.mu.Unlock()
	if subscribed || local {
		return false
	}
	target := ""
	if p.session != nil {
		target = p.session.StreamerID
	} else if fleet, err := c.fleetEntries(); err == nil {
		for _, e := range fleet {
			if e.Edge != c.edge {
				target = e.ID
				break
			}
		}
	}
	if target == "" {
		return false
	}
	sub := []byte(`{"type":"subscribe","streamerId":` + string(quote(target)) + `}`)
	if !c.subscribeRemote(p, target, sub, nil) {
		return false
	}
	c.rmu.Lock()
	l := c.links[p]
	c.rmu.Unlock()
	if l != nil {
		c.forward(l, relayEntry{kind: kindFrame, data: m.Raw})
	}
	return true
}

// subscribeRemote handles subscribe{id}: a streamer of this edge is left to
// the local code; one on another edge gets the frame through a link.
func (c *Cluster) subscribeRemote(p *player, id string, frame []byte, l *link) bool {
	s := c.srv
	s.mu.Lock()
	local := s.byID[id] != nil
	s.mu.Unlock()
	if local {
		if l != nil {
			c.unlink(p, true)
		}
		return false
	}
	fs, found, err := s.reg.lookup(id)
	if err != nil {
		// Subscribing unsubscribes first, whatever the outcome.
		if l != nil {
			c.unlink(p, true)
		}
		s.mu.Lock()
		left := s.detachLocked(p)
		s.mu.Unlock()
		s.afterLeft(p, left)
		s.met.drop(dropFleetUnavailable)
		p.log.Info("subscribe refused", "streamer", id, "err", err)
		p.send(msgSubscribeFailed(fmt.Sprintf("Streamer %s is unavailable: the streamer registry cannot be reached.", id)))
		return true
	}
	edge := fs.Edge
	if !found || edge == "" || edge == c.edge {
		// Unknown: the local code answers "does not exist".
		if l != nil {
			c.unlink(p, true)
		}
		return false
	}
	s.mu.Lock()
	left := s.detachLocked(p)
	s.mu.Unlock()
	s.afterLeft(p, left)
	if l != nil && l.edge != edge {
		c.unlink(p, true)
		l = nil
	}
	if l == nil {
		l = c.link(p, edge)
	}
	c.forward(l, relayEntry{kind: kindFrame, data: frame})
	return true
}

// link binds p to edge and queues the open.
func (c *Cluster) link(p *player, edge string) *link {
	var sess []byte
	if p.session != nil {
		sess, _ = json.Marshal(wireSession{PxSession: *p.session, Exp: p.session.ExpiresAt.UnixMilli()})
	}
	c.rmu.Lock()
	c.gen++
	l := &link{p: p, edge: edge, gen: c.gen, q: make(chan relayEntry, c.srv.cfg.SendQueue), quit: make(chan struct{})}
	c.links[p] = l
	c.linkByID[p.id] = l
	c.wg.Add(1)
	c.rmu.Unlock()
	go c.linkLoop(l)
	c.forward(l, relayEntry{kind: kindOpen, sess: sess})
	return l
}

// wireSession carries a token-mode player's session to the streamer's edge.
type wireSession struct {
	auth.PxSession
	Exp int64 `json:"exp_ms"`
}

// unlink forgets p's link; notify tells the streamer's edge (G).
func (c *Cluster) unlink(p *player, notify bool) {
	c.rmu.Lock()
	l := c.links[p]
	if l != nil {
		delete(c.links, p)
		if c.linkByID[p.id] == l {
			delete(c.linkByID, p.id)
		}
		if !notify {
			l.stopLocked()
		}
	}
	c.rmu.Unlock()
	if l != nil && notify {
		c.forward(l, relayEntry{kind: kindGone})
	}
}

// forward queues e on l without blocking; a full queue drops the player
// as a slow consumer.
func (c *Cluster) forward(l *link, e relayEntry) {
	if e.data != nil {
		e.data = append([]byte(nil), e.data...) // the reader may reuse its buffer
	}
	select {
	case <-l.quit:
		return // the link ended meanwhile
	default:
	}
	select {
	case l.q <- e:
		return
	default:
	}
	c.srv.met.drop(dropSlowConsumer)
	l.p.log.Warn("relay queue full, closing socket")
	c.rmu.Lock()
	if c.links[l.p] == l {
		delete(c.links, l.p)
		delete(c.linkByID, l.p.id)
	}
	l.stopLocked()
	c.rmu.Unlock()
	l.p.kill()
}

// playerGone: a local player's socket closed.
func (c *Cluster) playerGone(p *player) { c.unlink(p, true) }

// linkLoop writes l's queue to the streamer edge's inbox, in order.
func (c *Cluster) linkLoop(l *link) {
	defer c.wg.Done()
	var seq uint64
	batch := make([]relayEntry, 0, relayBatch)
	for {
		final := false
		select {
		case e := <-l.q:
			batch = append(batch, e)
		case <-l.quit:
			return
		case <-c.ctx.Done():
			final = true
		}
	drain:
		for len(batch) < relayBatch {
			select {
			case e := <-l.q:
				batch = append(batch, e)
			default:
				break drain
			}
		}
		gone := false
		for _, e := range batch {
			gone = gone || e.kind == kindGone
		}
		if len(batch) > 0 && !c.send(l.edge, l.p.id, l.gen, &seq, batch, l.quit, final) {
			return
		}
		batch = batch[:0]
		if gone || final {
			return
		}
	}
}

// send appends entries to edge's inbox in one round trip, retrying with
// backoff until it goes through (entries carry sequence numbers, so a
// retry that repeats some is harmless), quit closes or c stops. once tries
// one time.
func (c *Cluster) send(edge, pid string, gen uint64, seq *uint64, batch []relayEntry, quit <-chan struct{}, once bool) bool {
	msgs := make([][]byte, len(batch))
	for i, e := range batch {
		msgs[i] = appendEntry(nil, wireEntry{kind: e.kind, from: c.edge, player: pid, gen: gen, seq: *seq + uint64(i) + 1,
			data: e.data, code: e.code, reason: e.reason, sess: e.sess})
	}
	backoff := 20 * time.Millisecond
	for {
		if c.crashed.Load() {
			return false
		}
		ctx, cancel := c.opContext()
		err := c.fs.Inbox.Send(ctx, edge, msgs...)
		cancel()
		if err == nil {
			*seq += uint64(len(batch))
			return true
		}
		c.count("relay")
		if once {
			return false
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-quit:
			t.Stop()
			return false
		case <-c.ctx.Done():
			t.Stop()
			return false
		}
		backoff = min(2*backoff, time.Second)
	}
}

// ---- streamer side (B) ----

// newProxy makes the socketless player for a remote one.
func (c *Cluster) newProxy(from, pid string, gen uint64, sess []byte) *proxy {
	s := c.srv
	dc := &deadConn{ch: make(chan struct{})}
	log := s.log.With("role", "player", "player", pid, "edge_of_player", from)
	var ps *auth.PxSession
	if len(sess) > 0 {
		var w wireSession
		if err := json.Unmarshal(sess, &w); err == nil {
			w.PxSession.ExpiresAt = time.UnixMilli(w.Exp)
			ps = &w.PxSession
			log = log.With("session", ps.SessionID)
		}
	}
	cn := newConn(s, nil, &batchConn{Conn: dc}, log)
	return &proxy{p: &player{conn: cn, id: pid, session: ps}, from: from, key: from + "\x00" + pid, gen: gen,
		dead: dc.ch, quit: make(chan struct{})}
}

// proxyLoop writes what B's code sends the proxy to the player's edge, in
// order, and ends the proxy after its close.
func (c *Cluster) proxyLoop(px *proxy) {
	defer c.wg.Done()
	var seq uint64
	out := px.p.out
	batch := make([]relayEntry, 0, relayBatch)
	entry := func(f []byte) (relayEntry, bool) {
		switch {
		case f == nil:
			px.p.mu.Lock()
			code, reason := px.p.closeCode, px.p.closeReason
			px.p.mu.Unlock()
			return relayEntry{kind: kindClose, code: code, reason: reason}, true
		case isUnsubscribed(f):
			return relayEntry{kind: kindUnsub}, true
		}
		return relayEntry{kind: kindToP, data: f}, false
	}
	for {
		final, stopping := false, false
		select {
		case f := <-out:
			e, fin := entry(f)
			batch, final = append(batch, e), fin
		case <-px.dead:
			batch, final = append(batch, relayEntry{kind: kindKilled}), true
		case <-px.quit:
			return
		case <-c.ctx.Done():
			stopping = true
		}
	drain:
		for !final && len(batch) < relayBatch {
			select {
			case f := <-out:
				e, fin := entry(f)
				batch, final = append(batch, e), fin
			default:
				break drain
			}
		}
		if len(batch) > 0 && !c.send(px.from, px.p.id, px.gen, &seq, batch, px.quit, stopping) {
			final = true
		}
		batch = batch[:0]
		if final || stopping {
			c.dropProxy(px, true)
			return
		}
	}
}

// dropProxy forgets px; gone also runs the player-gone path (its streamer
// gets playerDisconnected).
func (c *Cluster) dropProxy(px *proxy, gone bool) {
	c.rmu.Lock()
	if c.proxies[px.key] == px {
		delete(c.proxies, px.key)
	}
	delete(c.proxyOf, px.p)
	px.stopLocked()
	c.rmu.Unlock()
	px.p.mu.Lock()
	px.p.closing = true
	px.p.mu.Unlock()
	if gone {
		c.srv.playerGone(px.p)
	}
}

// ---- inbox dispatch ----

// dispatch handles one inbox entry (on the inbox goroutine, in order).
func (c *Cluster) dispatch(e wireEntry) {
	switch e.kind {
	case kindOpen, kindFrame, kindGone:
		c.toProxy(e)
	case kindToP, kindClose, kindUnsub, kindKilled:
		c.toLink(e)
	}
}

func (c *Cluster) toProxy(e wireEntry) {
	kind, from, pid, gen, n := e.kind, e.from, e.player, e.gen, e.seq
	key := from + "\x00" + pid
	c.rmu.Lock()
	px := c.proxies[key]
	if kind == kindOpen && (px == nil || px.gen != gen) {
		old := px
		if old != nil {
			delete(c.proxies, key)
			delete(c.proxyOf, old.p)
			old.stopLocked()
		}
		if c.ctx.Err() != nil {
			c.rmu.Unlock()
			return
		}
		px = c.newProxy(from, pid, gen, e.sess)
		c.proxies[key] = px
		c.proxyOf[px.p] = px
		c.wg.Add(1)
		go c.proxyLoop(px)
		c.rmu.Unlock()
		if old != nil {
			c.srv.playerGone(old.p)
		}
		c.rmu.Lock()
	}
	if px == nil || px.gen != gen || n <= px.lastIn {
		c.rmu.Unlock()
		return // a stale link's, or a retried duplicate
	}
	px.lastIn = n
	c.rmu.Unlock()
	switch kind {
	case kindFrame:
		c.srv.onPlayerFrame(px.p, e.data)
		s := c.srv
		s.mu.Lock()
		subscribed := px.p.streamer != nil
		s.mu.Unlock()
		if !subscribed {
			// No longer subscribed (refused, or unsubscribed): after what
			// B sent it, tell A to forget the link.
			c.rmu.Lock()
			if c.proxies[px.key] == px {
				delete(c.proxies, px.key)
			}
			c.rmu.Unlock()
			px.p.send(unsubscribed)
		}
	case kindGone:
		c.dropProxy(px, true)
	}
}

func (c *Cluster) toLink(e wireEntry) {
	kind, from, pid, gen, n := e.kind, e.from, e.player, e.gen, e.seq
	c.rmu.Lock()
	l := c.linkByID[pid]
	if l == nil || l.edge != from || l.gen != gen || n <= l.lastIn {
		c.rmu.Unlock()
		return
	}
	l.lastIn = n
	if kind != kindToP {
		delete(c.linkByID, pid)
		delete(c.links, l.p)
		l.stopLocked()
	}
	c.rmu.Unlock()
	switch kind {
	case kindToP:
		l.p.send(e.data)
	case kindClose:
		l.p.closeWith(e.code, e.reason)
	case kindKilled:
		l.p.kill()
	}
}

// ---- peers ----

// checkPeers closes links and proxies of edges the fleet's membership has
// not had alive for a TTL (the edge died): linked players are closed as if
// their streamer left (1005); proxies leave their streamer
// (playerDisconnected).
func (c *Cluster) checkPeers(ctx context.Context) {
	c.rmu.Lock()
	edges := make(map[string]struct{})
	for _, l := range c.links {
		edges[l.edge] = struct{}{}
	}
	for _, px := range c.proxies {
		edges[px.from] = struct{}{}
	}
	c.rmu.Unlock()
	if len(edges) == 0 {
		return
	}
	names := make([]string, 0, len(edges))
	for e := range edges {
		names = append(names, e)
	}
	alive, err := c.fs.Members.Alive(ctx, names...)
	if err != nil {
		c.count("members")
		return
	}
	now := time.Now()
	var dead []string
	c.rmu.Lock()
	for _, e := range names {
		if _, ok := alive[e]; ok {
			delete(c.missing, e)
			continue
		}
		first, ok := c.missing[e]
		if !ok {
			c.missing[e] = now
			continue
		}
		if now.Sub(first) >= c.ttl {
			dead = append(dead, e)
			delete(c.missing, e)
		}
	}
	c.rmu.Unlock()
	for _, e := range dead {
		c.peerDead(e)
	}
}

func (c *Cluster) peerDead(edge string) {
	c.log.Warn("peer edge gone; closing its cross-edge sessions", "peer", edge)
	var ls []*link
	var pxs []*proxy
	c.rmu.Lock()
	for _, l := range c.links {
		if l.edge == edge {
			ls = append(ls, l)
		}
	}
	for _, px := range c.proxies {
		if px.from == edge {
			pxs = append(pxs, px)
		}
	}
	c.rmu.Unlock()
	for _, l := range ls {
		c.unlink(l.p, false)
		c.srv.met.drop(dropPeerEdgeDead)
		l.p.closeWith(CloseNoStatus, "")
	}
	for _, px := range pxs {
		c.dropProxy(px, true)
	}
}

// ---- fleet listing ----

// fleetEntries is the whole fleet in registration order.
func (c *Cluster) fleetEntries() ([]state.FleetStreamer, error) { return c.srv.reg.fleet() }

// noteFleet refreshes the view of other edges' ids from a fleet read (the
// registry's, whoever asked: the heartbeat, listStreamers, the matchmaker).
func (c *Cluster) noteFleet(all []state.FleetStreamer) {
	remote := make(map[string]struct{})
	for _, e := range all {
		if e.Edge != c.edge {
			remote[e.ID] = struct{}{}
		}
	}
	c.remote.Store(&remote)
}

// remoteID reports whether another edge registered id, as of the last
// fleet read (the heartbeat reads it every beat). Nil-safe; called under
// Server.mu, so it never waits for Redis: pickID suffixes ids fleet-wide
// on this best-effort view, and a collision that slips through is refused
// by the upsert script (logged; the streamer then stays out of the fleet).
func (c *Cluster) remoteID(id string) bool {
	if c == nil {
		return false
	}
	m := c.remote.Load()
	if m == nil {
		return false
	}
	_, ok := (*m)[id]
	return ok
}

// remoteIDs calls f for every streamer id registered by other edges.
func (c *Cluster) remoteIDs(f func(string)) {
	if c == nil {
		return
	}
	if m := c.remote.Load(); m != nil {
		for id := range *m {
			f(id)
		}
	}
}

// listIDs is listStreamers' answer: this edge's identified streamers
// merged into the fleet's, in fleet registration order (a token-mode
// player sees only its session's streamer); just the local ones while
// Redis is unreachable.
func (c *Cluster) listIDs(p *player) []string {
	s := c.srv
	s.mu.Lock()
	local := make([]string, 0, len(s.streamers))
	for _, st := range s.streamers {
		if p.session == nil || st.id == p.session.StreamerID {
			local = append(local, st.id)
		}
	}
	s.mu.Unlock()
	fleet, err := c.cachedFleet()
	if err != nil {
		return local
	}
	mine := make(map[string]bool, len(local))
	for _, id := range local {
		mine[id] = false
	}
	ids := make([]string, 0, len(fleet)+len(local))
	for _, e := range fleet {
		switch {
		case e.Edge == c.edge:
			if _, ok := mine[e.ID]; !ok {
				continue // gone here (or not this session's), not yet synced
			}
			mine[e.ID] = true
		case p.session != nil && e.ID != p.session.StreamerID:
			continue
		}
		ids = append(ids, e.ID)
	}
	for _, id := range local {
		if !mine[id] {
			ids = append(ids, id) // not yet synced
		}
	}
	return ids
}

// listCacheTTL is how long listStreamers reuses a fleet read: Epic's
// frontend re-lists every 3 s while it waits, and a read is a script over
// the whole fleet. This edge's own streamers are always current.
const listCacheTTL = 250 * time.Millisecond

// cachedFleet is fleetEntries, reused for listCacheTTL.
func (c *Cluster) cachedFleet() ([]state.FleetStreamer, error) {
	c.listMu.Lock()
	defer c.listMu.Unlock()
	if c.listAt.IsZero() || time.Since(c.listAt) > listCacheTTL {
		fleet, err := c.fleetEntries()
		if err != nil {
			return nil, err
		}
		c.list, c.listAt = fleet, time.Now()
	}
	return c.list, nil
}
