package signalling

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/wsframe"
)

// LeaseHooks is the seam the matchmaker wires (token mode; players in
// drop-in mode have no session). Calls are made without the server's lock
// held and may call back into Registry.
type LeaseHooks interface {
	// OnPlayerSubscribed: a player of sessionID subscribed to streamerID.
	OnPlayerSubscribed(sessionID, streamerID string)
	// OnPlayerLeft: a player of sessionID unsubscribed, closed, or lost its
	// streamer.
	OnPlayerLeft(sessionID string)
	// CheckOffer vets the streamer's offer SDP for sessionID (the leased
	// codec must be in m=video). leasedCodec is the codec claim of the
	// player's signed session token, so the check holds on whichever edge
	// the streamer is, not only the one that made the match. An error drops
	// the offer, sends the player subscribeFailed with the error text,
	// unsubscribes it and releases the session's lease.
	CheckOffer(sessionID, leasedCodec, sdp string) error
}

// Deps are what a Server uses besides its Config.
type Deps struct {
	// Signer verifies tokens; required when Config.Auth is AuthToken.
	Signer *auth.Signer
	// Logger; nil discards.
	Logger *slog.Logger
	// Now is the clock of the registry's leases; nil is time.Now.
	Now func() time.Time
	// Registerer receives the egbe_pxstream_* metrics; nil keeps them in a
	// private registry.
	Registerer prometheus.Registerer
	// Leases is optional.
	Leases LeaseHooks
	// Idle, when set, runs the idle lifecycle of leased (token-mode)
	// sessions: it returns a new machine for a session that starts now.
	Idle func(start time.Time) IdleMachine
	// Input, when set, receives each streamer's egbe.input.stats report
	// about a token-mode player (idle.go): the session, its subject, and
	// what the worker saw. Called without the server's lock.
	Input func(sessionID, subject string, r InputReport)
	// Cluster, when set (NewCluster), makes this Server one edge of a fleet
	// sharing state (Redis, through state/): the registry is fleet-wide and
	// players signal with streamers on any edge. Nil (the default) is a
	// single edge in memory.
	Cluster *Cluster
}

// maxPOPBytes bounds a POP name from a URL (it becomes a metric label).
const maxPOPBytes = 64

// MaxIDBytes bounds a streamer id (endpointId.id); a longer one is ignored.
const MaxIDBytes = 256

// Server is the signalling broker. Its handlers may be mounted on any path.
type Server struct {
	cfg      Config                      // immutable after New
	log      *slog.Logger                // immutable after New
	now      func() time.Time            // immutable after New
	signer   *auth.Signer                // immutable after New
	hooks    LeaseHooks                  // immutable after New
	cl       *Cluster                    // immutable after New; nil on a single edge
	reg      *Registry                   // immutable after New
	met      *metrics                    // immutable after New
	upgrader websocket.Upgrader          // immutable after New
	config   []byte                      // immutable after New: the config message
	newIdle  func(time.Time) IdleMachine // immutable after New; nil: no idle lifecycle
	onInput  inputHook                   // immutable after New; nil: reports ignored

	mu         sync.Mutex
	closed     bool                 // guarded by mu
	conns      map[*conn]struct{}   // guarded by mu: every open socket
	streamers  []*streamer          // guarded by mu: identified, registration order
	byID       map[string]*streamer // guarded by mu
	nextPlayer uint64               // guarded by mu
	// list is the streamerList frame for players without a session (every
	// identified streamer), shared by their queues; nil when the streamers
	// changed since it was built. Guarded by mu.
	list []byte
	// idle holds the idle machine of each leased session with a player;
	// idled the sessions ended for inactivity (their tokens no longer
	// subscribe). Guarded by mu.
	idle  map[string]IdleMachine
	idled map[string]ended
	// sfus are the SFU connections in connection order (sfu.go). Guarded by mu.
	sfus []*sfuConn

	// fl lists the sockets with frames to write (conn.go).
	fl flushList

	// wg counts every reader goroutine (each waits for its socket's
	// writer goroutine, if one runs, in conn.finish).
	wg sync.WaitGroup
}

// streamer is one streamer socket.
type streamer struct {
	*conn
	pop     string   // immutable
	codecs  []string // immutable
	tokenID string   // immutable: the id its token entitles ("" in drop-in mode)

	id      string             // guarded by s.mu; "" until identified
	refused bool               // guarded by s.mu: closing for a policy violation
	players map[string]*player // guarded by s.mu: subscribed players (SFUs included)
	sfu     *sfuConn           // immutable: set on an SFU's streamer side (sfu.go)
}

// player is one player socket.
type player struct {
	*conn
	id      string          // immutable: Player<n>
	session *auth.PxSession // immutable; nil in drop-in mode

	streamer *streamer // guarded by s.mu
	sfu      *sfuConn  // immutable: set on an SFU's player side (sfu.go)
}

// New returns a Server; cfg is validated.
func New(cfg Config, d Deps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Auth == AuthToken && d.Signer == nil {
		return nil, fmt.Errorf("%w: token auth needs a signer", ErrBadConfig)
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Registerer == nil {
		d.Registerer = prometheus.NewRegistry()
	}
	pco := []byte("{}")
	if len(bytes.TrimSpace(cfg.PeerConnectionOptions)) > 0 {
		var buf bytes.Buffer
		if err := json.Compact(&buf, cfg.PeerConnectionOptions); err != nil {
			return nil, fmt.Errorf("%w: peer_connection_options: %w", ErrBadConfig, err)
		}
		pco = buf.Bytes()
	}
	s := &Server{
		cfg:     cfg,
		log:     d.Logger.With("component", "signalling"),
		now:     d.Now,
		signer:  d.Signer,
		hooks:   d.Leases,
		reg:     newRegistry(d.Now, cfg.LeaseGrace, d.Logger.With("component", "signalling")),
		config:  msgConfig(pco),
		conns:   make(map[*conn]struct{}),
		byID:    make(map[string]*streamer),
		idle:    make(map[string]IdleMachine),
		idled:   make(map[string]ended),
		newIdle: d.Idle,
		onInput: d.Input,
	}
	met, err := newMetrics(d.Registerer, s.reg)
	if err != nil {
		return nil, err
	}
	s.met = met
	s.upgrader = websocket.Upgrader{
		ReadBufferSize:   0, // reuse the HTTP server's 4 KiB reader
		WriteBufferSize:  4096,
		WriteBufferPool:  &sync.Pool{},
		HandshakeTimeout: 10 * time.Second,
		// No Origin check: Epic's server has none, and pages are served
		// from anywhere.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	if d.Cluster != nil { // last: it starts the cluster's goroutines
		if err := d.Cluster.attach(s, d.Registerer); err != nil {
			return nil, err
		}
		s.cl = d.Cluster
	}
	return s, nil
}

// Registry is the server's streamer registry.
func (s *Server) Registry() *Registry { return s.reg }

// Run returns when ctx is done, after closing every socket.
func (s *Server) Run(ctx context.Context) error {
	if s.newIdle != nil {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.idleLoop(ctx) }()
	}
	<-ctx.Done()
	s.Close()
	return nil
}

// Close closes every socket with 1001 and waits for their goroutines. New
// connections are refused afterwards. It is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	// Under mu, so every socket gets 1001 before a streamer's departure
	// could close its players with 1005.
	for c := range s.conns {
		c.closeWith(CloseGoingAway, "server closing")
	}
	s.mu.Unlock()
	s.wg.Wait()
	if s.cl != nil {
		s.cl.stop()
	}
}

// upgrade accepts the WebSocket, echoing the first subprotocol offered,
// and writes the greeting frames (none when the connection is refused)
// with the 101 response: one write for the handshake and the greeting.
func (s *Server) upgrade(w http.ResponseWriter, r *http.Request, log *slog.Logger, greeting ...[]byte) (*conn, bool) {
	return s.upgradeQueue(w, r, log, s.cfg.SendQueue, greeting...)
}

// upgradeQueue is upgrade with a send queue of queue frames (an SFU's
// socket carries all its players' signalling).
func (s *Server) upgradeQueue(w http.ResponseWriter, r *http.Request, log *slog.Logger, queue int, greeting ...[]byte) (*conn, bool) {
	var h http.Header
	if p := websocket.Subprotocols(r); len(p) > 0 {
		h = http.Header{"Sec-Websocket-Protocol": {p[0]}}
	}
	hj := &batchHijacker{ResponseWriter: w}
	ws, err := s.upgrader.Upgrade(hj, r, h)
	if err != nil {
		if hj.bc != nil {
			_ = hj.bc.flush() // the upgrader's error answer, if it wrote one
		}
		return nil, false // the upgrader answered the HTTP error
	}
	c := newConn(s, ws, hj.bc, log)
	c.queue = queue // before any goroutine sees c
	// Nothing else writes before the greeting: it joins the 101 response
	// in the held batch, and both leave in one write.
	var frames []byte
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_, _ = hj.bc.Write(wsframe.AppendClose(nil, CloseGoingAway, "server closing"))
		_ = hj.bc.SetWriteDeadline(time.Now().Add(time.Second))
		_ = hj.bc.flush()
		_ = hj.bc.Conn.Close()
		return nil, false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1) // the reader (streamerReader, playerReader, sfuReader)
	s.mu.Unlock()
	for _, f := range greeting {
		frames = wsframe.AppendHeader(frames, wsframe.OpText, len(f))
		frames = append(frames, f...)
	}
	_, _ = hj.bc.Write(frames)
	_ = hj.bc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	if err := hj.bc.flush(); err != nil {
		c.kill()
	}
	// No deadline from here: the socket's writes never block (conn.flush);
	// the writer goroutine arms its own.
	_ = hj.bc.SetWriteDeadline(time.Time{})
	return c, true
}

// release forgets c once its reader is done.
func (s *Server) release(c *conn) {
	c.finish()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// refuse closes c with 1008 and reason, waiting for the peer's close.
func (s *Server) refuse(c *conn, reason string) {
	s.met.drop(dropAuth)
	c.log.Info("connection refused", "reason", reason)
	c.closeWith(ClosePolicy, reason)
	c.readLoop(func([]byte) {})
}

// authReason is the close reason for a refused token.
func authReason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, auth.ErrExpired):
		return "token expired"
	}
	return "invalid token"
}

// StreamerHandler serves streamer (UE worker) WebSockets on any path. The
// query may carry pop, codecs (comma-separated) and, in token mode, token.
func (s *Server) StreamerHandler() http.Handler { return http.HandlerFunc(s.serveStreamer) }

// PlayerHandler serves player (browser) WebSockets on any path. In token
// mode the query carries token (the matchmaker's session JWT).
func (s *Server) PlayerHandler() http.Handler { return http.HandlerFunc(s.servePlayer) }

func (s *Server) serveStreamer(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var claims auth.Streamer
	var authErr error
	if s.cfg.Auth == AuthToken {
		claims, authErr = s.signer.VerifyStreamer(q.Get("token"))
	}
	pop := claims.POP
	if pop == "" {
		pop = q.Get("pop")
	}
	if pop == "" || len(pop) > maxPOPBytes {
		pop = s.cfg.DefaultPOP
	}
	codecs := normCodecs(claims.Codecs)
	if len(codecs) == 0 {
		codecs = normCodecs(strings.Split(q.Get("codecs"), ","))
	}
	if len(codecs) == 0 {
		codecs = normCodecs(s.cfg.DefaultCodecs)
	}
	log := lazyLogger(s.log, "role", "streamer", "pop", pop, "remote", r.RemoteAddr)
	var greeting [][]byte
	if authErr == nil {
		// identify first, then config (Epic's order).
		greeting = [][]byte{msgIdentify, s.configFor(Peer{Role: RoleStreamer, Subject: claims.StreamerID, Expires: claims.ExpiresAt, Host: r.Host})}
	}
	c, ok := s.upgrade(w, r, log, greeting...)
	if !ok {
		return
	}
	go s.streamerReader(c, authErr, pop, codecs, claims.StreamerID)
}

// streamerReader is a streamer socket's reader. It has its own goroutine
// (counted in s.wg by upgrade) so the HTTP server's goroutine ends with the
// upgrade and frees the request's buffers: an idle socket keeps only its
// reader goroutine and its conn (no buffer: conn.go).
func (s *Server) streamerReader(c *conn, authErr error, pop string, codecs []string, tokenID string) {
	defer s.release(c)
	if authErr != nil {
		s.refuse(c, authReason(authErr))
		return
	}
	st := &streamer{conn: c, pop: pop, codecs: codecs, tokenID: tokenID, players: make(map[string]*player)}
	s.met.streamers.Inc()
	defer s.met.streamers.Dec()
	st.readLoop(func(b []byte) { s.onStreamerFrame(st, b) })
	s.streamerGone(st)
}

func normCodecs(in []string) []string {
	var out []string
	for _, c := range in {
		c = strings.ToUpper(strings.TrimSpace(c))
		if c != "" && len(c) <= 16 && !containsStr(out, c) {
			out = append(out, c)
		}
	}
	return out
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func (s *Server) servePlayer(w http.ResponseWriter, r *http.Request) {
	var sess *auth.PxSession
	var authErr error
	if s.cfg.Auth == AuthToken {
		var p auth.PxSession
		p, authErr = s.signer.VerifyPxSession(r.URL.Query().Get("token"))
		sess = &p
	}
	s.mu.Lock()
	id := "Player" + strconv.FormatUint(s.nextPlayer, 10)
	s.nextPlayer++
	s.mu.Unlock()
	log := lazyLogger(s.log, "role", "player", "player", id, "remote", r.RemoteAddr)
	if sess != nil && authErr == nil {
		log = log.With("session", sess.SessionID)
	}
	// config immediately, before reading anything: Epic's frontend sends
	// listStreamers on open and breaks if streamerList comes first.
	var greeting [][]byte
	if authErr == nil {
		pr := Peer{Role: RolePlayer, ID: id, Host: r.Host}
		if sess != nil {
			pr.Subject, pr.Expires = sess.Subject, sess.ExpiresAt
		}
		greeting = [][]byte{s.configFor(pr)}
	}
	c, ok := s.upgrade(w, r, log, greeting...)
	if !ok {
		return
	}
	go s.playerReader(c, authErr, id, sess) // see streamerReader
}

// playerReader is a player socket's reader (see streamerReader).
func (s *Server) playerReader(c *conn, authErr error, id string, sess *auth.PxSession) {
	defer s.release(c)
	if authErr != nil {
		s.refuse(c, authReason(authErr))
		return
	}
	p := &player{conn: c, id: id, session: sess}
	s.met.players.Inc()
	defer s.met.players.Dec()
	p.readLoop(func(b []byte) { s.onPlayerFrame(p, b) })
	s.playerGone(p)
}

// decode parses a frame, counting and logging what it ignores.
func (s *Server) decode(c *conn, b []byte, m *Message) bool {
	err := Decode(b, m)
	if err == nil {
		return true
	}
	reason := dropBadJSON
	switch err {
	case ErrNotObject:
		reason = dropNotObject
	case ErrNoType:
		reason = dropNoType
	case ErrTooManyFields:
		reason = dropTooManyFields
	}
	s.met.drop(reason)
	c.log.Debug("message ignored", "reason", reason, "bytes", len(b))
	return false
}

func (s *Server) ignore(c *conn, reason, typ string) {
	s.met.drop(reason)
	c.log.Debug("message ignored", "reason", reason, "type", typ)
}

// ---- streamer side ----

func (s *Server) onStreamerFrame(st *streamer, b []byte) {
	var m Message
	if !s.decode(st.conn, b, &m) {
		return
	}
	switch m.Type {
	case typeEndpointID:
		s.endpointID(st, &m)
	case typePing:
		st.send(msgPong(&m))
	case typeOffer, typeAnswer, typeIceCandidate:
		s.streamerToPlayer(st, &m)
	case typeDisconnectPlayer:
		s.disconnectPlayer(st, &m)
	case typeLayerPreference:
		s.layerPreferenceToSFUs(st, &m)
	case typeIdleInput:
		s.mu.Lock()
		if p := st.lookupPlayer(&m); p != nil && p.session != nil {
			s.idleInputLocked(p.session.SessionID)
		}
		s.mu.Unlock()
	case typeInputStats:
		s.inputStats(st, &m)
	default:
		s.ignore(st.conn, dropUnknownType, m.Type)
	}
}

// endpointID identifies or renames a streamer (PIXEL_STREAMING.md,
// streamer connection 2).
func (s *Server) endpointID(st *streamer, m *Message) {
	req, _ := m.String("id")
	if len(req) > MaxIDBytes {
		s.ignore(st.conn, dropBadID, m.Type)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if st.refused {
		return
	}
	var id string
	if s.cfg.Auth == AuthToken {
		if req == "" {
			req = st.tokenID
		}
		switch holder := s.byID[req]; {
		case req != st.tokenID:
			s.refuseLocked(st, fmt.Sprintf("streamer token is for %s", st.tokenID))
			return
		case holder != nil && holder != st:
			s.refuseLocked(st, fmt.Sprintf("streamer id %s is connected already", req))
			return
		}
		id = req // re-sending its own id confirms it, never suffixes it
	} else {
		id = s.pickID(req)
	}
	old := st.id
	switch {
	case old == "":
		s.list = nil
		st.id = id
		s.byID[id] = st
		s.streamers = append(s.streamers, st)
		_ = s.reg.add(StreamerInfo{ID: id, POP: st.pop, Codecs: st.codecs, ConnectedAt: s.now()})
		st.log.Info("streamer identified", "streamer", id)
	case old != id:
		s.list = nil
		delete(s.byID, old)
		st.id = id
		s.byID[id] = st
		_ = s.reg.rename(old, id)
		st.log.Info("streamer renamed", "streamer", id, "from", old)
		for _, p := range st.players {
			p.send(msgStreamerIDChanged(id))
		}
	}
	st.send(msgEndpointIDConfirm(id))
}

func (s *Server) refuseLocked(st *streamer, reason string) {
	s.met.drop(dropAuth)
	st.refused = true
	st.log.Warn("streamer refused", "reason", reason)
	st.closeWith(ClosePolicy, reason)
}

// pickID applies Epic's suffix rule: a free id is kept; a taken one (a
// streamer's own current id counts) gets one above the largest numeric
// suffix in use for its base (trailing digits stripped); a missing id is
// UnknownStreamer<n>. Caller holds s.mu.
func (s *Server) pickID(req string) string {
	if req != "" {
		if _, taken := s.byID[req]; !taken && !s.cl.remoteID(req) {
			return req
		}
	}
	base := req
	if base == "" {
		base = "UnknownStreamer"
	} else if b := strings.TrimRight(base, "0123456789"); b != "" {
		base = b
	}
	var max uint64
	scan := func(id string) {
		rest, ok := strings.CutPrefix(id, base)
		if !ok || rest == "" {
			return
		}
		if n, err := strconv.ParseUint(rest, 10, 32); err == nil && n > max {
			max = n
		}
	}
	for id := range s.byID {
		scan(id)
	}
	s.cl.remoteIDs(scan) // other edges' streamers (nil-safe)
	return base + strconv.FormatUint(max+1, 10)
}

// lookupPlayer finds a player subscribed to st by the playerId of m; a
// numeric id n is tried as "n" and as "Player<n>". Caller holds s.mu.
func (st *streamer) lookupPlayer(m *Message) *player {
	id, ok := m.IDString("playerId")
	if !ok {
		return nil
	}
	if p := st.players[id]; p != nil {
		return p
	}
	if raw, _ := m.Field("playerId"); len(raw) > 0 && raw[0] != '"' {
		if n, err := strconv.ParseUint(id, 10, 64); err == nil {
			return st.players["Player"+strconv.FormatUint(n, 10)]
		}
	}
	return nil
}

// streamerToPlayer relays offer, answer, iceCandidate with playerId removed.
func (s *Server) streamerToPlayer(st *streamer, m *Message) {
	s.mu.Lock()
	if st.id == "" {
		s.mu.Unlock()
		s.ignore(st.conn, dropUnidentified, m.Type)
		return
	}
	p := st.lookupPlayer(m)
	s.mu.Unlock()
	if p == nil {
		s.ignore(st.conn, dropUnknownPlayer, m.Type)
		return
	}
	if m.Type == typeOffer && p.session != nil && s.hooks != nil {
		sdp, _ := m.String("sdp")
		if err := s.hooks.CheckOffer(p.session.SessionID, p.session.Codec, sdp); err != nil {
			s.rejectOffer(st, p, err)
			return
		}
	}
	s.mu.Lock()
	// Still subscribed? (it may have left while CheckOffer ran.) Sending
	// under mu keeps this streamer's frames in order.
	if p.streamer == st {
		s.met.relay(m.Type) // counted before the peer can see it
		p.sendEdited(m, "playerId", nil)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.ignore(st.conn, dropUnknownPlayer, m.Type)
}

// rejectOffer: the offer failed the matchmaker's codec check.
func (s *Server) rejectOffer(st *streamer, p *player, err error) {
	s.met.drop(dropOfferRejected)
	p.log.Warn("offer rejected", "err", err)
	s.mu.Lock()
	_ = s.reg.Release(p.session.SessionID)
	left := false
	if p.streamer == st {
		p.send(msgSubscribeFailed(fmt.Sprintf("Streamer %s offer rejected: %v", st.id, err)))
		left = s.detachLocked(p)
	}
	s.mu.Unlock()
	if left {
		s.hooks.OnPlayerLeft(p.session.SessionID)
	}
}

func (s *Server) disconnectPlayer(st *streamer, m *Message) {
	reason, _ := m.String("reason")
	s.mu.Lock()
	p := st.lookupPlayer(m)
	s.mu.Unlock()
	if p == nil {
		s.ignore(st.conn, dropUnknownPlayer, m.Type)
		return
	}
	s.met.relay(m.Type)
	p.closeWith(CloseDisconnectPlayer, reason)
}

// streamerGone unregisters st and closes its players with 1005.
func (s *Server) streamerGone(st *streamer) {
	var sessions []string
	s.mu.Lock()
	if st.id != "" {
		s.list = nil
		delete(s.byID, st.id)
		for i, x := range s.streamers {
			if x == st {
				s.streamers = append(s.streamers[:i], s.streamers[i+1:]...)
				break
			}
		}
		s.reg.remove(st.id)
		st.log.Info("streamer left", "streamer", st.id, "players", len(st.players))
	}
	for _, p := range st.players {
		p.streamer = nil
		if p.sfu != nil {
			sessions = append(sessions, s.upstreamGoneLocked(p.sfu)...)
			continue
		}
		if p.session != nil {
			sessions = append(sessions, p.session.SessionID)
		}
		s.met.drop(dropStreamerClosed)
		p.closeWith(CloseNoStatus, "")
	}
	st.players = nil
	s.mu.Unlock()
	if s.hooks != nil {
		for _, sid := range sessions {
			s.hooks.OnPlayerLeft(sid)
		}
	}
}

// ---- player side ----

func (s *Server) onPlayerFrame(p *player, b []byte) {
	var m Message
	if !s.decode(p.conn, b, &m) {
		return
	}
	if s.cl != nil && s.cl.fromPlayer(p, &m) {
		return // relayed to a streamer on another edge (relay.go)
	}
	switch m.Type {
	case typeListStreamers:
		s.listStreamers(p)
	case typeSubscribe:
		id, _ := m.IDString("streamerId")
		s.subscribe(p, id)
	case typeUnsubscribe:
		s.mu.Lock()
		left := s.detachLocked(p)
		s.mu.Unlock()
		s.afterLeft(p, left)
	case typePing:
		p.send(msgPong(&m))
	case typeIdleInput:
		if p.session != nil {
			s.mu.Lock()
			s.idleInputLocked(p.session.SessionID)
			s.mu.Unlock()
		}
	case typeOffer, typeAnswer, typeIceCandidate, typeLayerPreference,
		typeDataChannelRequest, typePeerDataChannelsReady:
		s.playerToStreamer(p, &m)
	default:
		s.ignore(p.conn, dropUnknownType, m.Type)
	}
}

// listStreamers answers identified streamers in registration order; a
// token-mode player sees only its leased streamer.
func (s *Server) listStreamers(p *player) {
	if s.cl != nil { // the whole fleet's (relay.go)
		ids := s.cl.listIDs(p)
		s.mu.Lock()
		ids = s.appendSFUsLocked(ids, p)
		s.mu.Unlock()
		p.send(msgStreamerList(ids))
		return
	}
	s.mu.Lock()
	if p.session == nil {
		if s.list == nil {
			ids := make([]string, len(s.streamers), len(s.streamers)+len(s.sfus))
			for i, st := range s.streamers {
				ids[i] = st.id
			}
			s.list = msgStreamerList(s.appendSFUsLocked(ids, p))
		}
		list := s.list
		s.mu.Unlock()
		p.send(list)
		return
	}
	ids := make([]string, 0, len(s.streamers))
	for _, st := range s.streamers {
		if p.session == nil || st.id == p.session.StreamerID {
			ids = append(ids, st.id)
		}
	}
	ids = s.appendSFUsLocked(ids, p)
	s.mu.Unlock()
	p.send(msgStreamerList(ids))
}

func (s *Server) subscribe(p *player, id string) {
	s.mu.Lock()
	left := s.detachLocked(p)
	joined := s.subscribeLocked(p, id)
	s.mu.Unlock()
	s.afterLeft(p, left)
	s.afterJoined(p, joined)
}

// subscribeLocked subscribes p (unsubscribed) to id, or sends
// subscribeFailed. Caller holds s.mu.
func (s *Server) subscribeLocked(p *player, id string) bool {
	st := s.byID[id]
	if st == nil {
		p.send(msgSubscribeFailed(fmt.Sprintf("Streamer %s does not exist.", id)))
		return false
	}
	// --max-players does not apply to SFUs, and an SFU subscribed to a
	// streamer takes no player's seat (PIXEL_STREAMING_SFU.md section 1).
	if s.cfg.MaxPlayers > 0 && st.sfu == nil && st.playerCount() >= s.cfg.MaxPlayers {
		p.send(msgSubscribeFailed(fmt.Sprintf("Streamer %s is full. Max players = %d.", id, s.cfg.MaxPlayers)))
		return false
	}
	if p.session != nil {
		if id != p.session.StreamerID {
			p.send(msgSubscribeFailed(fmt.Sprintf("Streamer %s is not leased to this session.", id)))
			return false
		}
		if e, gone := s.idled[p.session.SessionID]; gone {
			p.send(msgSubscribeFailed(endedText(e.reason)))
			return false
		}
		if err := s.claimLocked(st, p.session); err != nil {
			p.log.Info("subscribe refused", "streamer", id, "err", err)
			p.send(msgSubscribeFailed(fmt.Sprintf("Streamer %s is leased to another session.", id)))
			return false
		}
	}
	st.players[p.id] = p
	p.streamer = st
	if p.session != nil {
		s.idleStartLocked(p.session.SessionID)
	}
	if st.sfu == nil { // SFUs are not in the registry
		_ = s.reg.joined(id)
	}
	st.send(msgPlayerConnected(p.id))
	return true
}

// detachLocked unsubscribes p; its streamer gets playerDisconnected. Caller
// holds s.mu. It reports whether p was subscribed.
func (s *Server) detachLocked(p *player) bool {
	st := p.streamer
	if st == nil {
		return false
	}
	p.streamer = nil
	delete(st.players, p.id)
	if st.sfu == nil {
		s.reg.left(st.id)
	}
	st.send(msgPlayerDisconnected(p.id))
	return true
}

func (s *Server) afterLeft(p *player, left bool) {
	if left && p.session != nil && s.hooks != nil {
		s.hooks.OnPlayerLeft(p.session.SessionID)
	}
}

func (s *Server) afterJoined(p *player, joined bool) {
	if joined && p.session != nil && s.hooks != nil {
		s.hooks.OnPlayerSubscribed(p.session.SessionID, p.session.StreamerID)
	}
}

// playerToStreamer relays a player's message with playerId set. An
// unsubscribed player is first subscribed to the first registered streamer
// (token mode: its leased one); with none its socket is closed.
func (s *Server) playerToStreamer(p *player, m *Message) {
	s.mu.Lock()
	joined := false
	if p.streamer == nil {
		var target *streamer
		if p.session != nil {
			target = s.byID[p.session.StreamerID]
		} else if len(s.streamers) > 0 {
			target = s.streamers[0]
		}
		if target == nil {
			s.mu.Unlock()
			s.ignore(p.conn, dropNoStreamer, m.Type)
			p.closeWith(CloseNoStatus, "")
			return
		}
		if !s.subscribeLocked(p, target.id) {
			s.mu.Unlock()
			s.ignore(p.conn, dropSubscribeFail, m.Type)
			return
		}
		joined = true
	}
	s.met.relay(m.Type)
	var q [32]byte
	p.streamer.sendEdited(m, "playerId", appendQuote(q[:0], p.id))
	s.mu.Unlock()
	s.afterJoined(p, joined)
}

// playerGone: the player's socket closed (its close frame, or an error).
func (s *Server) playerGone(p *player) {
	if s.cl != nil {
		s.cl.playerGone(p)
	}
	s.mu.Lock()
	left := s.detachLocked(p)
	s.mu.Unlock()
	s.afterLeft(p, left)
}
