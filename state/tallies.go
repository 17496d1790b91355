package state

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"
)

// Tallies are expiring counters, several named fields per key, that every
// edge of a fleet adds to: the behavioural signals of one subject the
// abuse classifier scores, and the per-minute samples (session starts,
// cold joins, HTTP answers) the waiting room's surge controller reads.
type Tallies interface {
	// Add adds each delta to its field of key and keeps key ttl from now.
	Add(ctx context.Context, key string, deltas map[string]int64, ttl time.Duration, now time.Time) error
	// Gap records an event of series at now. The gap since the series'
	// previous event under key (if any, and if now is later) is added to
	// the fields <series>.n (count), <series>.sum (ms) and <series>.sq
	// (ms²), and <series>.last becomes now (Unix ms): enough for the mean
	// rate and the jitter (standard deviation) of the gaps. key is kept
	// ttl from now.
	Gap(ctx context.Context, key, series string, ttl time.Duration, now time.Time) error
	// Read returns the fields of each key, index-aligned; an absent or
	// expired key reads as an empty map.
	Read(ctx context.Context, now time.Time, keys ...string) ([]map[string]int64, error)
}

// MemoryTallies is the one-node Tallies. Expiry follows the caller's
// (injected) clock.
type MemoryTallies struct {
	mu     sync.Mutex
	m      map[string]*tally // guarded by mu
	writes int               // guarded by mu: sweep expired keys every sweepEvery writes
}

// sweepEvery amortises the expiry sweep: one pass over the keys per this
// many writes (a pass per write made every write O(keys)).
const sweepEvery = 4096

type tally struct {
	f  map[string]int64
	dl int64 // expiry, Unix ms
}

var _ Tallies = (*MemoryTallies)(nil)

// NewMemoryTallies returns empty Tallies.
func NewMemoryTallies() *MemoryTallies { return &MemoryTallies{m: map[string]*tally{}} }

// live returns key's tally (a fresh one when absent or expired), sweeping
// expired keys now and then. Caller holds mu.
func (t *MemoryTallies) live(key string, ms int64) *tally {
	if t.writes++; t.writes%sweepEvery == 0 {
		for k, v := range t.m {
			if v.dl <= ms {
				delete(t.m, k)
			}
		}
	}
	v := t.m[key]
	if v == nil || v.dl <= ms {
		v = &tally{f: map[string]int64{}}
		t.m[key] = v
	}
	return v
}

// Add implements Tallies.
func (t *MemoryTallies) Add(_ context.Context, key string, deltas map[string]int64, ttl time.Duration, now time.Time) error {
	if key == "" || ttl <= 0 {
		return fmt.Errorf("%w: tally key %q ttl %v", ErrBadArgument, key, ttl)
	}
	ms := now.UnixMilli()
	t.mu.Lock()
	defer t.mu.Unlock()
	v := t.live(key, ms)
	for f, d := range deltas {
		v.f[f] += d
	}
	v.dl = ms + ttl.Milliseconds()
	return nil
}

// Gap implements Tallies.
func (t *MemoryTallies) Gap(_ context.Context, key, series string, ttl time.Duration, now time.Time) error {
	if key == "" || series == "" || ttl <= 0 {
		return fmt.Errorf("%w: tally key %q series %q ttl %v", ErrBadArgument, key, series, ttl)
	}
	ms := now.UnixMilli()
	t.mu.Lock()
	defer t.mu.Unlock()
	v := t.live(key, ms)
	if last, ok := v.f[series+".last"]; ok {
		if ms <= last {
			v.dl = ms + ttl.Milliseconds()
			return nil
		}
		g := ms - last
		v.f[series+".n"]++
		v.f[series+".sum"] += g
		v.f[series+".sq"] += g * g
	}
	v.f[series+".last"] = ms
	v.dl = ms + ttl.Milliseconds()
	return nil
}

// Read implements Tallies.
func (t *MemoryTallies) Read(_ context.Context, now time.Time, keys ...string) ([]map[string]int64, error) {
	ms := now.UnixMilli()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]map[string]int64, len(keys))
	for i, k := range keys {
		if v := t.m[k]; v != nil && v.dl > ms {
			out[i] = maps.Clone(v.f)
		} else {
			out[i] = map[string]int64{}
		}
	}
	return out, nil
}
