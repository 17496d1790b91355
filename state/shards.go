package state

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ShardDirectory is the fleet's list of world shards: every edge with a
// live link to a shard announces it, and any edge lists the fleet's shards
// to link to the ones it was not configured with. A record lapses when no
// edge announces it any more (its ttl).
type ShardDirectory interface {
	// Announce stores rec (replacing the shard's previous record) for ttl.
	Announce(ctx context.Context, rec ShardRecord, ttl time.Duration) error
	// List returns the live records, sorted by ID, at most MaxShardRecords.
	List(ctx context.Context) ([]ShardRecord, error)
}

// ShardRecord is one shard as an edge linked to it saw it.
type ShardRecord struct {
	ID        string   `json:"id"`
	Addr      string   `json:"addr"` // link address, host:port (UDP)
	Instances []string `json:"inst,omitempty"`
	Capacity  int      `json:"cap,omitempty"`  // sessions the shard takes (0 = unbounded)
	Sessions  int      `json:"sess,omitempty"` // sessions the shard reported holding
	EdgeID    string   `json:"edge,omitempty"` // the edge that announced it
}

// Bounds on what a directory holds. A record beyond them is refused by
// Announce (ErrBadArgument) and skipped by List (counted, never a panic).
const (
	MaxShardRecords   = 256 // List returns at most this many
	MaxShardInstances = 512 // instances per record
	maxShardIDLen     = 128 // shard, instance and edge ids
	maxShardAddrLen   = 256
	// maxShardRecordBytes bounds one stored record; 512 instances of 128
	// bytes fit.
	maxShardRecordBytes = 96 << 10
)

// validate reports a record that does not fit the bounds above.
func (r ShardRecord) validate() error {
	switch {
	case r.ID == "" || len(r.ID) > maxShardIDLen:
		return fmt.Errorf("%w: shard id %q", ErrBadArgument, r.ID)
	case r.Addr == "" || len(r.Addr) > maxShardAddrLen:
		return fmt.Errorf("%w: shard %q address %q", ErrBadArgument, r.ID, r.Addr)
	case len(r.Instances) > MaxShardInstances:
		return fmt.Errorf("%w: shard %q announces %d instances (max %d)", ErrBadArgument, r.ID, len(r.Instances), MaxShardInstances)
	case r.Capacity < 0 || r.Sessions < 0:
		return fmt.Errorf("%w: shard %q negative capacity or sessions", ErrBadArgument, r.ID)
	case len(r.EdgeID) > maxShardIDLen:
		return fmt.Errorf("%w: edge id of shard %q too long", ErrBadArgument, r.ID)
	}
	if _, _, err := net.SplitHostPort(r.Addr); err != nil {
		return fmt.Errorf("%w: shard %q address: %w", ErrBadArgument, r.ID, err)
	}
	for _, in := range r.Instances {
		if in == "" || len(in) > maxShardIDLen {
			return fmt.Errorf("%w: shard %q instance id %q", ErrBadArgument, r.ID, in)
		}
	}
	return nil
}

func (r ShardRecord) clone() ShardRecord {
	r.Instances = slices.Clone(r.Instances)
	return r
}

func checkAnnounce(rec ShardRecord, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: shard record ttl %v must be positive", ErrBadArgument, ttl)
	}
	return rec.validate()
}

func sortRecords(out []ShardRecord) {
	slices.SortFunc(out, func(a, b ShardRecord) int { return strings.Compare(a.ID, b.ID) })
}

// MemoryShardDirectory is the in-process directory: one process, or
// several gateways of one test sharing it.
type MemoryShardDirectory struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]memShard // guarded by mu
}

type memShard struct {
	rec ShardRecord
	exp time.Time
}

var (
	_ ShardDirectory = (*MemoryShardDirectory)(nil)
	_ ShardDirectory = (*RedisShardDirectory)(nil)
)

// NewMemoryShardDirectory returns an empty directory; now may be nil
// (time.Now).
func NewMemoryShardDirectory(now func() time.Time) *MemoryShardDirectory {
	if now == nil {
		now = time.Now
	}
	return &MemoryShardDirectory{now: now, m: map[string]memShard{}}
}

// Announce implements ShardDirectory.
func (d *MemoryShardDirectory) Announce(_ context.Context, rec ShardRecord, ttl time.Duration) error {
	if err := checkAnnounce(rec, ttl); err != nil {
		return err
	}
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.m[rec.ID] = memShard{rec: rec.clone(), exp: now.Add(ttl)}
	return nil
}

// List implements ShardDirectory.
func (d *MemoryShardDirectory) List(context.Context) ([]ShardRecord, error) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]ShardRecord, 0, len(d.m))
	for id, s := range d.m {
		if !now.Before(s.exp) {
			delete(d.m, id)
			continue
		}
		out = append(out, s.rec.clone())
	}
	sortRecords(out)
	if len(out) > MaxShardRecords {
		out = out[:MaxShardRecords]
	}
	return out, nil
}

// RedisShardDirectory keeps one key per shard (a JSON record with PX
// expiry) and an index of shard ids scored by the time each lapses; both
// carry the {egbe-shards} hash tag (keys.go). Liveness is judged by Redis's
// own clock (TIME, in the scripts), as the fleet's membership is, so the
// edges' clocks never disagree about which shards are announced.
type RedisShardDirectory struct {
	r       *Redis // immutable
	corrupt atomic.Uint64
}

// NewRedisShardDirectory returns a directory on r.
func NewRedisShardDirectory(r *Redis) *RedisShardDirectory {
	return &RedisShardDirectory{r: r}
}

// Corrupt counts records List skipped: undecodable, oversized, out of
// bounds, or stored under another shard's key.
func (d *RedisShardDirectory) Corrupt() uint64 { return d.corrupt.Load() }

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
func (d *RedisShardDirectory) Announce(ctx context.Context, rec ShardRecord, ttl time.Duration) error {
	if err := checkAnnounce(rec, ttl); err != nil {
		return err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("state: encode shard record %q: %w", rec.ID, err)
	}
	if len(b) > maxShardRecordBytes {
		return fmt.Errorf("%w: shard %q record is %d bytes (max %d)", ErrBadArgument, rec.ID, len(b), maxShardRecordBytes)
	}
	err = d.r.run(ctx, luaShardAnnounce, []string{shardsIndex, shardsKeyPrefix + rec.ID}, rec.ID, b, max(ttl.Milliseconds(), 1)).Err()
	return d.r.wrap(fmt.Sprintf("announce shard %q", rec.ID), err)
}

// List implements ShardDirectory. The freshest MaxShardRecords live index
// entries are read; an entry whose key has expired is skipped silently, a
// corrupt record is skipped and counted (Corrupt).
func (d *RedisShardDirectory) List(ctx context.Context) ([]ShardRecord, error) {
	flat, err := d.r.run(ctx, luaShardList, []string{shardsIndex}, MaxShardRecords).StringSlice()
	if err != nil {
		return nil, d.r.wrap("list shards", err)
	}
	out := make([]ShardRecord, 0, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		rec, ok := decodeShardRecord(flat[i], flat[i+1])
		if !ok {
			d.corrupt.Add(1)
			continue
		}
		out = append(out, rec)
	}
	sortRecords(out)
	return out, nil
}

// decodeShardRecord decodes the record stored for id, bounded: it never
// accepts a record larger, longer or other than validate allows.
func decodeShardRecord(id, s string) (ShardRecord, bool) {
	if len(s) > maxShardRecordBytes {
		return ShardRecord{}, false
	}
	var rec ShardRecord
	if err := json.Unmarshal([]byte(s), &rec); err != nil {
		return ShardRecord{}, false
	}
	if rec.ID != id || rec.validate() != nil {
		return ShardRecord{}, false
	}
	return rec, true
}
