package pxsfu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// ICEPort hands out the SettingEngine of an ICE-lite answerer on one
// shared UDP port (internal/iceport.Port): the edge's --ice-udp when the
// SFU runs in-process, its own port in cmd/egbe-pxsfu.
type ICEPort interface {
	SettingEngine() webrtc.SettingEngine
}

// Deps are what an SFU uses besides its Config.
type Deps struct {
	Port ICEPort // required
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the egbe_pxsfu_* metrics (const label sfu=ID);
	// nil keeps them private.
	Registerer prometheus.Registerer
}

// SFU is one Pixel Streaming SFU. Run connects it to the signalling
// server and serves until its context ends.
type SFU struct {
	cfg  Config       // immutable after New
	log  *slog.Logger // immutable after New
	met  *metrics     // immutable after New
	port ICEPort      // immutable after New

	mu      sync.Mutex
	sess    *session           // guarded by mu: the signalling connection, nil between
	up      *upstream          // guarded by mu: the streamer, nil without one
	players map[string]*player // guarded by mu: by player id
	waiting []string           // guarded by mu: players that arrived before a streamer
	gone    map[string]bool    // guarded by mu: players dropped here (timeout) the server still has

	wg sync.WaitGroup // goroutines started by Run and its sessions
}

// New checks cfg and builds an SFU.
func New(cfg Config, d Deps) (*SFU, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Port == nil {
		return nil, fmt.Errorf("%w: an ICE port is required", ErrConfig)
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Registerer == nil {
		d.Registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(d.Registerer, cfg.ID)
	if err != nil {
		return nil, err
	}
	return &SFU{cfg: cfg, log: d.Logger.With("component", "pxsfu", "sfu", cfg.ID), met: m, port: d.Port,
		players: make(map[string]*player), gone: make(map[string]bool)}, nil
}

// Run connects to the signalling server, serves, and reconnects after
// Config.Reconnect when the socket drops, until ctx is done; then it
// closes every peer connection and returns nil.
func (s *SFU) Run(ctx context.Context) error {
	defer s.wg.Wait()
	for {
		err := s.runSession(ctx)
		s.dropStreamer(false)
		if ctx.Err() != nil {
			return nil
		}
		s.log.Info("signalling connection lost; reconnecting", "err", err, "in", s.cfg.Reconnect)
		t := time.NewTimer(s.cfg.Reconnect)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Players is the ids of the players the SFU serves, for tests and the
// ops page.
func (s *SFU) Players() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.players))
	for id := range s.players {
		ids = append(ids, id)
	}
	return ids
}

// PlayerLayer reports the layer a player is receiving (-1 before its
// first key frame) and the one it is switching to.
func (s *SFU) PlayerLayer(id string) (cur, target int, ok bool) {
	s.mu.Lock()
	p := s.players[id]
	s.mu.Unlock()
	if p == nil || p.video == nil {
		return 0, 0, false
	}
	return int(p.video.cur.Load()), int(p.video.target.Load()), true
}

// session is one signalling connection: the reader dispatches messages in
// order; one writer drains a bounded queue; a ticker drives timers.
type session struct {
	s    *SFU
	ws   *websocket.Conn
	out  chan []byte
	dead chan struct{}
	once sync.Once
	err  error // set before dead closes

	// Owned by the reader goroutine.
	committedID string
	// retryAt is when to send listStreamers again (zero: not scheduled).
	// Guarded by SFU.mu (the ticker reads it).
	retryAt time.Time
}

func (ss *session) fail(err error) {
	ss.once.Do(func() { ss.err = err; close(ss.dead) })
}

// send queues one message; a full queue drops the connection.
func (ss *session) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		ss.s.log.Error("marshal", "err", err)
		return
	}
	select {
	case ss.out <- b:
	default:
		ss.fail(ErrSendQueueFull)
	}
}

// sendMsg queues a message on the current session, if any.
func (s *SFU) sendMsg(v any) {
	s.mu.Lock()
	ss := s.sess
	s.mu.Unlock()
	if ss != nil {
		ss.send(v)
	}
}

func (s *SFU) runSession(ctx context.Context) error {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 16 << 10, WriteBufferSize: 64 << 10}
	ws, resp, err := d.DialContext(ctx, s.cfg.dialURL(), nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	ws.SetReadLimit(1 << 20)
	ss := &session{s: s, ws: ws, out: make(chan []byte, s.cfg.SendQueue), dead: make(chan struct{})}
	s.mu.Lock()
	s.sess = ss
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); ss.writeLoop(ctx) }()
	go func() { defer wg.Done(); s.tickLoop(ctx, ss) }()
	stop := context.AfterFunc(ctx, func() { _ = ws.Close() })
	var readErr error
	for {
		_, b, err := ws.ReadMessage()
		if err != nil {
			readErr = err
			break
		}
		s.dispatch(ss, b)
	}
	cancel()
	stop()
	_ = ws.Close()
	wg.Wait()
	s.mu.Lock()
	s.sess = nil
	s.mu.Unlock()
	if ss.err != nil {
		return ss.err
	}
	var ce *websocket.CloseError
	if errors.As(readErr, &ce) && ce.Code == websocket.ClosePolicyViolation {
		return fmt.Errorf("%w: %s", ErrRefused, ce.Text)
	}
	return readErr
}

func (ss *session) writeLoop(ctx context.Context) {
	defer ss.ws.Close()
	for {
		select {
		case <-ctx.Done():
			_ = ss.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
			return
		case <-ss.dead:
			return
		case b := <-ss.out:
			_ = ss.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := ss.ws.WriteMessage(websocket.TextMessage, b); err != nil {
				ss.fail(fmt.Errorf("write: %w", err))
				return
			}
		}
	}
}

// tick is the ticker's period: timers (subscribe retry, answer timeouts,
// merged key-frame requests) fire within it; layer choice runs every
// layerEvery ticks.
const (
	tick       = 100 * time.Millisecond
	layerEvery = 5
)

func (s *SFU) tickLoop(ctx context.Context, ss *session) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-ss.dead:
			return
		case now := <-t.C:
			s.mu.Lock()
			retry := !ss.retryAt.IsZero() && !now.Before(ss.retryAt)
			if retry {
				ss.retryAt = time.Time{}
			}
			up := s.up
			s.mu.Unlock()
			if retry {
				ss.send(map[string]string{"type": "listStreamers"})
			}
			s.expireOffers(now)
			if up != nil {
				up.flushKeyframes(now)
				if n%layerEvery == 0 {
					s.chooseLayers(up, now, tick*layerEvery)
				} else if up.dirty.Load() {
					s.mu.Lock()
					if s.up == up {
						s.rebuildLocked(up)
					}
					s.mu.Unlock()
				}
			}
		}
	}
}

// inbound is every field the SFU reads from server messages.
type inbound struct {
	Type            string          `json:"type"`
	PlayerID        json.RawMessage `json:"playerId"`
	SDP             string          `json:"sdp"`
	IDs             []string        `json:"ids"`
	CommittedID     string          `json:"committedId"`
	Multiplex       json.RawMessage `json:"multiplex"`
	ScalabilityMode string          `json:"scalabilityMode"`
	SpatialLayer    *int            `json:"spatialLayer"`
}

// playerKey is the string form of a playerId (string or number).
func playerKey(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return strings.TrimSpace(string(raw))
}

// truthy reads a JSON true or "true".
func truthy(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "true" || s == `"true"`
}

// dispatch handles one server message (on the session's reader).
func (s *SFU) dispatch(ss *session, b []byte) {
	var m inbound
	if err := json.Unmarshal(b, &m); err != nil {
		s.met.refuse(refuseBadMessage)
		s.log.Debug("bad message", "err", err)
		return
	}
	pid := playerKey(m.PlayerID)
	switch m.Type {
	case "identify":
		ss.send(map[string]string{"type": "endpointId", "id": s.cfg.ID})
		ss.send(map[string]string{"type": "listStreamers"})
	case "endpointIdConfirm":
		ss.committedID = m.CommittedID
		s.log.Info("identified", "committed_id", m.CommittedID)
	case "streamerList":
		s.onStreamerList(ss, m.IDs)
	case "offer":
		s.onStreamerOffer(ss, &m)
	case "streamerDisconnected":
		s.log.Info("streamer disconnected")
		s.dropStreamer(true)
	case "playerConnected":
		s.onPlayerConnected(pid)
	case "playerDisconnected":
		s.dropPlayer(pid, "left")
	case "answer":
		s.onAnswer(pid, m.SDP)
	case "layerPreference":
		if m.SpatialLayer != nil {
			s.onLayerPreference(pid, *m.SpatialLayer)
		}
	case "dataChannelRequest":
		s.onDataChannelRequest(pid)
	case "peerDataChannelsReady":
		s.onPeerDataChannelsReady(pid)
	case "config", "iceCandidate", "streamerIdChanged", "pong":
		// ICE-lite: candidates are not needed; config's ICE servers are
		// not used (the SFU is never behind NAT of its own).
	default:
		s.log.Debug("ignored message", "type", m.Type)
	}
}

// onStreamerList subscribes to the configured streamer (or the first
// listed other than this SFU), or retries after RetrySubscribe.
func (s *SFU) onStreamerList(ss *session, ids []string) {
	s.mu.Lock()
	has := s.up != nil
	s.mu.Unlock()
	if has {
		return
	}
	target := ""
	for _, id := range ids {
		if id == ss.committedID || id == s.cfg.ID {
			continue // ourselves
		}
		if s.cfg.Subscribe == "" || id == s.cfg.Subscribe {
			target = id
			break
		}
	}
	if target == "" {
		s.scheduleRetry(ss)
		return
	}
	s.log.Info("subscribing", "streamer", target)
	ss.send(map[string]string{"type": "subscribe", "streamerId": target})
}

func (s *SFU) scheduleRetry(ss *session) {
	s.mu.Lock()
	ss.retryAt = time.Now().Add(s.cfg.RetrySubscribe)
	s.mu.Unlock()
}

// dropStreamer ends the upstream and every player. notify (the streamer
// left, or its connection failed) sends stopStreaming and schedules a new
// subscription, as Epic's SFU does.
func (s *SFU) dropStreamer(notify bool) {
	s.mu.Lock()
	up := s.up
	s.up = nil
	ps := make([]*player, 0, len(s.players))
	for _, p := range s.players {
		ps = append(ps, p)
	}
	clear(s.players)
	clear(s.gone)
	s.waiting = nil
	ss := s.sess
	s.mu.Unlock()
	for _, p := range ps {
		s.closePlayer(p, nil)
	}
	if up != nil {
		up.close()
		s.met.upstream.Set(0)
	}
	if notify && ss != nil {
		ss.send(map[string]string{"type": "stopStreaming"})
		s.scheduleRetry(ss)
	}
}
