package state

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// SeatLimit is one SFU of a concert and how many players it seats.
type SeatLimit struct {
	SFU   string
	Seats int
}

// Seats counts concert seats, fleet-wide. A pool is one concert; each of
// its SFUs seats so many players. A holder (a Pixel Streaming session)
// takes one seat on one SFU of a pool; the seat lapses at its deadline
// unless refreshed, so a dead holder's seat comes back on its own.
type Seats interface {
	// Take seats holder in pool, atomically, on the SFU of sfus with the
	// most free seats (ties: the first listed) and returns that SFU, or ""
	// when every SFU is full (nothing is taken then). A holder already
	// seated in the pool keeps its seat (its deadline moves to now+ttl).
	Take(ctx context.Context, pool, holder string, sfus []SeatLimit, ttl time.Duration, now time.Time) (sfu string, err error)
	// Refresh pushes holder's seat deadline on sfu to now+ttl (no-op when
	// it holds none there).
	Refresh(ctx context.Context, pool, sfu, holder string, ttl time.Duration, now time.Time) error
	// Release frees holder's seat on sfu (idempotent).
	Release(ctx context.Context, pool, sfu, holder string) error
	// Used counts the live seats of each of sfus in pool.
	Used(ctx context.Context, pool string, sfus []string, now time.Time) (map[string]int, error)
}

// CheckSeats is the argument check every Seats implementation makes:
// a pool and a holder are named, the pool has no hash-tag braces (it is
// part of a Redis hash tag), and every limit names its SFU.
func CheckSeats(pool, holder string, sfus []SeatLimit) error {
	if pool == "" || holder == "" || strings.ContainsAny(pool, "{}") {
		return fmt.Errorf("%w: seat pool %q, holder %q", ErrBadArgument, pool, holder)
	}
	for _, s := range sfus {
		if s.SFU == "" || s.Seats < 0 {
			return fmt.Errorf("%w: seat limit %+v", ErrBadArgument, s)
		}
	}
	return nil
}

// MemorySeats is the one-node Seats.
type MemorySeats struct {
	mu    sync.Mutex
	pools map[string]map[string]map[string]int64 // pool -> sfu -> holder -> deadline ms; guarded by mu
}

var _ Seats = (*MemorySeats)(nil)

// NewMemorySeats returns an empty MemorySeats.
func NewMemorySeats() *MemorySeats {
	return &MemorySeats{pools: make(map[string]map[string]map[string]int64)}
}

// liveLocked drops lapsed seats of sfu and returns its holders. Caller
// holds mu.
func (m *MemorySeats) liveLocked(pool, sfu string, ms int64) map[string]int64 {
	hs := m.pools[pool][sfu]
	for h, dl := range hs {
		if dl <= ms {
			delete(hs, h)
		}
	}
	return hs
}

// Take implements Seats.
func (m *MemorySeats) Take(_ context.Context, pool, holder string, sfus []SeatLimit, ttl time.Duration, now time.Time) (string, error) {
	if err := CheckSeats(pool, holder, sfus); err != nil {
		return "", err
	}
	ms := now.UnixMilli()
	dl := ms + ttl.Milliseconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	best, bestFree := -1, 0
	for i, s := range sfus {
		hs := m.liveLocked(pool, s.SFU, ms)
		if _, ok := hs[holder]; ok {
			hs[holder] = dl
			return s.SFU, nil
		}
		if free := s.Seats - len(hs); free > bestFree {
			best, bestFree = i, free
		}
	}
	if best < 0 {
		return "", nil
	}
	p := m.pools[pool]
	if p == nil {
		p = make(map[string]map[string]int64)
		m.pools[pool] = p
	}
	sfu := sfus[best].SFU
	if p[sfu] == nil {
		p[sfu] = make(map[string]int64)
	}
	p[sfu][holder] = dl
	return sfu, nil
}

// Refresh implements Seats.
func (m *MemorySeats) Refresh(_ context.Context, pool, sfu, holder string, ttl time.Duration, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	hs := m.liveLocked(pool, sfu, now.UnixMilli())
	if _, ok := hs[holder]; ok {
		hs[holder] = now.UnixMilli() + ttl.Milliseconds()
	}
	return nil
}

// Release implements Seats.
func (m *MemorySeats) Release(_ context.Context, pool, sfu, holder string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.pools[pool]; p != nil {
		delete(p[sfu], holder)
		if len(p[sfu]) == 0 {
			delete(p, sfu)
		}
		if len(p) == 0 {
			delete(m.pools, pool)
		}
	}
	return nil
}

// Used implements Seats.
func (m *MemorySeats) Used(_ context.Context, pool string, sfus []string, now time.Time) (map[string]int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(sfus))
	for _, s := range sfus {
		out[s] = len(m.liveLocked(pool, s, now.UnixMilli()))
	}
	return out, nil
}
