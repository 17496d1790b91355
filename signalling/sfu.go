package signalling

// The SFU role (PIXEL_STREAMING_SFU.md sections 1, 2 and 6): a Pixel
// Streaming SFU (Epic's mediasoup SFU, or signalling/pxsfu) opens one
// WebSocket to the SFU port. On that socket it is both a player,
// subscribed to one upstream streamer with a Player<n> id from the shared
// counter, and a streamer, which players subscribe to by its endpointId.
// The two sides are an ordinary *player and *streamer sharing the socket,
// so the relay code of the streamer and player ports serves them; this
// file holds only what differs.

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/oshun/egbe-edge/auth"
)

// sfuConn is one SFU connection.
type sfuConn struct {
	st       *streamer // immutable: the streamer side (players subscribe to st.id)
	pl       *player   // immutable: the player side (pl.id is the SFU's player id)
	tokenID  string    // immutable: the id its token entitles ("" in drop-in mode)
	upstream string    // immutable: the only streamer its token lets it subscribe to ("" = any)

	// streaming lists the SFU to players: set by its endpointId and
	// startStreaming, cleared by stopStreaming and when its upstream
	// streamer leaves. Guarded by Server.mu.
	streaming bool
}

// sfuFirstID is the streamer id an SFU holds until its endpointId (Epic:
// "UnknownStreamer", suffixed if taken).
const sfuFirstID = "UnknownStreamer"

// SFUHandler serves SFU WebSockets on any path. In token mode the query
// carries token (an SFU token, auth.IssueSFU).
func (s *Server) SFUHandler() http.Handler { return http.HandlerFunc(s.serveSFU) }

func (s *Server) serveSFU(w http.ResponseWriter, r *http.Request) {
	var claims auth.SFU
	var authErr error
	if s.cfg.Auth == AuthToken {
		claims, authErr = s.signer.VerifySFU(r.URL.Query().Get("token"))
	}
	s.mu.Lock()
	id := "Player" + strconv.FormatUint(s.nextPlayer, 10)
	s.nextPlayer++
	s.mu.Unlock()
	log := lazyLogger(s.log, "role", "sfu", "player", id, "remote", r.RemoteAddr)
	var greeting [][]byte
	if authErr == nil {
		// as for streamers
		greeting = [][]byte{msgIdentify, s.configFor(Peer{Role: RoleSFU, Subject: claims.SFUID, ID: id, Expires: claims.ExpiresAt, Host: r.Host})}
	}
	c, ok := s.upgradeQueue(w, r, log, s.cfg.SFUSendQueue, greeting...)
	if !ok {
		return
	}
	go s.sfuReader(c, authErr, id, claims) // see streamerReader
}

// sfuReader is an SFU socket's reader (see streamerReader).
func (s *Server) sfuReader(c *conn, authErr error, playerID string, claims auth.SFU) {
	defer s.release(c)
	if authErr != nil {
		s.refuse(c, authReason(authErr))
		return
	}
	f := &sfuConn{tokenID: claims.SFUID, upstream: claims.Upstream}
	f.st = &streamer{conn: c, pop: s.cfg.DefaultPOP, players: make(map[string]*player), sfu: f}
	f.pl = &player{conn: c, id: playerID, sfu: f}
	s.mu.Lock()
	f.st.id = sfuFirstID
	if _, taken := s.byID[sfuFirstID]; taken {
		f.st.id = s.pickID(sfuFirstID)
	}
	s.byID[f.st.id] = f.st
	s.sfus = append(s.sfus, f)
	s.mu.Unlock()
	s.met.sfus.Inc()
	defer s.met.sfus.Dec()
	c.readLoop(func(b []byte) { s.onSFUFrame(f, b) })
	s.sfuGone(f)
}

// onSFUFrame handles one message from an SFU (section 2's table). Every
// other type, iceCandidate included, is dropped: the SFU is ICE-lite.
func (s *Server) onSFUFrame(f *sfuConn, b []byte) {
	var m Message
	if !s.decode(f.st.conn, b, &m) {
		return
	}
	switch m.Type {
	case typeEndpointID:
		s.sfuEndpointID(f, &m)
	case typeListStreamers:
		f.pl.send(msgStreamerList(s.sfuListIDs(f)))
	case typeSubscribe:
		id, _ := m.IDString("streamerId")
		s.sfuSubscribe(f, id)
	case typeUnsubscribe:
		s.mu.Lock()
		s.detachLocked(f.pl)
		s.mu.Unlock()
	case typeAnswer:
		s.sfuToUpstream(f, &m, m.WithString("playerId", f.pl.id))
	case typeStreamerDataChannels:
		// The real player's id stays; sfuId names the SFU's player id, the
		// one the streamer knows the SFU by.
		s.sfuToUpstream(f, &m, m.WithString("sfuId", f.pl.id))
	case typeOffer, typePeerDataChannels:
		s.streamerToPlayer(f.st, &m) // to that player, playerId removed
	case typeStartStreaming:
		s.mu.Lock()
		f.streaming = true
		s.list = nil
		s.mu.Unlock()
	case typeStopStreaming:
		var sessions []string
		s.mu.Lock()
		f.streaming = false
		s.list = nil
		sessions = s.dropPlayersLocked(f)
		s.mu.Unlock()
		s.afterSessionsLeft(sessions)
	case typePing:
		f.st.send(msgPong(&m))
	default:
		s.ignore(f.st.conn, dropUnknownType, m.Type)
	}
}

// sfuEndpointID names the SFU's streamer side as endpointId does for a
// streamer, and lists it to players (streaming) before it has media.
func (s *Server) sfuEndpointID(f *sfuConn, m *Message) {
	req, _ := m.String("id")
	if len(req) > MaxIDBytes {
		s.ignore(f.st.conn, dropBadID, m.Type)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.st.refused {
		return
	}
	var id string
	if s.cfg.Auth == AuthToken {
		if req == "" {
			req = f.tokenID
		}
		switch holder := s.byID[req]; {
		case req != f.tokenID:
			s.refuseLocked(f.st, fmt.Sprintf("sfu token is for %s", f.tokenID))
			return
		case holder != nil && holder != f.st:
			s.refuseLocked(f.st, fmt.Sprintf("streamer id %s is connected already", req))
			return
		}
		id = req
	} else {
		id = s.pickID(req)
	}
	if old := f.st.id; old != id {
		if s.byID[old] == f.st {
			delete(s.byID, old)
		}
		f.st.id = id
		s.byID[id] = f.st
		f.st.log.Info("sfu identified", "streamer", id, "from", old)
		for _, p := range f.st.players {
			p.send(msgStreamerIDChanged(id))
		}
	}
	f.streaming = true
	s.list = nil
	f.st.send(msgEndpointIDConfirm(id))
}

// sfuListIDs is an SFU's streamerList: not filtered, every registered id,
// streaming or not, the SFU's own included (it drops its own).
func (s *Server) sfuListIDs(f *sfuConn) []string {
	var ids []string
	if s.cl != nil {
		ids = s.cl.listIDs(f.pl) // the fleet's streamers
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cl == nil {
		for _, st := range s.streamers {
			ids = append(ids, st.id)
		}
	}
	for _, x := range s.sfus {
		ids = append(ids, x.st.id)
	}
	return ids
}

// appendSFUsLocked appends the SFUs listed to player p: those streaming,
// and in token mode only the one its session names. Caller holds s.mu.
func (s *Server) appendSFUsLocked(ids []string, p *player) []string {
	for _, f := range s.sfus {
		if f.streaming && (p.session == nil || p.session.StreamerID == f.st.id) {
			ids = append(ids, f.st.id)
		}
	}
	return ids
}

// sfuSubscribe subscribes the SFU's player side to streamer id: the
// streamer gets playerConnected{sfu:true}. Unlike a player's, the
// subscription is never refused with a message: an unknown id (or, in
// token mode, one its token does not name) gets no reply, as with Epic's
// server, and MaxPlayers does not apply. Streamers on other edges of a
// fleet cannot be subscribed to (yet): the SFU must connect to the edge
// its streamer is registered on.
func (s *Server) sfuSubscribe(f *sfuConn, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.byID[id]
	switch {
	case st == nil, st == f.st:
		s.ignore(f.pl.conn, dropUnknownStreamer, typeSubscribe)
		f.pl.log.Info("sfu subscribe ignored: no such streamer", "streamer", id)
		return
	case f.upstream != "" && id != f.upstream:
		s.ignore(f.pl.conn, dropAuth, typeSubscribe)
		f.pl.log.Warn("sfu subscribe ignored: not its token's upstream", "streamer", id, "upstream", f.upstream)
		return
	}
	s.detachLocked(f.pl)
	st.players[f.pl.id] = f.pl
	f.pl.streamer = st
	if st.sfu == nil {
		_ = s.reg.joined(st.id)
	}
	st.send(msgSFUConnected(f.pl.id))
}

// sfuToUpstream sends out (built from m) to the SFU's upstream streamer.
// The SFU's answer always carries the SFU's player id: Epic's server keeps
// a playerId the SFU set, which would let an SFU answer for someone else.
func (s *Server) sfuToUpstream(f *sfuConn, m *Message, out []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := f.pl.streamer
	if st == nil {
		s.ignore(f.pl.conn, dropNoStreamer, m.Type)
		return
	}
	s.met.relay(m.Type)
	st.send(out)
}

// layerPreference sent by a streamer (UE <= 5.4's layer toggle) goes,
// unchanged, to every SFU subscribed to it.
func (s *Server) layerPreferenceToSFUs(st *streamer, m *Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sent := false
	for _, p := range st.players {
		if p.sfu != nil {
			p.send(m.Raw)
			sent = true
		}
	}
	if sent {
		s.met.relay(m.Type)
	} else {
		s.ignore(st.conn, dropUnknownPlayer, m.Type)
	}
}

// dropPlayersLocked closes every player subscribed to f (stopStreaming,
// or its upstream left): for each, in subscription order, f first gets
// playerDisconnected, then the player's socket is closed with no message
// (1005). An SFU subscribed to f loses its upstream instead. It returns
// the sessions that left. Caller holds s.mu.
//
// Epic's server sends playerDisconnected when each closed socket's close
// event fires; we send it at once, so the order is fixed.
func (s *Server) dropPlayersLocked(f *sfuConn) (sessions []string) {
	for _, p := range sortedPlayers(f.st) {
		s.detachLocked(p)
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
	return sessions
}

// upstreamGoneLocked: f's upstream streamer left (its subscription is
// already gone). f gets streamerDisconnected, is no longer listed, and its
// players are dropped. Caller holds s.mu.
func (s *Server) upstreamGoneLocked(f *sfuConn) (sessions []string) {
	f.pl.streamer = nil
	f.st.send(msgStreamerDisconnected)
	f.streaming = false
	s.list = nil
	return s.dropPlayersLocked(f)
}

// sfuGone: the SFU's socket closed. Its upstream streamer gets
// playerDisconnected; its players are closed with no message (as when a
// streamer leaves); it leaves both registries.
func (s *Server) sfuGone(f *sfuConn) {
	var sessions []string
	s.mu.Lock()
	if s.byID[f.st.id] == f.st {
		delete(s.byID, f.st.id)
	}
	if i := slices.Index(s.sfus, f); i >= 0 {
		s.sfus = slices.Delete(s.sfus, i, i+1)
	}
	s.list = nil
	s.detachLocked(f.pl)
	for _, p := range sortedPlayers(f.st) {
		p.streamer = nil
		delete(f.st.players, p.id)
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
	f.st.log.Info("sfu left", "streamer", f.st.id)
	s.mu.Unlock()
	s.afterSessionsLeft(sessions)
}

func (s *Server) afterSessionsLeft(sessions []string) {
	if s.hooks == nil {
		return
	}
	for _, sid := range sessions {
		s.hooks.OnPlayerLeft(sid)
	}
}

// claimLocked claims st's registry lease for a token-mode player. An SFU
// is not in the registry: a session naming it subscribes without a lease
// (seats on SFUs come with concert matches). Caller holds s.mu.
func (s *Server) claimLocked(st *streamer, sess *auth.PxSession) error {
	if st.sfu != nil {
		return nil
	}
	return s.reg.claim(st.id, sess.SessionID, sess.ExpiresAt)
}

// playerCount is st's subscribed players less SFUs. Caller holds s.mu.
func (st *streamer) playerCount() int {
	n := 0
	for _, p := range st.players {
		if p.sfu == nil {
			n++
		}
	}
	return n
}

// sortedPlayers is st's players in player id order (ids count up from one
// counter, so this is connection order), for a deterministic order of
// playerDisconnected messages. Caller holds s.mu.
func sortedPlayers(st *streamer) []*player {
	ps := make([]*player, 0, len(st.players))
	for _, p := range st.players {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *player) int {
		if c := cmp.Compare(len(a.id), len(b.id)); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	return ps
}
