package state

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Member is one edge of the fleet.
type Member struct {
	ID  string // unique in the fleet; part of Redis keys (CheckEdgeID)
	URL string // base URL its clients reach it at ("" when it has none)
}

// Members is the fleet's membership: the one answer to "which edges are
// alive", asked by voice rooms (is a room's holder alive?), the operator
// page's fleet board (whose figures to show) and Pixel Streaming
// signalling (is a cross-edge peer alive?). Each edge beats its own
// membership (Run, every third of the TTL); an edge that stops beating
// (killed, partitioned from the store) is dead a TTL after its last beat.
// A store's view of the membership is one edge's: Beat and Leave are about
// that edge.
type Members interface {
	// Beat marks this edge alive for the store's TTL.
	Beat(ctx context.Context) error
	// Alive returns the live edges among ids, by id (every live edge when
	// ids is empty).
	Alive(ctx context.Context, ids ...string) (map[string]Member, error)
	// Leave ends this edge's membership at once (a clean stop).
	Leave(ctx context.Context) error
}

// DefaultMemberTTL: an edge is dead 3 s after its last beat, so its voice
// rooms move and its cross-edge peers learn of it within seconds.
const DefaultMemberTTL = 3 * time.Second

// ForgetDeadAfter: an edge dead this long leaves the membership's keys.
const ForgetDeadAfter = 10 * time.Minute

// maxEdgeIDBytes bounds an edge id (it is part of keys and logs).
const maxEdgeIDBytes = 128

// CheckEdgeID refuses an edge id that cannot name an edge in keys: empty,
// over 128 bytes, or with white space or braces (a brace would change a
// key's hash tag).
func CheckEdgeID(id string) error {
	if id == "" || len(id) > maxEdgeIDBytes || strings.ContainsAny(id, " \t\r\n{}\x00") {
		return fmt.Errorf("%w: edge id %q: want 1-%d bytes, no spaces or braces", ErrBadArgument, id, maxEdgeIDBytes)
	}
	return nil
}

// CheckMember refuses a member a store cannot keep, and a ttl <= 0.
func CheckMember(me Member, ttl time.Duration) error {
	if err := CheckEdgeID(me.ID); err != nil {
		return err
	}
	if strings.ContainsAny(me.URL, " \t\r\n") {
		return fmt.Errorf("%w: edge url %q contains white space", ErrBadArgument, me.URL)
	}
	if ttl <= 0 {
		return fmt.Errorf("%w: membership ttl %v must be positive", ErrBadArgument, ttl)
	}
	return nil
}

// RunHeartbeat beats m every ttl/3 until ctx ends: the loop of the edge
// that owns m. A failed beat is retried at the next period (the store's
// availability tracker records the outage).
func RunHeartbeat(ctx context.Context, m Members, ttl time.Duration) error {
	t := time.NewTicker(max(ttl/3, time.Millisecond))
	defer t.Stop()
	for {
		bctx, cancel := context.WithTimeout(ctx, ttl/3+time.Millisecond)
		_ = m.Beat(bctx)
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ---- memory ----

// MemoryMembersStore is an in-process membership. One edge uses
// For(itself); tests hand several edges the same store. Liveness follows
// the injected clock.
type MemoryMembersStore struct {
	now func() time.Time // immutable
	ttl time.Duration    // immutable

	mu    sync.Mutex
	alive map[string]time.Time // guarded by mu: edge id -> dead after
	urls  map[string]string    // guarded by mu
}

// NewMemoryMembers returns an empty membership; now may be nil (time.Now),
// ttl 0 is DefaultMemberTTL.
func NewMemoryMembers(now func() time.Time, ttl time.Duration) *MemoryMembersStore {
	if now == nil {
		now = time.Now
	}
	if ttl <= 0 {
		ttl = DefaultMemberTTL
	}
	return &MemoryMembersStore{now: now, ttl: ttl, alive: map[string]time.Time{}, urls: map[string]string{}}
}

// For returns me's view of the membership.
func (s *MemoryMembersStore) For(me Member) (*MemoryMembers, error) {
	if err := CheckMember(me, s.ttl); err != nil {
		return nil, err
	}
	return &MemoryMembers{s: s, me: me}, nil
}

// MemoryMembers is one edge's view of a MemoryMembersStore.
type MemoryMembers struct {
	s  *MemoryMembersStore // immutable
	me Member              // immutable
}

var _ Members = (*MemoryMembers)(nil)

// Self is the edge this view beats for.
func (m *MemoryMembers) Self() Member { return m.me }

// beatLocked marks me alive; the caller holds s.mu.
func (m *MemoryMembers) beatLocked(now time.Time) {
	m.s.alive[m.me.ID] = now.Add(m.s.ttl)
	m.s.urls[m.me.ID] = m.me.URL
}

// aliveLocked reports whether id is alive at now; the caller holds s.mu.
func (s *MemoryMembersStore) aliveLocked(id string, now time.Time) bool {
	return now.Before(s.alive[id])
}

// Beat implements Members.
func (m *MemoryMembers) Beat(context.Context) error {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	now := m.s.now()
	m.beatLocked(now)
	for id, dl := range m.s.alive {
		if now.Sub(dl) > ForgetDeadAfter {
			delete(m.s.alive, id)
			delete(m.s.urls, id)
		}
	}
	return nil
}

// Alive implements Members.
func (m *MemoryMembers) Alive(_ context.Context, ids ...string) (map[string]Member, error) {
	s := m.s
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := map[string]Member{}
	if len(ids) == 0 {
		for id := range s.alive {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		if s.aliveLocked(id, now) {
			out[id] = Member{ID: id, URL: s.urls[id]}
		}
	}
	return out, nil
}

// Leave implements Members.
func (m *MemoryMembers) Leave(context.Context) error {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	delete(m.s.alive, m.me.ID)
	delete(m.s.urls, m.me.ID)
	return nil
}

// Run beats every third of the TTL until ctx ends.
func (m *MemoryMembers) Run(ctx context.Context) error { return RunHeartbeat(ctx, m, m.s.ttl) }
