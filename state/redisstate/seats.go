package redisstate

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/state"
)

// Concert seats: one sorted set per SFU of a pool (keys.go), holder ->
// seat deadline (Unix ms of the caller's clock), all of a pool's keys
// under the pool's hash tag so a take over every SFU is one slot. A key
// expires with its last seat (PEXPIRE to the latest deadline).

func seatKey(pool, sfu string) string { return seatTag + pool + "}:" + sfu }

// luaSeatTake: KEYS one zset per SFU; ARGV 1 holder, 2 now, 3 deadline,
// 4.. seats per SFU (KEYS order). Returns the index (0-based) of the SFU
// seating holder, or -1 when every SFU is full.
var luaSeatTake = newScript(`
local now, dl = tonumber(ARGV[2]), tonumber(ARGV[3])
local function keep(k)
  local last = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', k, math.max(1, tonumber(last[2]) - now))
end
local best, bestFree = -1, 0
for i, k in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', k, '-inf', now)
  if redis.call('ZSCORE', k, ARGV[1]) then
    redis.call('ZADD', k, dl, ARGV[1])
    keep(k)
    return i - 1
  end
  local free = tonumber(ARGV[3 + i]) - redis.call('ZCARD', k)
  if free > bestFree then best, bestFree = i, free end
end
if best < 0 then return -1 end
local k = KEYS[best]
redis.call('ZADD', k, dl, ARGV[1])
keep(k)
return best - 1
`)

// luaSeatRefresh: KEYS 1 the SFU's zset; ARGV 1 holder, 2 now, 3 deadline.
var luaSeatRefresh = newScript(`
local k = KEYS[1]
if redis.call('ZADD', k, 'XX', 'CH', ARGV[3], ARGV[1]) == 1 then
  local last = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', k, math.max(1, tonumber(last[2]) - tonumber(ARGV[2])))
end
return 0
`)

// Seats is the many-node Seats.
type Seats struct{ r *Conn }

var _ state.Seats = (*Seats)(nil)

// NewSeats returns Seats on r.
func NewSeats(r *Conn) *Seats { return &Seats{r: r} }

// Take implements Seats: one script, one round trip.
func (s *Seats) Take(ctx context.Context, pool, holder string, sfus []state.SeatLimit, ttl time.Duration, now time.Time) (string, error) {
	if err := state.CheckSeats(pool, holder, sfus); err != nil {
		return "", err
	}
	if len(sfus) == 0 {
		return "", nil
	}
	keys := make([]string, len(sfus))
	args := make([]any, 0, 3+len(sfus))
	args = append(args, holder, now.UnixMilli(), now.UnixMilli()+ttl.Milliseconds())
	for i, l := range sfus {
		keys[i] = seatKey(pool, l.SFU)
		args = append(args, l.Seats)
	}
	i, err := s.r.run(ctx, luaSeatTake, keys, args...).Int()
	if err != nil {
		return "", fmt.Errorf("%w: seat take: %w", state.ErrUnavailable, err)
	}
	if i < 0 || i >= len(sfus) {
		return "", nil
	}
	return sfus[i].SFU, nil
}

// Refresh implements Seats.
func (s *Seats) Refresh(ctx context.Context, pool, sfu, holder string, ttl time.Duration, now time.Time) error {
	if err := state.CheckSeats(pool, holder, nil); err != nil {
		return err
	}
	err := s.r.run(ctx, luaSeatRefresh, []string{seatKey(pool, sfu)}, holder, now.UnixMilli(), now.UnixMilli()+ttl.Milliseconds()).Err()
	if err != nil {
		return fmt.Errorf("%w: seat refresh: %w", state.ErrUnavailable, err)
	}
	return nil
}

// Release implements Seats.
func (s *Seats) Release(ctx context.Context, pool, sfu, holder string) error {
	if err := state.CheckSeats(pool, holder, nil); err != nil {
		return err
	}
	if err := s.r.c.ZRem(ctx, seatKey(pool, sfu), holder).Err(); err != nil {
		return fmt.Errorf("%w: seat release: %w", state.ErrUnavailable, err)
	}
	return nil
}

// Used implements Seats: one pipeline of ZCOUNTs (a read, not a decision).
func (s *Seats) Used(ctx context.Context, pool string, sfus []string, now time.Time) (map[string]int, error) {
	if err := state.CheckSeats(pool, "-", nil); err != nil {
		return nil, err
	}
	pipe := s.r.c.Pipeline()
	cmds := make([]*redis.IntCmd, len(sfus))
	live := fmt.Sprintf("(%d", now.UnixMilli())
	for i, sfu := range sfus {
		cmds[i] = pipe.ZCount(ctx, seatKey(pool, sfu), live, "+inf")
	}
	if len(sfus) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("%w: seats used: %w", state.ErrUnavailable, err)
		}
	}
	out := make(map[string]int, len(sfus))
	for i, sfu := range sfus {
		out[sfu] = int(cmds[i].Val())
	}
	return out, nil
}
