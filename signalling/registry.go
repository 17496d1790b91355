package signalling

// Streamer registry: the live fleet as the matchmaker sees it.
//
// API (for signalling/matchmaker; everything is safe for concurrent use):
//
//	reg := srv.Registry()                       // *Registry of a *Server
//	reg.Snapshot() []StreamerInfo               // every identified streamer, registration order
//	reg.Get(id) (StreamerInfo, bool)
//	reg.Counts() map[string]POPCounts           // pop -> {Idle, Leased, Streaming}
//	reg.LeaseIdle(pop, codec, sessionID, until) (StreamerInfo, error)
//	    // atomically picks an idle streamer in pop that advertises codec
//	    // ("" = any) and leases it to sessionID until `until`; the one idle
//	    // longest wins (ties: registration order). A session that already
//	    // holds a matching lease gets it back (idempotent retry).
//	    // Errors: ErrNoIdleStreamer, ErrSessionLeased.
//	reg.Lease(streamerID, sessionID, until) error
//	    // idle -> leased for one named streamer. Re-leasing to the same
//	    // session extends it. Errors: ErrUnknownStreamer, ErrNotIdle.
//	reg.Release(sessionID) error                // drop the lease; ErrUnknownSession
//
// StreamerInfo{ID, POP, Codecs, State, Players, SessionID, LeaseUntil,
// ConnectedAt}; State is StateIdle, StateLeased or StateStreaming.
//
// States are derived, never stored: a streamer with a subscribed player is
// streaming; else one with a lease whose until is in the future is leased;
// else it is idle. So a lease not used before its until returns the
// streamer to idle by itself (lazily, on the next read, with Deps.Now), and
// no sweeper is needed. When the last player leaves a leased streamer the
// lease is kept for Config.LeaseGrace from then (Epic's frontend reconnects
// after 2 s) and then lapses the same way. In token mode a player's subscribe claims
// the lease: it succeeds when the streamer is leased to the player's
// session, or is idle (the signed token is proof of a match); it fails when
// another session holds it.
//
// Streamers register when they are identified (endpointIdConfirm) with the
// POP and codecs from their streamer token's claims, else from the streamer
// URL's query (?pop=us-east-1&codecs=H264,AV1), else Config.DefaultPOP and
// Config.DefaultCodecs. A rename keeps the entry (and its lease); a
// disconnect removes it.
//
// All state sits behind the registryStore interface: memStore on a single
// edge, redisStore (redisstore.go: a hash per streamer, LeaseIdle as one
// Lua script) when Deps.Cluster makes the Server one edge of a fleet.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// StreamerState is where a streamer is in its lease lifecycle.
type StreamerState string

// Streamer states (also the "state" label of egbe_pxstream_streamers).
const (
	StateIdle      StreamerState = "idle"
	StateLeased    StreamerState = "leased"
	StateStreaming StreamerState = "streaming"
)

// StreamerInfo is one registered (identified) streamer.
type StreamerInfo struct {
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
func (i StreamerInfo) HasCodec(codec string) bool {
	if codec == "" {
		return true
	}
	for _, c := range i.Codecs {
		if strings.EqualFold(c, codec) {
			return true
		}
	}
	return false
}

// POPCounts counts one POP's streamers by state.
type POPCounts struct {
	Idle, Leased, Streaming int
}

// Total is the number of registered streamers in the POP.
func (c POPCounts) Total() int { return c.Idle + c.Leased + c.Streaming }

// registryStore is the registry's state. Each method is one atomic step (one
// Lua script in a Redis store).
type registryStore interface {
	// fleet side
	add(e entry) error
	remove(id string)
	rename(oldID, newID string) error
	// joined/left count players; left starts the reconnect grace.
	joined(id string) error
	left(id string, now time.Time, grace time.Duration)
	claim(id, sessionID string, now, until time.Time) error
	// matchmaker side
	lease(id, sessionID string, now, until time.Time) error
	leaseIdle(pop, codec, sessionID string, now, until time.Time) (StreamerInfo, error)
	release(sessionID string, now time.Time) error
	snapshot(now time.Time) []StreamerInfo
	get(id string, now time.Time) (StreamerInfo, bool)
}

var _ registryStore = (*memStore)(nil)

// Registry is the streamer registry of one Server. The zero value is not
// usable; a Server makes its own (Server.Registry).
type Registry struct {
	st    registryStore    // immutable after newRegistry
	now   func() time.Time // immutable after newRegistry
	grace time.Duration    // immutable after newRegistry
}

func newRegistry(now func() time.Time, grace time.Duration) *Registry {
	return &Registry{st: newMemStore(), now: now, grace: grace}
}

// Snapshot returns every identified streamer in registration order.
func (r *Registry) Snapshot() []StreamerInfo { return r.st.snapshot(r.now()) }

// Get returns one streamer by its committed id.
func (r *Registry) Get(id string) (StreamerInfo, bool) { return r.st.get(id, r.now()) }

// Counts returns streamers by POP and state.
func (r *Registry) Counts() map[string]POPCounts {
	out := make(map[string]POPCounts)
	for _, s := range r.Snapshot() {
		c := out[s.POP]
		switch s.State {
		case StateIdle:
			c.Idle++
		case StateLeased:
			c.Leased++
		case StateStreaming:
			c.Streaming++
		}
		out[s.POP] = c
	}
	return out
}

// Lease leases one named idle streamer to sessionID until until. Leasing a
// streamer already leased to sessionID extends the lease.
func (r *Registry) Lease(streamerID, sessionID string, until time.Time) error {
	if sessionID == "" {
		return fmt.Errorf("%w: empty session id", ErrBadLease)
	}
	return r.st.lease(streamerID, sessionID, r.now(), until)
}

// LeaseIdle atomically picks an idle streamer in pop advertising codec (""
// = any) and leases it to sessionID until until.
func (r *Registry) LeaseIdle(pop, codec, sessionID string, until time.Time) (StreamerInfo, error) {
	if sessionID == "" {
		return StreamerInfo{}, fmt.Errorf("%w: empty session id", ErrBadLease)
	}
	return r.st.leaseIdle(pop, codec, sessionID, r.now(), until)
}

// Release drops sessionID's lease. A streamer with players stays streaming
// until they leave, then is idle.
func (r *Registry) Release(sessionID string) error { return r.st.release(sessionID, r.now()) }

// entry is one streamer's registry record.
type entry struct {
	info       StreamerInfo // State is derived on read
	seq        uint64       // registration order
	idleSince  time.Time
	sessionID  string
	leaseUntil time.Time
}

func (e *entry) state(now time.Time) StreamerState {
	switch {
	case e.info.Players > 0:
		return StateStreaming
	case e.sessionID != "" && now.Before(e.leaseUntil):
		return StateLeased
	}
	return StateIdle
}

// expire drops a lapsed lease; it returns e's state.
func (m *memStore) expire(e *entry, now time.Time) StreamerState {
	st := e.state(now)
	if st == StateIdle && e.sessionID != "" {
		if m.session[e.sessionID] == e.info.ID {
			delete(m.session, e.sessionID)
		}
		e.idleSince = e.leaseUntil
		e.sessionID, e.leaseUntil = "", time.Time{}
	}
	return st
}

func (m *memStore) view(e *entry, now time.Time) StreamerInfo {
	i := e.info
	i.State = m.expire(e, now)
	i.SessionID, i.LeaseUntil = e.sessionID, e.leaseUntil
	i.Codecs = slices.Clone(i.Codecs)
	return i
}

// memStore is the in-memory registryStore.
type memStore struct {
	mu      sync.Mutex
	byID    map[string]*entry // guarded by mu
	session map[string]string // session id -> streamer id; guarded by mu
	seq     uint64            // guarded by mu
}

func newMemStore() *memStore {
	return &memStore{byID: make(map[string]*entry), session: make(map[string]string)}
}

func (m *memStore) add(e entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[e.info.ID]; ok {
		return fmt.Errorf("%w: %s", ErrStreamerExists, e.info.ID)
	}
	m.seq++
	e.seq = m.seq
	e.idleSince = e.info.ConnectedAt
	m.byID[e.info.ID] = &e
	return nil
}

func (m *memStore) remove(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[id]
	if !ok {
		return
	}
	if e.sessionID != "" {
		delete(m.session, e.sessionID)
	}
	delete(m.byID, id)
}

func (m *memStore) rename(oldID, newID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[oldID]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownStreamer, oldID)
	}
	if _, ok := m.byID[newID]; ok && newID != oldID {
		return fmt.Errorf("%w: %s", ErrStreamerExists, newID)
	}
	delete(m.byID, oldID)
	e.info.ID = newID
	m.byID[newID] = e
	if e.sessionID != "" {
		m.session[e.sessionID] = newID
	}
	return nil
}

func (m *memStore) joined(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[id]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownStreamer, id)
	}
	e.info.Players++
	return nil
}

func (m *memStore) left(id string, now time.Time, grace time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[id]
	if !ok || e.info.Players == 0 {
		return
	}
	e.info.Players--
	if e.info.Players > 0 {
		return
	}
	e.idleSince = now
	if e.sessionID != "" {
		e.leaseUntil = now.Add(grace) // time to reconnect, no more
	}
}

// claim is a token-mode subscribe: the lease must be sessionID's, or the
// streamer idle (then it is leased to sessionID until until).
func (m *memStore) claim(id, sessionID string, now, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[id]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownStreamer, id)
	}
	st := m.expire(e, now)
	if e.sessionID == sessionID {
		if until.After(e.leaseUntil) {
			e.leaseUntil = until
		}
		return nil
	}
	if st != StateIdle {
		return fmt.Errorf("%w: %s is %s", ErrNotIdle, id, st)
	}
	return m.setLease(e, sessionID, until)
}

func (m *memStore) setLease(e *entry, sessionID string, until time.Time) error {
	if other, ok := m.session[sessionID]; ok && other != e.info.ID {
		if o := m.byID[other]; o != nil && o.sessionID == sessionID {
			return fmt.Errorf("%w: %s holds %s", ErrSessionLeased, sessionID, other)
		}
	}
	e.sessionID, e.leaseUntil = sessionID, until
	m.session[sessionID] = e.info.ID
	return nil
}

func (m *memStore) lease(id, sessionID string, now, until time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[id]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownStreamer, id)
	}
	st := m.expire(e, now)
	if e.sessionID == sessionID {
		e.leaseUntil = until
		return nil
	}
	if st != StateIdle {
		return fmt.Errorf("%w: %s is %s", ErrNotIdle, id, st)
	}
	return m.setLease(e, sessionID, until)
}

func (m *memStore) leaseIdle(pop, codec, sessionID string, now, until time.Time) (StreamerInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id, ok := m.session[sessionID]; ok {
		if e := m.byID[id]; e != nil && e.sessionID == sessionID && m.expire(e, now) != StateIdle {
			if e.info.POP == pop && e.info.HasCodec(codec) {
				if e.info.Players == 0 {
					e.leaseUntil = until
				}
				return m.view(e, now), nil
			}
			return StreamerInfo{}, fmt.Errorf("%w: %s holds %s", ErrSessionLeased, sessionID, id)
		}
	}
	var best *entry
	for _, e := range m.byID {
		if e.info.POP != pop || !e.info.HasCodec(codec) || m.expire(e, now) != StateIdle {
			continue
		}
		if best == nil || e.idleSince.Before(best.idleSince) ||
			(e.idleSince.Equal(best.idleSince) && e.seq < best.seq) {
			best = e
		}
	}
	if best == nil {
		return StreamerInfo{}, fmt.Errorf("%w: pop %q codec %q", ErrNoIdleStreamer, pop, codec)
	}
	if err := m.setLease(best, sessionID, until); err != nil {
		return StreamerInfo{}, err
	}
	return m.view(best, now), nil
}

func (m *memStore) release(sessionID string, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.session[sessionID]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownSession, sessionID)
	}
	delete(m.session, sessionID)
	if e := m.byID[id]; e != nil && e.sessionID == sessionID {
		e.sessionID, e.leaseUntil = "", time.Time{}
		if e.info.Players == 0 {
			e.idleSince = now
		}
	}
	return nil
}

func (m *memStore) snapshot(now time.Time) []StreamerInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	es := make([]*entry, 0, len(m.byID))
	for _, e := range m.byID {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *entry) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]StreamerInfo, len(es))
	for i, e := range es {
		out[i] = m.view(e, now)
	}
	return out
}

func (m *memStore) get(id string, now time.Time) (StreamerInfo, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[id]
	if !ok {
		return StreamerInfo{}, false
	}
	return m.view(e, now), true
}
