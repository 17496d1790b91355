package state

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// StreamerState is where a streamer is in its lease lifecycle.
type StreamerState string

// Streamer states. They are derived, never stored: a streamer with a
// player is streaming; else one with a lease whose until is in the future
// is leased; else it is idle.
const (
	StreamerIdle      StreamerState = "idle"
	StreamerLeased    StreamerState = "leased"
	StreamerStreaming StreamerState = "streaming"
)

// Streamer is one registered Pixel Streaming streamer.
type Streamer struct {
	ID          string        `json:"id"`
	POP         string        `json:"pop"`
	Codecs      []string      `json:"codecs"` // upper case: H264, VP8, VP9, AV1
	State       StreamerState `json:"state"`
	Players     int           `json:"players"`
	SessionID   string        `json:"session_id,omitempty"` // lease holder, if any
	LeaseUntil  time.Time     `json:"lease_until,omitzero"`
	ConnectedAt time.Time     `json:"connected_at"`
}

// HasCodec reports whether the streamer advertises codec (case-insensitive;
// "" matches any).
func (s Streamer) HasCodec(codec string) bool {
	if codec == "" {
		return true
	}
	for _, c := range s.Codecs {
		if strings.EqualFold(c, codec) {
			return true
		}
	}
	return false
}

// FleetStreamer is a Streamer and the edge its socket is on.
type FleetStreamer struct {
	Streamer
	Edge string
}

// StreamerReg is one edge's registration of one of its streamers, as Sync
// stores it: state, not an operation, so the same registration is also
// the heartbeat that keeps it, and re-registers it in a store that lost it.
type StreamerReg struct {
	ID          string
	Was         string // the id the store knows it by, when renamed since the last sync
	POP         string
	Codecs      []string  // upper case
	ConnectedAt time.Time // tells two registrations of one id apart (ms precision)
	Players     int
}

// StreamerKey names one registration to remove: only the connection that
// made it (its edge and ConnectedAt) removes it.
type StreamerKey struct {
	ID          string
	ConnectedAt time.Time
}

// StreamerSync is what one edge holds, for Sync.
type StreamerSync struct {
	Edge string
	Up   []StreamerReg
	Gone []StreamerKey
	Now  time.Time
	// TTL: a registration lapses TTL after its last sync, by the store's
	// clock (0: never; one edge in memory).
	TTL time.Duration
	// Grace: when a leased streamer's last player leaves, its lease is kept
	// this long from then (the player's reconnect), then lapses.
	Grace time.Duration
}

// LeaseMode is what a StreamerLease asks for.
type LeaseMode uint8

const (
	// LeaseNamed leases the idle streamer ID; leasing one already leased to
	// the same session sets its until.
	LeaseNamed LeaseMode = iota
	// LeaseClaim is a token-mode subscribe: the lease must be the
	// session's (it is only ever extended), or the streamer idle (it is
	// then leased to the session; the signed token is proof of a match).
	LeaseClaim
	// LeaseAnyIdle picks the idle streamer in POP advertising Codec (""
	// any) that has been idle longest (ties: registration order). A session
	// that already holds a matching lease gets it back (its until set).
	LeaseAnyIdle
)

// StreamerLease is one lease request.
type StreamerLease struct {
	Mode       LeaseMode
	ID         string // LeaseNamed, LeaseClaim
	POP, Codec string // LeaseAnyIdle
	SessionID  string
	Until      time.Time
}

// Streamers is the fleet's streamer registry (README of signalling,
// "Fleet"). The edges hold the streamers' sockets and Sync what they hold;
// any edge's matchmaker leases from the whole fleet. Each method is one
// atomic step (one Lua script on Redis); times are the caller's clock
// (injected), never the store's, so leases lapse the same everywhere.
// Errors: ErrUnknownStreamer, ErrNotIdle, ErrSessionLeased,
// ErrNoIdleStreamer, ErrUnknownSession, ErrBadArgument, ErrUnavailable.
type Streamers interface {
	// Sync registers or refreshes s.Up and removes s.Gone, for s.Edge. It
	// returns the ids of s.Up another edge holds (by id: that edge), which
	// stay out of the registry until that edge lets them go.
	Sync(ctx context.Context, s StreamerSync) (taken map[string]string, err error)
	// Lease leases a streamer to l.SessionID until l.Until and returns it.
	Lease(ctx context.Context, l StreamerLease, now time.Time) (Streamer, error)
	// Release drops sessionID's lease; a streamer with players stays
	// streaming until they leave.
	Release(ctx context.Context, sessionID string, now time.Time) error
	// List returns every registered streamer, in registration order.
	List(ctx context.Context, now time.Time) ([]FleetStreamer, error)
	// Get returns one streamer; ok is false when it is not registered.
	Get(ctx context.Context, id string, now time.Time) (s FleetStreamer, ok bool, err error)
}

// Bounds a store enforces on what it is given.
const (
	maxStreamerIDBytes = 256 // a streamer id (Epic's endpointId)
	maxPOPBytes        = 64
)

// CheckStreamerLease refuses a lease without a session or of an unknown
// mode.
func CheckStreamerLease(l StreamerLease) error {
	switch {
	case l.SessionID == "":
		return fmt.Errorf("%w: empty session id", ErrBadArgument)
	case l.Mode > LeaseAnyIdle:
		return fmt.Errorf("%w: lease mode %d", ErrBadArgument, l.Mode)
	}
	return nil
}

// CheckStreamerSync refuses a sync of a malformed edge id or an
// out-of-bounds registration.
func CheckStreamerSync(s StreamerSync) error {
	if err := CheckEdgeID(s.Edge); err != nil {
		return err
	}
	for _, u := range s.Up {
		if u.ID == "" || len(u.ID) > maxStreamerIDBytes || len(u.Was) > maxStreamerIDBytes || len(u.POP) > maxPOPBytes {
			return fmt.Errorf("%w: streamer registration %q (pop %q)", ErrBadArgument, u.ID, u.POP)
		}
	}
	return nil
}

// ---- memory ----

// memStreamer is one registration in MemoryStreamers.
type memStreamer struct {
	info       Streamer // State is derived on read
	edge       string
	conn       int64 // ConnectedAt, Unix ms
	seq        uint64
	idleSince  time.Time
	sessionID  string
	leaseUntil time.Time
	expires    time.Time // zero: never
}

func (e *memStreamer) state(now time.Time) StreamerState {
	switch {
	case e.info.Players > 0:
		return StreamerStreaming
	case e.sessionID != "" && now.Before(e.leaseUntil):
		return StreamerLeased
	}
	return StreamerIdle
}

// MemoryStreamers is the in-process Streamers: one edge, or several edges
// of one test sharing it.
type MemoryStreamers struct {
	now func() time.Time // immutable: the store's clock (registration TTLs)

	mu      sync.Mutex
	byID    map[string]*memStreamer // guarded by mu
	session map[string]string       // guarded by mu: session id -> streamer id
	seq     uint64                  // guarded by mu
}

var _ Streamers = (*MemoryStreamers)(nil)

// NewMemoryStreamers returns an empty registry; now (nil: time.Now) is
// the store's clock, which registration TTLs follow (leases follow the
// caller's).
func NewMemoryStreamers(now func() time.Time) *MemoryStreamers {
	if now == nil {
		now = time.Now
	}
	return &MemoryStreamers{now: now, byID: map[string]*memStreamer{}, session: map[string]string{}}
}

// getLocked returns id's live registration (a lapsed one is dropped).
func (m *MemoryStreamers) getLocked(id string, _ time.Time) *memStreamer {
	e := m.byID[id]
	if e != nil && !e.expires.IsZero() && !m.now().Before(e.expires) {
		m.dropLocked(e)
		return nil
	}
	return e
}

func (m *MemoryStreamers) dropLocked(e *memStreamer) {
	if e.sessionID != "" && m.session[e.sessionID] == e.info.ID {
		delete(m.session, e.sessionID)
	}
	delete(m.byID, e.info.ID)
}

// expireLocked drops e's lapsed lease; it returns e's state.
func (m *MemoryStreamers) expireLocked(e *memStreamer, now time.Time) StreamerState {
	st := e.state(now)
	if st == StreamerIdle && e.sessionID != "" {
		if m.session[e.sessionID] == e.info.ID {
			delete(m.session, e.sessionID)
		}
		e.idleSince = e.leaseUntil
		e.sessionID, e.leaseUntil = "", time.Time{}
	}
	return st
}

func (m *MemoryStreamers) viewLocked(e *memStreamer, now time.Time) FleetStreamer {
	i := e.info
	i.State = m.expireLocked(e, now)
	i.SessionID, i.LeaseUntil = e.sessionID, e.leaseUntil
	i.Codecs = slices.Clone(i.Codecs)
	return FleetStreamer{Streamer: i, Edge: e.edge}
}

// Sync implements Streamers.
func (m *MemoryStreamers) Sync(_ context.Context, s StreamerSync) (map[string]string, error) {
	if err := CheckStreamerSync(s); err != nil {
		return nil, err
	}
	now := s.Now
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, g := range s.Gone {
		if e := m.getLocked(g.ID, now); e != nil && e.edge == s.Edge && e.conn == g.ConnectedAt.UnixMilli() {
			m.dropLocked(e)
		}
	}
	var taken map[string]string
	for _, u := range s.Up {
		conn := u.ConnectedAt.UnixMilli()
		if u.Was != "" && u.Was != u.ID && m.getLocked(u.ID, now) == nil {
			if o := m.getLocked(u.Was, now); o != nil && o.edge == s.Edge && o.conn == conn {
				delete(m.byID, u.Was)
				o.info.ID = u.ID
				m.byID[u.ID] = o
				if o.sessionID != "" && m.session[o.sessionID] == u.Was {
					m.session[o.sessionID] = u.ID
				}
			}
		}
		e := m.getLocked(u.ID, now)
		if e != nil && e.edge != s.Edge {
			if taken == nil {
				taken = map[string]string{}
			}
			taken[u.ID] = e.edge
			continue
		}
		if e != nil && e.conn != conn {
			m.dropLocked(e) // the same id from a new connection: a new registration
			e = nil
		}
		if e == nil {
			m.seq++
			at := time.UnixMilli(conn)
			e = &memStreamer{info: Streamer{ID: u.ID, POP: u.POP, Codecs: slices.Clone(u.Codecs), ConnectedAt: at},
				edge: s.Edge, conn: conn, seq: m.seq, idleSince: at}
			m.byID[u.ID] = e
		} else if e.info.Players > 0 && u.Players == 0 {
			e.idleSince = now
			if e.sessionID != "" {
				e.leaseUntil = now.Add(s.Grace) // time to reconnect, no more
			}
		}
		e.info.Players = u.Players
		e.expires = time.Time{}
		if s.TTL > 0 {
			e.expires = m.now().Add(s.TTL)
		}
	}
	return taken, nil
}

func (m *MemoryStreamers) setLeaseLocked(e *memStreamer, sessionID string, until, now time.Time) error {
	if other, ok := m.session[sessionID]; ok && other != e.info.ID {
		if o := m.getLocked(other, now); o != nil {
			if m.expireLocked(o, now); o.sessionID == sessionID {
				return fmt.Errorf("%w: %s holds %s", ErrSessionLeased, sessionID, other)
			}
		}
	}
	e.sessionID, e.leaseUntil = sessionID, until
	m.session[sessionID] = e.info.ID
	return nil
}

// Lease implements Streamers.
func (m *MemoryStreamers) Lease(_ context.Context, l StreamerLease, now time.Time) (Streamer, error) {
	if err := CheckStreamerLease(l); err != nil {
		return Streamer{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l.Mode == LeaseAnyIdle {
		return m.leaseIdleLocked(l, now)
	}
	e := m.getLocked(l.ID, now)
	if e == nil {
		return Streamer{}, fmt.Errorf("%w: %s", ErrUnknownStreamer, l.ID)
	}
	st := m.expireLocked(e, now)
	if e.sessionID == l.SessionID {
		if l.Mode == LeaseNamed || l.Until.After(e.leaseUntil) {
			e.leaseUntil = l.Until
		}
		return m.viewLocked(e, now).Streamer, nil
	}
	if st != StreamerIdle {
		return Streamer{}, fmt.Errorf("%w: %s is %s", ErrNotIdle, l.ID, st)
	}
	if err := m.setLeaseLocked(e, l.SessionID, l.Until, now); err != nil {
		return Streamer{}, err
	}
	return m.viewLocked(e, now).Streamer, nil
}

func (m *MemoryStreamers) leaseIdleLocked(l StreamerLease, now time.Time) (Streamer, error) {
	if id, ok := m.session[l.SessionID]; ok {
		if e := m.getLocked(id, now); e != nil && e.sessionID == l.SessionID && m.expireLocked(e, now) != StreamerIdle {
			if e.info.POP == l.POP && e.info.HasCodec(l.Codec) {
				if e.info.Players == 0 {
					e.leaseUntil = l.Until
				}
				return m.viewLocked(e, now).Streamer, nil
			}
			return Streamer{}, fmt.Errorf("%w: %s holds %s", ErrSessionLeased, l.SessionID, id)
		}
	}
	var best *memStreamer
	for id := range m.byID {
		e := m.getLocked(id, now)
		if e == nil || e.info.POP != l.POP || !e.info.HasCodec(l.Codec) || m.expireLocked(e, now) != StreamerIdle {
			continue
		}
		if best == nil || e.idleSince.Before(best.idleSince) ||
			(e.idleSince.Equal(best.idleSince) && e.seq < best.seq) {
			best = e
		}
	}
	if best == nil {
		return Streamer{}, fmt.Errorf("%w: pop %q codec %q", ErrNoIdleStreamer, l.POP, l.Codec)
	}
	if err := m.setLeaseLocked(best, l.SessionID, l.Until, now); err != nil {
		return Streamer{}, err
	}
	return m.viewLocked(best, now).Streamer, nil
}

// Release implements Streamers.
func (m *MemoryStreamers) Release(_ context.Context, sessionID string, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.session[sessionID]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownSession, sessionID)
	}
	delete(m.session, sessionID)
	if e := m.getLocked(id, now); e != nil && e.sessionID == sessionID {
		e.sessionID, e.leaseUntil = "", time.Time{}
		if e.info.Players == 0 {
			e.idleSince = now
		}
	}
	return nil
}

// List implements Streamers.
func (m *MemoryStreamers) List(_ context.Context, now time.Time) ([]FleetStreamer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	es := make([]*memStreamer, 0, len(m.byID))
	for id := range m.byID {
		if e := m.getLocked(id, now); e != nil {
			es = append(es, e)
		}
	}
	slices.SortFunc(es, func(a, b *memStreamer) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]FleetStreamer, len(es))
	for i, e := range es {
		out[i] = m.viewLocked(e, now)
	}
	return out, nil
}

// Get implements Streamers.
func (m *MemoryStreamers) Get(_ context.Context, id string, now time.Time) (FleetStreamer, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.getLocked(id, now)
	if e == nil {
		return FleetStreamer{}, false, nil
	}
	return m.viewLocked(e, now), true, nil
}
