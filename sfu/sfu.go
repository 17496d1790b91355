package sfu

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/iceport"
	"github.com/oshun/egbe-edge/state"
)

// SessionInfo is what the SFU needs to know about a live realtime session.
type SessionInfo struct {
	Subject    string // the access token subject that owns the session
	InstanceID string // the world instance: the default voice room
	EntityID   uint32 // the session's avatar entity (mute lists name it)
	Region     string
}

// Sessions looks up live realtime sessions (wired by edge to the realtime
// session layer).
type Sessions interface {
	VoiceSession(sessionID string) (SessionInfo, bool)
}

// Notifier delivers voice events to a client over its realtime session. It
// must not block; false means the event was not queued.
type Notifier interface {
	SendVoiceEvent(sessionID string, ev *codec.VoiceEvent) bool
}

// corker brackets a burst of writes on the ICE port (iceport.Port).
type corker interface {
	Cork()
	Uncork()
}

// Deps are the SFU's collaborators.
type Deps struct {
	Port       *iceport.Port // the shared ICE-lite UDP port (required)
	Signer     *auth.Signer  // verifies access tokens (required)
	Sessions   Sessions      // required
	Notifier   Notifier      // optional
	Logger     *slog.Logger  // optional
	Now        func() time.Time
	Registerer prometheus.Registerer // optional (a private registry)
	// Rooms pins each voice room to one edge of a fleet (rooms.go).
	// Optional: nil means every room lives here.
	Rooms state.VoiceRooms
	// ICEServers, when set, gives the join answer's ice_servers
	// ({"iceServers":[...]}, TURN credentials) for the access token's
	// subject and expiry and the Host the request reached. Optional.
	ICEServers func(subject string, tokenExpiry time.Time, host string) json.RawMessage
}

// SFU is the voice selective forwarding unit.
type SFU struct {
	cfg  Config           // immutable after New
	deps Deps             // immutable after New
	log  *slog.Logger     // immutable after New
	now  func() time.Time // immutable after New
	api  *webrtc.API      // immutable after New
	m    *metrics         // immutable after New
	port corker           // immutable after New: Deps.Port (nil in unit tests)

	mu      sync.Mutex
	members map[string]*member        // guarded by mu; by session id
	peers   map[string]*peer          // guarded by mu; by voice peer id
	rooms   map[string]map[*peer]bool // guarded by mu; room -> peers
	dirty   map[string]bool           // guarded by mu; rooms to recompute
	joining map[string]int            // guarded by mu; room -> joins past claimRoom
	closed  bool                      // guarded by mu
	cands   []candidate               // guarded by mu; scratch
	flagged map[*peer][2]bool         // guarded by mu; latency, loss
	scratch []*peer                   // owned by Run
	samples []Quality                 // owned by Run

	kick chan struct{} // cap 1: dirty rooms exist
	wg   sync.WaitGroup
}

// New builds an SFU. Run drives its timers; Handler serves joins.
func New(cfg Config, d Deps) (*SFU, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Port == nil || d.Signer == nil || d.Sessions == nil {
		return nil, fmt.Errorf("%w: Port, Signer and Sessions are required", ErrConfig)
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
	m, err := newMetrics(d.Registerer)
	if err != nil {
		return nil, fmt.Errorf("sfu: metrics: %w", err)
	}
	api, err := newAPI(d.Port)
	if err != nil {
		return nil, err
	}
	s := &SFU{
		cfg: cfg, deps: d, log: d.Logger.With("component", "sfu"), now: d.Now, api: api, m: m,
		members: make(map[string]*member),
		peers:   make(map[string]*peer),
		rooms:   make(map[string]map[*peer]bool),
		dirty:   make(map[string]bool),
		joining: make(map[string]int),
		flagged: make(map[*peer][2]bool),
		kick:    make(chan struct{}, 1),
	}
	s.port = d.Port
	return s, nil
}

// newAPI builds the voice webrtc.API: Opus and the RFC 6464 audio-level
// extension only, no interceptors (the SFU does voice RTCP itself,
// quality.go), on the shared ICE-lite port with voice's ICE timers.
func newAPI(port *iceport.Port) (*webrtc.API, error) {
	me := &webrtc.MediaEngine{}
	opus := opusCodec
	opus.PayloadType = 111
	if err := me.RegisterCodec(opus, webrtc.RTPCodecTypeAudio); err != nil {
		return nil, fmt.Errorf("sfu: register opus: %w", err)
	}
	if err := me.RegisterHeaderExtension(webrtc.RTPHeaderExtensionCapability{URI: sdp.AudioLevelURI},
		webrtc.RTPCodecTypeAudio); err != nil {
		return nil, fmt.Errorf("sfu: register audio level: %w", err)
	}
	se := port.SettingEngine()
	// The edge is ICE-lite: the client (a full agent) runs the checks and
	// consent freshness (RFC 7675: a binding request every ~5 s), so the
	// edge's agent sends no keepalives of its own (0) and only needs to
	// notice a client gone quiet: disconnected after 12 s without a
	// packet, failed (the peer leaves) 18 s later, the same 30 s pion's
	// defaults give, with one agent wake-up every 12 s instead of 2 s.
	se.SetICETimeouts(iceDisconnected, iceFailed, 0)
	return webrtc.NewAPI(webrtc.WithMediaEngine(me), webrtc.WithInterceptorRegistry(&interceptor.Registry{}),
		webrtc.WithSettingEngine(se)), nil
}

// ICE timers of voice peers (see newAPI).
const (
	iceDisconnected = 12 * time.Second
	iceFailed       = 18 * time.Second
)

// Run drives recomputation of rooms marked dirty (movement, speaking
// changes), speaking timeouts, voice RTCP and quality sampling, until ctx
// is done.
func (s *SFU) Run(ctx context.Context) error {
	stats := time.NewTicker(s.cfg.StatsInterval)
	defer stats.Stop()
	silence := time.NewTicker(s.cfg.SilenceAfter / 3)
	defer silence.Stop()
	reports := time.NewTicker(s.cfg.ReportInterval)
	defer reports.Stop()
	var heartbeat <-chan time.Time
	if s.deps.Rooms != nil {
		t := time.NewTicker(s.cfg.RoomHeartbeat)
		defer t.Stop()
		heartbeat = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-heartbeat:
			s.heartbeatRooms(ctx)
		case <-s.kick:
			s.recomputeDirty()
		case <-silence.C:
			s.checkSilence()
		case <-stats.C:
			s.sampleQuality()
		case <-reports.C:
			s.sendReports()
		}
	}
}

// Close leaves every peer and waits for their goroutines.
func (s *SFU) Close() error {
	s.mu.Lock()
	s.closed = true
	peers := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		peers = append(peers, p)
	}
	rooms := make([]string, 0, len(s.rooms))
	for r := range s.rooms {
		rooms = append(rooms, r)
	}
	s.mu.Unlock()
	for _, p := range peers {
		s.leave(p)
	}
	// Hand the rooms back at once so that clients re-joining on other
	// edges need not wait for this edge's heartbeats to lapse.
	if s.deps.Rooms != nil && len(rooms) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		for _, r := range rooms {
			if err := s.deps.Rooms.Release(ctx, r); err != nil {
				s.log.Warn("voice room release at close failed", "room", r, "err", err)
				break
			}
		}
		cancel()
	}
	s.wg.Wait()
	return nil
}

// UpdatePosition records a session's avatar position (millimetres). A move
// beyond MoveThresholdMM since the last recompute marks its room dirty.
func (s *SFU) UpdatePosition(sessionID string, x, y, z int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.memberLocked(sessionID)
	m.pos, m.hasPos = [3]int32{x, y, z}, true
	if m.peer == nil {
		return
	}
	d := [3]int64{int64(x) - int64(m.rankedPos[0]), int64(y) - int64(m.rankedPos[1]), int64(z) - int64(m.rankedPos[2])}
	t := s.cfg.MoveThresholdMM
	if d[0]*d[0]+d[1]*d[1]+d[2]*d[2] >= t*t {
		s.markDirtyLocked(m.peer.room)
	}
}

// Control applies a mute/unmute or squad join/leave from the realtime
// session. The affected room is recomputed before Control returns, so the
// change is in effect for the next packet (well within one 20 ms frame).
// A client's mistake is a *codec.WireError with a client code
// (voice_control_invalid, voice_control_limit) wrapping ErrBadControl or
// ErrLimit; nothing changes and the session goes on.
func (s *SFU) Control(sessionID string, c *codec.VoiceControl) error {
	if c == nil || c.GetOp() == nil {
		return controlError(ErrBadControl, "voice control without an operation")
	}
	s.mu.Lock()
	m := s.memberLocked(sessionID)
	var err error
	switch op := c.GetOp().(type) {
	case *codec.VoiceControl_MuteEntityId:
		switch {
		case op.MuteEntityId == 0:
			err = controlError(ErrBadControl, "mute of entity 0")
		case len(m.muted) >= s.cfg.MaxMutes:
			err = controlError(ErrLimit, "more than %d muted entities", s.cfg.MaxMutes)
		default:
			if m.muted == nil {
				m.muted = make(map[uint32]struct{})
			}
			m.muted[op.MuteEntityId] = struct{}{}
		}
	case *codec.VoiceControl_UnmuteEntityId:
		delete(m.muted, op.UnmuteEntityId)
	case *codec.VoiceControl_JoinSquad:
		_, member := m.squads[op.JoinSquad]
		switch {
		case op.JoinSquad == "" || len(op.JoinSquad) > maxSquadID:
			err = controlError(ErrBadControl, "squad id of %d bytes (1 to %d)", len(op.JoinSquad), maxSquadID)
		case !member && len(m.squads) >= s.cfg.MaxSquads:
			err = controlError(ErrLimit, "more than %d squads", s.cfg.MaxSquads)
		default:
			if m.squads == nil {
				m.squads = make(map[string]struct{})
			}
			m.squads[op.JoinSquad] = struct{}{}
		}
	case *codec.VoiceControl_LeaveSquad:
		delete(m.squads, op.LeaveSquad)
	default:
		err = controlError(ErrBadControl, "unknown voice control operation")
	}
	var evs []pendingEvent
	if err == nil && m.peer != nil {
		evs = s.recomputeLocked(m.peer.room)
	}
	s.mu.Unlock()
	s.notify(evs)
	return err
}

// maxSquadID bounds a squad id (bytes).
const maxSquadID = 128

// SessionClosed forgets a realtime session and leaves its voice peer.
func (s *SFU) SessionClosed(sessionID string) {
	s.mu.Lock()
	m := s.members[sessionID]
	delete(s.members, sessionID)
	var p *peer
	if m != nil {
		p = m.peer
	}
	s.mu.Unlock()
	if p != nil {
		s.leave(p)
	}
}

func (s *SFU) memberLocked(sessionID string) *member {
	m := s.members[sessionID]
	if m == nil {
		m = &member{sessionID: sessionID}
		s.members[sessionID] = m
	}
	return m
}

func (s *SFU) markDirtyLocked(room string) {
	s.dirty[room] = true
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *SFU) markDirty(room string) {
	s.mu.Lock()
	s.markDirtyLocked(room)
	s.mu.Unlock()
}

func (s *SFU) recomputeDirty() {
	s.mu.Lock()
	var evs []pendingEvent
	for room := range s.dirty {
		evs = append(evs, s.recomputeLocked(room)...)
		delete(s.dirty, room)
	}
	s.mu.Unlock()
	s.notify(evs)
}

// checkSilence ends "speaking" for speakers that went quiet (DTX sends
// almost nothing; a muted mic sends nothing).
func (s *SFU) checkSilence() {
	cut := s.now().Add(-s.cfg.SilenceAfter).UnixNano()
	s.mu.Lock()
	for _, p := range s.peers {
		if p.speaking.Load() && p.lastVoice.Load() < cut {
			p.speaking.Store(false)
			p.loud.Store(0)
			s.markDirtyLocked(p.room)
		}
	}
	s.mu.Unlock()
}

// pendingEvent is a voice event to send once mu is released.
type pendingEvent struct {
	sessionID string
	ev        *codec.VoiceEvent
}

func (s *SFU) notify(evs []pendingEvent) {
	if s.deps.Notifier == nil {
		return
	}
	for _, e := range evs {
		if s.deps.Notifier.SendVoiceEvent(e.sessionID, e.ev) {
			s.m.events.WithLabelValues("sent").Inc()
		} else {
			s.m.events.WithLabelValues("refused").Inc()
		}
	}
}

// recomputeLocked refills every listener's slots in room and republishes
// each speaker's subscriber list. It returns the voice events to send.
func (s *SFU) recomputeLocked(room string) []pendingEvent {
	peers := s.rooms[room]
	s.m.recomputes.Inc()
	var evs []pendingEvent
	subs := make(map[*peer][]sub, len(peers))
	for l := range peers {
		c := s.cands[:0]
		if len(l.slots) > 0 {
			for sp := range peers {
				if cand, ok := s.eligible(l, sp); ok {
					c = append(c, cand)
				}
			}
		}
		rank(c)
		if len(c) > len(l.slots) {
			c = c[:len(l.slots)]
		}
		if n := assign(l.assigned, c); n > 0 {
			s.m.switches.Add(float64(n))
			for i, sp := range l.assigned {
				l.slots[i].cur.Store(sp)
			}
		}
		s.cands = c[:0]
		for i, sp := range l.assigned {
			if sp != nil {
				subs[sp] = append(subs[sp], sub{l: l, slot: i})
			}
		}
		if ev := l.voiceEvent(); ev != nil {
			evs = append(evs, pendingEvent{l.sessionID, ev})
		}
		l.m.rankedPos = l.m.pos
	}
	for sp := range peers {
		v := subs[sp]
		sp.subs.Store(&v)
	}
	return evs
}
