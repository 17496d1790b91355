package redisstate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/state"
)

// The waiting room, leases and budgets on Redis. Keys: keys.go. Key TTLs
// are relative to the caller's (injected) clock, never Redis's. Queue
// scripts name only the meta key in KEYS; the others are derived from it
// inside the script and share its hash tag, which keeps Cluster routing
// correct (no script flags are set).

// luaPrelude checks the epoch: a missing meta hash is loss; a different
// epoch of a higher generation is an operator re-arm elsewhere (adopted);
// anything else is loss (a rollback or an empty restart re-bootstrapped).
const luaPrelude = `
local meta = KEYS[1]
local function gen(e) return tonumber(string.match(e or '', '^(%d+)%-')) or 0 end
local ep = redis.call('HGET', meta, 'epoch')
if not ep then return {'LOST', ''} end
local known = ARGV[1]
if known ~= '' and known ~= ep and gen(ep) <= gen(known) then return {'LOST', ep} end
local P = ARGV[2] .. ep .. ':'
local function refill(k, perms, burst, now)
  local v = redis.call('HMGET', k, 'tok', 'ts')
  local tok, ts = tonumber(v[1]), tonumber(v[2])
  if not tok then tok = burst; ts = now end
  if now > ts then tok = tok + (now - ts) * perms; ts = now end
  if tok > burst then tok = burst end
  return tok, ts
end
local function save(k, tok, ts, ttl)
  redis.call('HSET', k, 'tok', tostring(tok), 'ts', string.format('%d', ts))
  redis.call('PEXPIRE', k, ttl)
end
`

// luaDrain: ARGV 3 now, 4 region, 5 ticket, 6 lane, 7 gPerMin, 8 gBurst,
// 9 rPerMin, 10 rBurst, 11 pxAllowed, 12 frozen, 13 joinMs, 14 keepMs,
// 15 ttlMs, 16 maxAdmits, 17 mode (join|poll).
var luaDrain = newScript(luaPrelude + `
local now = tonumber(ARGV[3]); local region = ARGV[4]; local id = ARGV[5]; local lane = ARGV[6]
local gper, gburst = tonumber(ARGV[7]), tonumber(ARGV[8])
local rper, rburst = tonumber(ARGV[9]), tonumber(ARGV[10])
local pxok = ARGV[11] == '1'
local joinms, keepms, ttlms, maxa = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15]), tonumber(ARGV[16])
local flags = redis.call('HMGET', meta, 'halved', 'frozen')
if flags[1] == '1' then gper = gper / 2 end
local frozen = ARGV[12] == '1' or flags[2] == '1'
local gk, rk = P .. 'b:global', P .. 'b:r:' .. region
local qw, qp = P .. 'q:' .. region .. ':web', P .. 'q:' .. region .. ':pxstream'
local ak, dk, tk = P .. 'adm:' .. region, P .. 'dr:' .. region, P .. 't:' .. id
local function refund()
  local tok, ts = refill(gk, gper / 60000, gburst, now)
  save(gk, math.min(gburst, tok + 1), ts, ttlms)
  tok, ts = refill(rk, rper / 60000, rburst, now)
  save(rk, math.min(rburst, tok + 1), ts, ttlms)
end
if ARGV[17] == 'join' then
  if redis.call('EXISTS', tk) == 0 then
    local seq = redis.call('HINCRBY', meta, 'seq', 1)
    redis.call('HSET', tk, 'region', region, 'lane', lane, 'seq', seq, 'st', 'queued', 'seen', ARGV[3])
    redis.call('PEXPIRE', tk, ttlms)
    local qk = P .. 'q:' .. region .. ':' .. lane
    redis.call('ZADD', qk, seq, id)
    redis.call('PEXPIRE', qk, ttlms)
  end
elseif redis.call('HGET', tk, 'st') == 'queued' then
  redis.call('HSET', tk, 'seen', ARGV[3])
  redis.call('PEXPIRE', tk, ttlms) -- silent refresh: the place lives as long as the re-issued ticket
end
local lapsed = redis.call('ZRANGEBYSCORE', ak, '-inf', '(' .. ARGV[3], 'LIMIT', 0, 256)
for _, x in ipairs(lapsed) do
  redis.call('ZREM', ak, x)
  local xk = P .. 't:' .. x
  if redis.call('HGET', xk, 'st') == 'admitted' then
    redis.call('HSET', xk, 'st', 'gone')
    refund()
  end
end
if not frozen then
  local gt, gts = refill(gk, gper / 60000, gburst, now)
  local rt, rts = refill(rk, rper / 60000, rburst, now)
  local n, scanned = 0, 0
  while n < maxa and scanned < 4 * maxa and gt >= 1 and rt >= 1 do
    scanned = scanned + 1
    local w = redis.call('ZRANGE', qw, 0, 0, 'WITHSCORES')
    local p = {}
    if pxok then p = redis.call('ZRANGE', qp, 0, 0, 'WITHSCORES') end
    local x, from
    if #w > 0 and (#p == 0 or tonumber(w[2]) < tonumber(p[2])) then x = w[1]; from = qw
    elseif #p > 0 then x = p[1]; from = qp
    else break end
    redis.call('ZREM', from, x)
    local xk = P .. 't:' .. x
    local seen = tonumber(redis.call('HGET', xk, 'seen'))
    if seen and now - seen <= keepms then
      gt = gt - 1; rt = rt - 1; n = n + 1
      local dl = now + joinms
      redis.call('HSET', xk, 'st', 'admitted', 'dl', string.format('%d', dl))
      redis.call('ZADD', ak, dl, x)
      redis.call('ZADD', dk, now, x)
    elseif seen then
      redis.call('HSET', xk, 'st', 'gone')
    end
  end
  -- An untouched bucket need not be written: refill is a pure function
  -- of (tok, ts, now), so the stored pair still answers the same.
  if n > 0 then
    save(gk, gt, gts, ttlms)
    save(rk, rt, rts, ttlms)
    redis.call('PEXPIRE', ak, ttlms)
    redis.call('PEXPIRE', dk, ttlms)
  end
end
redis.call('ZREMRANGEBYSCORE', dk, '-inf', now - 60000)
local v = redis.call('HMGET', tk, 'st', 'seq', 'dl', 'region')
local status, seq, ahead, dl = 'gone', 0, 0, 0
if v[1] and v[4] == region then
  status = v[1]; seq = tonumber(v[2])
  if status == 'queued' then
    ahead = redis.call('ZCOUNT', qw, '-inf', '(' .. v[2]) + redis.call('ZCOUNT', qp, '-inf', '(' .. v[2])
  elseif status == 'admitted' then dl = tonumber(v[3]) end
end
return {'OK', ep, status, seq, ahead, redis.call('ZCARD', qw) + redis.call('ZCARD', qp), redis.call('ZCARD', dk), dl}
`)

// luaUse: ARGV 3 now, 4 region, 5 ticket.
var luaUse = newScript(luaPrelude + `
local tk = P .. 't:' .. ARGV[5]
local v = redis.call('HMGET', tk, 'st', 'dl', 'region')
if v[3] ~= ARGV[4] then return {'OK', ep, 0} end
if v[1] == 'used' then return {'OK', ep, 1} end
if v[1] == 'admitted' and tonumber(v[2]) >= tonumber(ARGV[3]) then
  redis.call('HSET', tk, 'st', 'used')
  redis.call('ZREM', P .. 'adm:' .. ARGV[4], ARGV[5])
  return {'OK', ep, 1}
end
return {'OK', ep, 0}
`)

// luaLeave: ARGV 3 now, 4 region, 5 ticket, 6 gPerMin, 7 gBurst, 8 rPerMin,
// 9 rBurst, 10 ttlMs.
var luaLeave = newScript(luaPrelude + `
local now, region, id = tonumber(ARGV[3]), ARGV[4], ARGV[5]
local gper, gburst, rper, rburst, ttlms = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
if redis.call('HGET', meta, 'halved') == '1' then gper = gper / 2 end
local tk = P .. 't:' .. id
local v = redis.call('HMGET', tk, 'st', 'region', 'lane')
if not v[1] or v[2] ~= region then return {'OK', ep, 0} end
local r = 0
if v[1] == 'queued' then
  redis.call('ZREM', P .. 'q:' .. region .. ':' .. v[3], id)
elseif v[1] == 'admitted' and redis.call('ZREM', P .. 'adm:' .. region, id) == 1 then
  local gk, rk = P .. 'b:global', P .. 'b:r:' .. region
  local tok, ts = refill(gk, gper / 60000, gburst, now)
  save(gk, math.min(gburst, tok + 1), ts, ttlms)
  tok, ts = refill(rk, rper / 60000, rburst, now)
  save(rk, math.min(rburst, tok + 1), ts, ttlms)
  r = 1
end
redis.call('HSET', tk, 'st', 'gone')
return {'OK', ep, r}
`)

// luaTake: ARGV 3 now, 4 bucket, 5 perMin, 6 burst, 7 ttlMs.
var luaTake = newScript(luaPrelude + `
local now = tonumber(ARGV[3])
local k = P .. 'b:x:' .. ARGV[4]
local tok, ts = refill(k, tonumber(ARGV[5]) / 60000, tonumber(ARGV[6]), now)
local ok = 0
if tok >= 1 then tok = tok - 1; ok = 1 end
save(k, tok, ts, tonumber(ARGV[7]))
return {'OK', ep, ok}
`)

// luaMeta: ARGV 3 op ("" = read), 4 region.
var luaMeta = newScript(luaPrelude + `
local op, region = ARGV[3], ARGV[4]
local f = 'armed'
if region ~= '' then f = 'armed:' .. region end
if op == 'arm' then redis.call('HSET', meta, f, '1')
elseif op == 'disarm' then redis.call('HDEL', meta, f)
elseif op == 'freeze' then redis.call('HSET', meta, 'frozen', '1')
elseif op == 'unfreeze' then redis.call('HDEL', meta, 'frozen')
elseif op == 'halve' then redis.call('HSET', meta, 'halved', '1')
elseif op == 'restore' then redis.call('HDEL', meta, 'halved')
elseif op == 'waitlist' then redis.call('HSET', meta, 'waitlist', '1')
elseif op == 'unwaitlist' then redis.call('HDEL', meta, 'waitlist')
end
return {'OK', ep, redis.call('HGETALL', meta)}
`)

// luaRearm: ARGV 1 known epoch, 2 random suffix, 3 bootstrap-only flag.
// Starts generation max(known, stored)+1, globally armed; with the
// bootstrap flag it only creates a disarmed generation-1 room when none
// exists.
var luaRearm = newScript(`
local meta = KEYS[1]
local function gen(e) return tonumber(string.match(e or '', '^(%d+)%-')) or 0 end
local cur = redis.call('HGET', meta, 'epoch')
if ARGV[3] == '1' then
  if cur then return cur end
  local e = '1-' .. ARGV[2]
  redis.call('HSET', meta, 'epoch', e, 'seq', 0)
  return e
end
local g = math.max(gen(ARGV[1]), gen(cur)) + 1
local e = g .. '-' .. ARGV[2]
redis.call('DEL', meta)
redis.call('HSET', meta, 'epoch', e, 'seq', 0, 'armed', '1')
return e
`)

// Queue is the many-node Queue.
type Queue struct {
	r *Conn // immutable after New

	mu    sync.Mutex
	known string // epoch this node has seen; guarded by mu
}

var _ state.Queue = (*Queue)(nil)

// NewQueue returns a Queue on c. With bootstrap set it creates a
// disarmed generation-1 room if Redis holds none (first deployment, dev);
// without it, an empty Redis is state loss until an operator re-arms.
func NewQueue(ctx context.Context, r *Conn, bootstrap bool) (*Queue, error) {
	q := &Queue{r: r}
	if bootstrap {
		e, err := r.run(ctx, luaRearm, []string{queueTag + "meta"}, "", randSuffix(), "1").Text()
		if err != nil {
			return nil, fmt.Errorf("%w: bootstrap: %w", state.ErrUnavailable, err)
		}
		q.known = e
	}
	return q, nil
}

func randSuffix() string {
	e := state.NewEpoch(0)
	_, r, _ := strings.Cut(e, "-")
	return r
}

func (q *Queue) knownEpoch() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.known
}

// run executes a prelude script and returns the values after {'OK', epoch}.
func (q *Queue) run(ctx context.Context, s *script, args ...any) ([]any, error) {
	known := q.knownEpoch()
	argv := append([]any{known, queueTag}, args...)
	res, err := q.r.run(ctx, s, []string{queueTag + "meta"}, argv...).Slice()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", state.ErrUnavailable, err)
	}
	if len(res) < 2 {
		return nil, fmt.Errorf("%w: short script reply", state.ErrUnavailable)
	}
	if s, _ := res[0].(string); s == "LOST" {
		return nil, state.ErrStateLost
	}
	ep, _ := res[1].(string)
	if ep != known {
		q.mu.Lock()
		if state.EpochGen(ep) > state.EpochGen(q.known) || q.known == "" {
			q.known = ep
		}
		q.mu.Unlock()
	}
	return res[2:], nil
}

func parseMeta(epoch string, flat []any) state.Meta {
	m := state.Meta{Epoch: epoch, ArmedRegions: map[string]bool{}}
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		switch {
		case k == "armed":
			m.ArmedGlobal = true
		case strings.HasPrefix(k, "armed:"):
			m.ArmedRegions[strings.TrimPrefix(k, "armed:")] = true
		case k == "frozen":
			m.Frozen = true
		case k == "halved":
			m.Halved = true
		case k == "waitlist":
			m.Waitlist = true
		}
	}
	return m
}

func (q *Queue) meta(ctx context.Context, op state.Op, region string) (state.Meta, error) {
	res, err := q.run(ctx, luaMeta, string(op), region)
	if err != nil {
		return state.Meta{}, err
	}
	flat, _ := res[0].([]any)
	return parseMeta(q.knownEpoch(), flat), nil
}

// Meta implements Queue.
func (q *Queue) Meta(ctx context.Context) (state.Meta, error) { return q.meta(ctx, "", "") }

// Control implements Queue.
func (q *Queue) Control(ctx context.Context, c state.Control) (state.Meta, error) {
	switch c.Op {
	case state.OpRearm:
		e, err := q.r.run(ctx, luaRearm, []string{queueTag + "meta"}, q.knownEpoch(), randSuffix(), "0").Text()
		if err != nil {
			return state.Meta{}, fmt.Errorf("%w: rearm: %w", state.ErrUnavailable, err)
		}
		q.mu.Lock()
		q.known = e
		q.mu.Unlock()
		return q.Meta(ctx)
	case state.OpArm, state.OpDisarm, state.OpFreeze, state.OpUnfreeze, state.OpHalve, state.OpRestore, state.OpWaitlist, state.OpUnwaitlist:
		return q.meta(ctx, c.Op, c.Region)
	}
	return state.Meta{}, fmt.Errorf("%w: unknown op %q", state.ErrBadArgument, c.Op)
}

func b2s(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func (q *Queue) drain(ctx context.Context, mode string, t state.Ticket, r state.Rates, now time.Time) (state.Position, error) {
	if t.ID == "" || t.Region == "" || (mode == "join" && !t.Lane.Valid()) {
		return state.Position{}, fmt.Errorf("%w: ticket %+v", state.ErrBadArgument, t)
	}
	res, err := q.run(ctx, luaDrain, now.UnixMilli(), t.Region, t.ID, string(t.Lane),
		r.GlobalPerMin, r.GlobalBurst, r.RegionPerMin, r.RegionBurst,
		b2s(r.PxstreamAllowed), b2s(r.Frozen), r.JoinWindow.Milliseconds(), r.KeepPlace.Milliseconds(),
		max(r.TicketTTL.Milliseconds(), 1), max(r.MaxAdmits, 1), mode)
	if err != nil {
		return state.Position{}, err
	}
	if len(res) < 6 {
		return state.Position{}, fmt.Errorf("%w: short drain reply", state.ErrUnavailable)
	}
	st, _ := res[0].(string)
	p := state.Position{Status: state.Status(st), Seq: toInt(res[1]), Ahead: toInt(res[2]), Depth: toInt(res[3]),
		DrainPerMin: toInt(res[4]), Epoch: q.knownEpoch()}
	if dl := toInt(res[5]); dl > 0 {
		p.JoinBy = time.UnixMilli(dl)
	}
	return p, nil
}

// Join implements Queue.
func (q *Queue) Join(ctx context.Context, t state.Ticket, r state.Rates, now time.Time) (state.Position, error) {
	return q.drain(ctx, "join", t, r, now)
}

// Poll implements Queue.
func (q *Queue) Poll(ctx context.Context, t state.Ticket, r state.Rates, now time.Time) (state.Position, error) {
	return q.drain(ctx, "poll", t, r, now)
}

// Use implements Queue.
func (q *Queue) Use(ctx context.Context, t state.Ticket, now time.Time) (bool, error) {
	res, err := q.run(ctx, luaUse, now.UnixMilli(), t.Region, t.ID)
	if err != nil {
		return false, err
	}
	return toInt(res[0]) == 1, nil
}

// Leave implements Queue.
func (q *Queue) Leave(ctx context.Context, t state.Ticket, r state.Rates, now time.Time) (bool, error) {
	res, err := q.run(ctx, luaLeave, now.UnixMilli(), t.Region, t.ID,
		r.GlobalPerMin, r.GlobalBurst, r.RegionPerMin, r.RegionBurst, max(r.TicketTTL.Milliseconds(), 1))
	if err != nil {
		return false, err
	}
	return toInt(res[0]) == 1, nil
}

// Take implements Queue.
func (q *Queue) Take(ctx context.Context, bucket string, perMin, burst float64, now time.Time) (bool, error) {
	res, err := q.run(ctx, luaTake, now.UnixMilli(), bucket, perMin, burst, int64(24*time.Hour/time.Millisecond))
	if err != nil {
		return false, err
	}
	return toInt(res[0]) == 1, nil
}

// luaAcquire: KEYS lease keys; ARGV 1 holder, 2 now, 3 deadline, 4.. limits.
var luaAcquire = newScript(`
for i, k in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', k, '-inf', ARGV[2])
  local n = redis.call('ZCARD', k)
  if redis.call('ZSCORE', k, ARGV[1]) then n = n - 1 end
  if n >= tonumber(ARGV[3 + i]) then return i - 1 end
end
for _, k in ipairs(KEYS) do
  redis.call('ZADD', k, ARGV[3], ARGV[1])
  local last = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', k, math.max(1, tonumber(last[2]) - tonumber(ARGV[2])))
end
return -1
`)

// luaRefresh: KEYS lease keys; ARGV 1 holder, 2 deadline, 3 now.
var luaRefresh = newScript(`
for _, k in ipairs(KEYS) do
  if redis.call('ZADD', k, 'XX', 'CH', ARGV[2], ARGV[1]) == 1 then
    local last = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
    redis.call('PEXPIRE', k, math.max(1, tonumber(last[2]) - tonumber(ARGV[3])))
  end
end
return 0
`)

// Leases is the many-node Leases. All lease keys share the {egbel}
// hash tag so a multi-key acquire is one slot.
type Leases struct{ r *Conn }

var _ state.Leases = (*Leases)(nil)

// NewLeases returns Leases on r.
func NewLeases(r *Conn) *Leases { return &Leases{r: r} }

func leaseKeys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = leaseTag + k
	}
	return out
}

// Acquire implements Leases.
func (l *Leases) Acquire(ctx context.Context, holder string, limits []state.LeaseLimit, ttl time.Duration, now time.Time) (int, error) {
	if err := state.CheckLeaseLimits(holder, limits); err != nil {
		return 0, err
	}
	if len(limits) == 0 {
		return -1, nil
	}
	keys := make([]string, len(limits))
	args := []any{holder, now.UnixMilli(), now.UnixMilli() + ttl.Milliseconds()}
	for i, lim := range limits {
		keys[i] = leaseTag + lim.Key
		args = append(args, lim.Limit)
	}
	n, err := l.r.run(ctx, luaAcquire, keys, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("%w: acquire: %w", state.ErrUnavailable, err)
	}
	return n, nil
}

// Refresh implements Leases.
func (l *Leases) Refresh(ctx context.Context, holder string, keys []string, ttl time.Duration, now time.Time) error {
	if len(keys) == 0 {
		return nil
	}
	if err := l.r.run(ctx, luaRefresh, leaseKeys(keys), holder, now.UnixMilli()+ttl.Milliseconds(), now.UnixMilli()).Err(); err != nil {
		return fmt.Errorf("%w: refresh: %w", state.ErrUnavailable, err)
	}
	return nil
}

// Release implements Leases.
func (l *Leases) Release(ctx context.Context, holder string, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := l.r.c.Pipeline()
	for _, k := range leaseKeys(keys) {
		pipe.ZRem(ctx, k, holder)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("%w: release: %w", state.ErrUnavailable, err)
	}
	return nil
}

// Budgets is the many-node Budgets.
type Budgets struct{ r *Conn }

var _ state.Budgets = (*Budgets)(nil)

// NewBudgets returns Budgets on r.
func NewBudgets(r *Conn) *Budgets { return &Budgets{r: r} }

// Used implements Budgets.
func (b *Budgets) Used(ctx context.Context, key string, _ time.Time) (int64, error) {
	n, err := b.r.c.Get(ctx, budgetSpace+key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: budget: %w", state.ErrUnavailable, err)
	}
	return n, nil
}

// Add implements Budgets.
func (b *Budgets) Add(ctx context.Context, key string, delta int64, ttl time.Duration, _ time.Time) (int64, error) {
	if key == "" {
		return 0, fmt.Errorf("%w: empty budget key", state.ErrBadArgument)
	}
	pipe := b.r.c.TxPipeline()
	incr := pipe.IncrBy(ctx, budgetSpace+key, delta)
	pipe.PExpire(ctx, budgetSpace+key, ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("%w: budget: %w", state.ErrUnavailable, err)
	}
	return incr.Val(), nil
}
