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
// All state sits in a state.Streamers (state/streamers.go): an in-memory
// one on a single edge, the fleet's (Redis) when Deps.Cluster makes the
// Server one edge of a fleet. The Server's fleet side (a streamer
// identified, renamed or gone, a player joining or leaving) runs under its
// lock and never waits for the store: it updates this edge's view of its
// own streamers, which is synced to the store as state (a registration,
// not an operation), at once in memory and by the cluster's sync loop on
// Redis. Claims and the matchmaker side go to the store synchronously.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// StreamerState is where a streamer is in its lease lifecycle.
type StreamerState = state.StreamerState

// Streamer states (also the "state" label of egbe_pxstream_streamers).
const (
	StateIdle      = state.StreamerIdle
	StateLeased    = state.StreamerLeased
	StateStreaming = state.StreamerStreaming
)

// StreamerInfo is one registered (identified) streamer.
type StreamerInfo = state.Streamer

// POPCounts counts one POP's streamers by state.
type POPCounts struct {
	Idle, Leased, Streaming int
}

// Total is the number of registered streamers in the POP.
func (c POPCounts) Total() int { return c.Idle + c.Leased + c.Streaming }

// localEdge names a single edge in its own in-memory store.
const localEdge = "local"

// opTimeout bounds one synchronous store call.
const opTimeout = time.Second

// localStreamer is this edge's view of one of its own streamers.
type localStreamer struct {
	reg       state.StreamerReg // ID is the current id; Was is unused here
	renamedOf string            // the id the store knows it by, until the next sync
}

// Registry is the streamer registry of one Server. The zero value is not
// usable; a Server makes its own (Server.Registry).
type Registry struct {
	// Immutable after the Server's New (attach sets the clustered ones).
	st     state.Streamers
	now    func() time.Time
	grace  time.Duration
	log    *slog.Logger
	edge   string        // this edge's id in the store
	ttl    time.Duration // registration TTL (0: never; one edge in memory)
	usable func() error  // nil: always usable
	kick   func()        // wakes the sync loop; nil: sync at once
	failed func(op string)
	seen   func([]state.FleetStreamer) // told every fleet read (the cluster's view of other edges' ids)

	syncMu sync.Mutex // held across one sync: syncs reach the store in order

	mu      sync.Mutex
	local   map[string]*localStreamer // guarded by mu: this edge's streamers by id
	removed map[string]time.Time      // guarded by mu: id the store knows -> ConnectedAt, to unregister
	dirty   map[string]struct{}       // guarded by mu: ids to sync
}

func newRegistry(now func() time.Time, grace time.Duration, log *slog.Logger) *Registry {
	return &Registry{st: state.NewMemoryStreamers(nil), now: now, grace: grace, log: log, edge: localEdge,
		local: make(map[string]*localStreamer), removed: make(map[string]time.Time), dirty: make(map[string]struct{})}
}

// ---- fleet side: this edge's streamers (called under the Server's lock) ----

// changed pushes this edge's view: at once in memory, else by waking the
// cluster's sync loop.
func (r *Registry) changed() {
	if r.kick != nil {
		r.kick()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_ = r.sync(ctx, false, r.now()) // memory: never fails on what this edge holds
}

// add registers an identified streamer of this edge.
func (r *Registry) add(i StreamerInfo) error {
	r.mu.Lock()
	if _, ok := r.local[i.ID]; ok {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrStreamerExists, i.ID)
	}
	r.local[i.ID] = &localStreamer{reg: state.StreamerReg{ID: i.ID, POP: i.POP, Codecs: slices.Clone(i.Codecs),
		ConnectedAt: i.ConnectedAt.Truncate(time.Millisecond)}}
	delete(r.removed, i.ID)
	r.dirty[i.ID] = struct{}{}
	r.mu.Unlock()
	r.changed()
	return nil
}

// remove unregisters a streamer of this edge.
func (r *Registry) remove(id string) {
	r.mu.Lock()
	if l, ok := r.local[id]; ok {
		delete(r.local, id)
		delete(r.dirty, id)
		known := id
		if l.renamedOf != "" {
			known = l.renamedOf
		}
		r.removed[known] = l.reg.ConnectedAt
	}
	r.mu.Unlock()
	r.changed()
}

// rename keeps the registration (and its lease) under a new id.
func (r *Registry) rename(oldID, newID string) error {
	r.mu.Lock()
	l, ok := r.local[oldID]
	if !ok {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrUnknownStreamer, oldID)
	}
	if _, ok := r.local[newID]; ok && newID != oldID {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrStreamerExists, newID)
	}
	delete(r.local, oldID)
	delete(r.dirty, oldID)
	if l.renamedOf == "" {
		l.renamedOf = oldID
	}
	l.reg.ID = newID
	r.local[newID] = l
	r.dirty[newID] = struct{}{}
	r.mu.Unlock()
	r.changed()
	return nil
}

// joined counts a player subscribing to a streamer of this edge.
func (r *Registry) joined(id string) error {
	r.mu.Lock()
	l, ok := r.local[id]
	if ok {
		l.reg.Players++
		r.dirty[id] = struct{}{}
	}
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownStreamer, id)
	}
	r.changed()
	return nil
}

// left counts a player leaving; the last one starts the lease grace.
func (r *Registry) left(id string) {
	r.mu.Lock()
	l, ok := r.local[id]
	if ok && l.reg.Players > 0 {
		l.reg.Players--
		r.dirty[id] = struct{}{}
	}
	r.mu.Unlock()
	r.changed()
}

// sync pushes this edge's changes (all of its streamers when full: the
// heartbeat) to the store in one call; what did not go through is marked
// again for the next sync.
func (r *Registry) sync(ctx context.Context, full bool, now time.Time) error {
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	r.mu.Lock()
	sy := state.StreamerSync{Edge: r.edge, Now: now, TTL: r.ttl, Grace: r.grace}
	for id, l := range r.local {
		if _, d := r.dirty[id]; full || d {
			u := l.reg
			u.Was = l.renamedOf
			sy.Up = append(sy.Up, u)
		}
	}
	for id, conn := range r.removed {
		sy.Gone = append(sy.Gone, state.StreamerKey{ID: id, ConnectedAt: conn})
	}
	clear(r.dirty)
	clear(r.removed)
	r.mu.Unlock()
	if len(sy.Up) == 0 && len(sy.Gone) == 0 {
		return nil
	}
	taken, err := r.st.Sync(ctx, sy)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		for _, g := range sy.Gone {
			if _, back := r.local[g.ID]; !back {
				r.removed[g.ID] = g.ConnectedAt
			}
		}
		for _, u := range sy.Up {
			if _, ok := r.local[u.ID]; ok {
				r.dirty[u.ID] = struct{}{}
			}
		}
		return err
	}
	for _, u := range sy.Up {
		if edge, ok := taken[u.ID]; ok {
			r.log.Warn("streamer id registered by another edge; not in the fleet until it leaves", "streamer", u.ID, "edge", edge)
		}
		if l, ok := r.local[u.ID]; ok && l.renamedOf == u.Was {
			l.renamedOf = ""
		}
	}
	return nil
}

// claim is a token-mode subscribe's lease claim (synchronous).
func (r *Registry) claim(id, sessionID string, until time.Time) error {
	_, err := r.lease(state.StreamerLease{Mode: state.LeaseClaim, ID: id, SessionID: sessionID, Until: until})
	return err
}

// ---- matchmaker side ----

// call checks the store is usable and bounds one synchronous call.
func (r *Registry) call() (context.Context, context.CancelFunc, error) {
	if err := r.Available(); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	return ctx, cancel, nil
}

// storeErr maps a store failure to ErrFleetUnavailable (counted by op).
func (r *Registry) storeErr(op string, err error) error {
	if err != nil && errors.Is(err, state.ErrUnavailable) {
		if r.failed != nil {
			r.failed(op)
		}
		return fmt.Errorf("%w: %w", ErrFleetUnavailable, err)
	}
	return err
}

func (r *Registry) lease(l state.StreamerLease) (StreamerInfo, error) {
	ctx, cancel, err := r.call()
	if err != nil {
		return StreamerInfo{}, err
	}
	defer cancel()
	i, err := r.st.Lease(ctx, l, r.now())
	return i, r.storeErr("script", err)
}

// fleet is the whole fleet in registration order, with each streamer's
// edge.
func (r *Registry) fleet() ([]state.FleetStreamer, error) {
	ctx, cancel, err := r.call()
	if err != nil {
		return nil, err
	}
	defer cancel()
	all, err := r.st.List(ctx, r.now())
	if err != nil {
		return nil, r.storeErr("script", err)
	}
	if r.seen != nil {
		r.seen(all)
	}
	return all, nil
}

// lookup finds one streamer of the fleet and its edge.
func (r *Registry) lookup(id string) (state.FleetStreamer, bool, error) {
	ctx, cancel, err := r.call()
	if err != nil {
		return state.FleetStreamer{}, false, err
	}
	defer cancel()
	s, ok, err := r.st.Get(ctx, id, r.now())
	return s, ok, r.storeErr("get", err)
}

// Available reports whether the registry can answer for the whole fleet:
// nil in memory; ErrFleetUnavailable while the fleet's store is known to
// be unreachable (Snapshot is then empty, and LeaseIdle fails with it), so
// a caller can refuse with a typed "fleet unavailable" rather than "no
// capacity".
func (r *Registry) Available() error {
	if r.usable == nil {
		return nil
	}
	return r.usable()
}

// Snapshot returns every identified streamer in registration order; nil
// while the fleet's store is unreachable.
func (r *Registry) Snapshot() []StreamerInfo {
	all, err := r.fleet()
	if err != nil {
		return nil
	}
	out := make([]StreamerInfo, len(all))
	for i, s := range all {
		out[i] = s.Streamer
	}
	return out
}

// Get returns one streamer by its committed id.
func (r *Registry) Get(id string) (StreamerInfo, bool) {
	s, ok, err := r.lookup(id)
	if err != nil || !ok {
		return StreamerInfo{}, false
	}
	return s.Streamer, true
}

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
	_, err := r.lease(state.StreamerLease{Mode: state.LeaseNamed, ID: streamerID, SessionID: sessionID, Until: until})
	return err
}

// LeaseIdle atomically picks an idle streamer in pop advertising codec (""
// = any) and leases it to sessionID until until.
func (r *Registry) LeaseIdle(pop, codec, sessionID string, until time.Time) (StreamerInfo, error) {
	if sessionID == "" {
		return StreamerInfo{}, fmt.Errorf("%w: empty session id", ErrBadLease)
	}
	return r.lease(state.StreamerLease{Mode: state.LeaseAnyIdle, POP: pop, Codec: codec, SessionID: sessionID, Until: until})
}

// Release drops sessionID's lease. A streamer with players stays streaming
// until they leave, then is idle.
func (r *Registry) Release(sessionID string) error {
	ctx, cancel, err := r.call()
	if err != nil {
		return err
	}
	defer cancel()
	return r.storeErr("script", r.st.Release(ctx, sessionID, r.now()))
}
