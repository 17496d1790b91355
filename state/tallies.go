package state

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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

// RedisTallies is the many-node Tallies: one hash per key
// (egbe:tally:<key>), expiring ttl after its last write.
type RedisTallies struct{ r *Redis }

var _ Tallies = (*RedisTallies)(nil)

// NewRedisTallies returns Tallies on r.
func NewRedisTallies(r *Redis) *RedisTallies { return &RedisTallies{r: r} }

// Add implements Tallies: one MULTI (HINCRBY per field, PEXPIRE).
func (t *RedisTallies) Add(ctx context.Context, key string, deltas map[string]int64, ttl time.Duration, _ time.Time) error {
	if key == "" || ttl <= 0 {
		return fmt.Errorf("%w: tally key %q ttl %v", ErrBadArgument, key, ttl)
	}
	k := tallySpace + key
	pipe := t.r.c.TxPipeline()
	for f, d := range deltas {
		pipe.HIncrBy(ctx, k, f, d)
	}
	pipe.PExpire(ctx, k, ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("%w: tally: %w", ErrUnavailable, err)
	}
	return nil
}

// luaGap: KEYS[1] the hash; ARGV 1 series, 2 now ms, 3 ttl ms.
var luaGap = newScript(`
local k, s, now = KEYS[1], ARGV[1], tonumber(ARGV[2])
local last = tonumber(redis.call('HGET', k, s .. '.last'))
if last and now <= last then
  redis.call('PEXPIRE', k, ARGV[3])
  return 0
end
if last then
  local g = now - last
  redis.call('HINCRBY', k, s .. '.n', 1)
  redis.call('HINCRBY', k, s .. '.sum', string.format('%d', g))
  redis.call('HINCRBY', k, s .. '.sq', string.format('%d', g * g))
end
redis.call('HSET', k, s .. '.last', string.format('%d', now))
redis.call('PEXPIRE', k, ARGV[3])
return 1
`)

// Gap implements Tallies: one script, so two edges recording the same
// series never lose a gap.
func (t *RedisTallies) Gap(ctx context.Context, key, series string, ttl time.Duration, now time.Time) error {
	if key == "" || series == "" || ttl <= 0 {
		return fmt.Errorf("%w: tally key %q series %q ttl %v", ErrBadArgument, key, series, ttl)
	}
	if err := t.r.run(ctx, luaGap, []string{tallySpace + key}, series, now.UnixMilli(), ttl.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("%w: tally gap: %w", ErrUnavailable, err)
	}
	return nil
}

// Read implements Tallies: one pipeline of HGETALL.
func (t *RedisTallies) Read(ctx context.Context, _ time.Time, keys ...string) ([]map[string]int64, error) {
	pipe := t.r.c.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, tallySpace+k)
	}
	if len(keys) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("%w: tally read: %w", ErrUnavailable, err)
		}
	}
	out := make([]map[string]int64, len(keys))
	for i, c := range cmds {
		m := make(map[string]int64, len(c.Val()))
		for f, v := range c.Val() {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				m[f] = n
			}
		}
		out[i] = m
	}
	return out, nil
}
