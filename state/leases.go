package state

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// LeaseLimit is one concurrency key and the most live leases it may hold.
type LeaseLimit struct {
	Key   string
	Limit int
}

// Leases counts live holders per key (per user, per network prefix). A
// lease expires at its deadline unless refreshed, so a dead holder's leases
// lapse on their own.
type Leases interface {
	// Acquire grants holder a lease on every key, atomically, if every key
	// is below its limit (a holder already present is not counted twice).
	// It returns -1 when granted, else the index of the first limit that
	// blocked (nothing is taken then).
	Acquire(ctx context.Context, holder string, limits []LeaseLimit, ttl time.Duration, now time.Time) (blocked int, err error)
	// Refresh pushes holder's deadline on keys to now+ttl.
	Refresh(ctx context.Context, holder string, keys []string, ttl time.Duration, now time.Time) error
	// Release drops holder from keys.
	Release(ctx context.Context, holder string, keys []string) error
}

// Budgets are per-key usage counters (free-tier minutes per user per day)
// that expire on their own.
type Budgets interface {
	// Used is the amount recorded under key (0 if none).
	Used(ctx context.Context, key string, now time.Time) (int64, error)
	// Add records delta under key, keeping it ttl from now, and returns the
	// new total.
	Add(ctx context.Context, key string, delta int64, ttl time.Duration, now time.Time) (int64, error)
}

// MemoryLeases is the one-node Leases.
type MemoryLeases struct {
	mu   sync.Mutex
	keys map[string]map[string]int64 // key -> holder -> deadline ms; guarded by mu
}

var _ Leases = (*MemoryLeases)(nil)

// NewMemoryLeases returns an empty MemoryLeases.
func NewMemoryLeases() *MemoryLeases {
	return &MemoryLeases{keys: make(map[string]map[string]int64)}
}

// CheckLeaseLimits refuses an empty holder and a malformed limit.
func CheckLeaseLimits(holder string, limits []LeaseLimit) error {
	if holder == "" {
		return fmt.Errorf("%w: empty holder", ErrBadArgument)
	}
	for _, l := range limits {
		if l.Key == "" || l.Limit < 0 {
			return fmt.Errorf("%w: lease limit %+v", ErrBadArgument, l)
		}
	}
	return nil
}

// Acquire implements Leases.
func (m *MemoryLeases) Acquire(_ context.Context, holder string, limits []LeaseLimit, ttl time.Duration, now time.Time) (int, error) {
	if err := CheckLeaseLimits(holder, limits); err != nil {
		return 0, err
	}
	ms := now.UnixMilli()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, l := range limits {
		hs := m.keys[l.Key]
		n := 0
		for h, dl := range hs {
			if dl <= ms {
				delete(hs, h)
				continue
			}
			if h != holder {
				n++
			}
		}
		if n >= l.Limit {
			return i, nil
		}
	}
	dl := ms + ttl.Milliseconds()
	for _, l := range limits {
		hs := m.keys[l.Key]
		if hs == nil {
			hs = make(map[string]int64)
			m.keys[l.Key] = hs
		}
		hs[holder] = dl
	}
	return -1, nil
}

// Refresh implements Leases.
func (m *MemoryLeases) Refresh(_ context.Context, holder string, keys []string, ttl time.Duration, now time.Time) error {
	dl := now.UnixMilli() + ttl.Milliseconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		if hs := m.keys[k]; hs != nil {
			if _, ok := hs[holder]; ok {
				hs[holder] = dl
			}
		}
	}
	return nil
}

// Release implements Leases.
func (m *MemoryLeases) Release(_ context.Context, holder string, keys []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		if hs := m.keys[k]; hs != nil {
			delete(hs, holder)
			if len(hs) == 0 {
				delete(m.keys, k)
			}
		}
	}
	return nil
}

// MemoryBudgets is the one-node Budgets.
type MemoryBudgets struct {
	mu     sync.Mutex
	m      map[string]budget // guarded by mu
	writes int               // guarded by mu: sweep every sweepEvery adds
}

type budget struct {
	n  int64
	dl int64 // expiry, ms
}

var _ Budgets = (*MemoryBudgets)(nil)

// NewMemoryBudgets returns an empty MemoryBudgets.
func NewMemoryBudgets() *MemoryBudgets { return &MemoryBudgets{m: make(map[string]budget)} }

// Used implements Budgets.
func (b *MemoryBudgets) Used(_ context.Context, key string, now time.Time) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[key]
	if !ok || v.dl <= now.UnixMilli() {
		delete(b.m, key)
		return 0, nil
	}
	return v.n, nil
}

// Add implements Budgets.
func (b *MemoryBudgets) Add(_ context.Context, key string, delta int64, ttl time.Duration, now time.Time) (int64, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: empty budget key", ErrBadArgument)
	}
	ms := now.UnixMilli()
	b.mu.Lock()
	defer b.mu.Unlock()
	// Sweep now and then so expired days do not accumulate (a sweep per
	// add would make every add O(keys)).
	if b.writes++; b.writes%sweepEvery == 0 {
		for k, v := range b.m {
			if v.dl <= ms {
				delete(b.m, k)
			}
		}
	}
	v := b.m[key]
	if v.dl <= ms {
		v = budget{}
	}
	v.n += delta
	v.dl = ms + ttl.Milliseconds()
	b.m[key] = v
	return v.n, nil
}
