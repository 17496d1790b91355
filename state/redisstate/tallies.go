package redisstate

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/state"
)

// Tallies is the many-node Tallies: one hash per key
// (egbe:tally:<key>), expiring ttl after its last write.
type Tallies struct{ r *Conn }

var _ state.Tallies = (*Tallies)(nil)

// NewTallies returns Tallies on r.
func NewTallies(r *Conn) *Tallies { return &Tallies{r: r} }

// Add implements Tallies: one MULTI (HINCRBY per field, PEXPIRE).
func (t *Tallies) Add(ctx context.Context, key string, deltas map[string]int64, ttl time.Duration, _ time.Time) error {
	if key == "" || ttl <= 0 {
		return fmt.Errorf("%w: tally key %q ttl %v", state.ErrBadArgument, key, ttl)
	}
	k := tallySpace + key
	pipe := t.r.c.TxPipeline()
	for f, d := range deltas {
		pipe.HIncrBy(ctx, k, f, d)
	}
	pipe.PExpire(ctx, k, ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("%w: tally: %w", state.ErrUnavailable, err)
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
func (t *Tallies) Gap(ctx context.Context, key, series string, ttl time.Duration, now time.Time) error {
	if key == "" || series == "" || ttl <= 0 {
		return fmt.Errorf("%w: tally key %q series %q ttl %v", state.ErrBadArgument, key, series, ttl)
	}
	if err := t.r.run(ctx, luaGap, []string{tallySpace + key}, series, now.UnixMilli(), ttl.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("%w: tally gap: %w", state.ErrUnavailable, err)
	}
	return nil
}

// Read implements Tallies: one pipeline of HGETALL.
func (t *Tallies) Read(ctx context.Context, _ time.Time, keys ...string) ([]map[string]int64, error) {
	pipe := t.r.c.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, tallySpace+k)
	}
	if len(keys) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("%w: tally read: %w", state.ErrUnavailable, err)
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
