package redisstate

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// ShardDirectory keeps one key per shard (a JSON record with PX
// expiry) and an index of shard ids scored by the time each lapses; both
// carry the {egbe-shards} hash tag (keys.go). Liveness is judged by Redis's
// own clock (TIME, in the scripts), as the fleet's membership is, so the
// edges' clocks never disagree about which shards are announced.
type ShardDirectory struct {
	r       *Conn // immutable
	corrupt atomic.Uint64
}

// NewShardDirectory returns a directory on r.
func NewShardDirectory(r *Conn) *ShardDirectory {
	return &ShardDirectory{r: r}
}

// Corrupt counts records List skipped: undecodable, oversized, out of
// bounds, or stored under another shard's key.
func (d *ShardDirectory) Corrupt() uint64 { return d.corrupt.Load() }

// redisNowLua is Redis's clock in milliseconds.
const redisNowLua = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// KEYS[1] index, KEYS[2] the shard's key; ARGV id, record, ttl ms.
var luaShardAnnounce = newScript(redisNowLua + `
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
return 0
`)

// KEYS[1] index; ARGV max. Returns {id, record, ...} of the freshest live
// records (a record whose key lapsed is skipped).
var luaShardList = newScript(redisNowLua + `
local out = {}
for _, id in ipairs(redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', '(' .. now, 'LIMIT', 0, tonumber(ARGV[1]))) do
  local v = redis.call('GET', '` + shardsKeyPrefix + `' .. id)
  if v then
    out[#out + 1] = id
    out[#out + 1] = v
  end
end
return out
`)

// Announce implements ShardDirectory.
func (d *ShardDirectory) Announce(ctx context.Context, rec state.ShardRecord, ttl time.Duration) error {
	if err := state.CheckAnnounce(rec, ttl); err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("state: encode shard record %q: %w", rec.ID, err)
	}
	if len(b) > state.MaxShardRecordBytes {
		return fmt.Errorf("%w: shard %q record is %d bytes (max %d)", state.ErrBadArgument, rec.ID, len(b), state.MaxShardRecordBytes)
	}
	err = d.r.run(ctx, luaShardAnnounce, []string{shardsIndex, shardsKeyPrefix + rec.ID}, rec.ID, b, max(ttl.Milliseconds(), 1)).Err()
	return d.r.wrap(fmt.Sprintf("announce shard %q", rec.ID), err)
}

// List implements ShardDirectory. The freshest MaxShardRecords live index
// entries are read; an entry whose key has expired is skipped silently, a
// corrupt record is skipped and counted (Corrupt).
func (d *ShardDirectory) List(ctx context.Context) ([]state.ShardRecord, error) {
	flat, err := d.r.run(ctx, luaShardList, []string{shardsIndex}, state.MaxShardRecords).StringSlice()
	if err != nil {
		return nil, d.r.wrap("list shards", err)
	}
	out := make([]state.ShardRecord, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		rec, ok := state.DecodeShardRecord(flat[i], flat[i+1])
		if !ok {
			d.corrupt.Add(1)
			continue
		}
		out = append(out, rec)
	}
	state.SortShardRecords(out)
	return out, nil
}
