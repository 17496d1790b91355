package signalling

// The Redis registry store: the fleet's streamers, visible to the
// matchmaker on every edge (README.md, "Fleet").
//
// Key layout (one hash tag, so every script touches one Cluster slot;
// scripts name {px}:ids in KEYS and derive the rest from the same prefix):
//
//	{px}:ids          zset  streamer id -> seq (registration order, fleet-wide)
//	{px}:pop:<pop>    zset  streamer id -> seq (LeaseIdle scans one POP)
//	{px}:seq          int   registration counter
//	{px}:s:<id>       hash  id pop codecs edge conn seq idle players sess until
//	                        (PEXPIRE ttl, refreshed by the owning edge's heartbeat)
//	{px}:q:<session>  str   session id -> streamer id (the lease's reverse index)
//	{px}:edge:<edge>  str   edge liveness (PEXPIRE ttl, heartbeat)
//
// Times are Unix milliseconds from the caller's injected clock (Deps.Now),
// never Redis's, so lease expiry is the same as in memStore. States are
// derived exactly as in memStore: players > 0 is streaming, else a session
// with until in the future is leased, else idle. A lapsed lease is dropped
// lazily by the scripts that write.
//
// The fleet side (add, remove, rename, joined, left) is called under the
// Server's lock, so it never waits for Redis: it updates this edge's local
// view of its own streamers and wakes the cluster's sync loop, which
// upserts each changed streamer with one script (state, not operations:
// the same upsert refreshes the TTL on every heartbeat and re-registers
// everything after Redis comes back empty). claim and the matchmaker side
// (lease, leaseIdle, release, snapshot, get) go to Redis synchronously and
// fail fast with ErrFleetUnavailable while Redis is known to be down.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	pxTag    = "{px}:"
	pxIDsKey = pxTag + "ids"
)

// luaPrelude holds the helpers every registry script shares.
const luaPrelude = `
local P = '{px}:'
local function skey(id) return P .. 's:' .. id end
local function qkey(s) return P .. 'q:' .. s end
local function num(v) return tonumber(v) or 0 end
-- expire drops a lapsed lease; it returns the state and the live session.
local function expire(id, now)
  local k = skey(id)
  local h = redis.call('HMGET', k, 'players', 'sess', 'until')
  if num(h[1]) > 0 then return 'streaming', (h[2] or '') end
  local s = h[2]
  if s and s ~= '' then
    local u = num(h[3])
    if now < u then return 'leased', s end
    if redis.call('GET', qkey(s)) == id then redis.call('DEL', qkey(s)) end
    redis.call('HSET', k, 'idle', h[3], 'sess', '', 'until', '0')
  end
  return 'idle', ''
end
local function setlease(id, sess, untilv, now)
  local other = redis.call('GET', qkey(sess))
  if other and other ~= id and redis.call('EXISTS', skey(other)) == 1 then
    local _, os = expire(other, now)
    if os == sess then return {'sessionleased', other} end
  end
  redis.call('HSET', skey(id), 'sess', sess, 'until', string.format('%d', untilv))
  local ttl = untilv - now + 3600000
  if ttl < 1000 then ttl = 1000 end
  redis.call('SET', qkey(sess), id, 'PX', string.format('%d', ttl))
  return nil
end
local function hascodec(codecs, codec)
  return codec == '' or string.find(codecs or '', ',' .. codec .. ',', 1, true) ~= nil
end
`

// scriptUpsert registers or refreshes one of the calling edge's streamers.
// ARGV: id, oldid (a rename), edge, pop, codecs, conn, players, now, grace, ttl.
var scriptUpsert = redis.NewScript(luaPrelude + `
local id, oldid, edge, pop, codecs, conn = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local players, now, grace, ttl = num(ARGV[7]), num(ARGV[8]), num(ARGV[9]), ARGV[10]
local k = skey(id)
if oldid ~= '' and oldid ~= id and redis.call('EXISTS', k) == 0 then
  local ok = skey(oldid)
  local o = redis.call('HMGET', ok, 'edge', 'conn', 'seq', 'pop', 'sess')
  if o[1] == edge and o[2] == conn then
    redis.call('RENAME', ok, k)
    redis.call('HSET', k, 'id', id)
    redis.call('ZREM', KEYS[1], oldid)
    redis.call('ZADD', KEYS[1], o[3], id)
    redis.call('ZREM', P .. 'pop:' .. o[4], oldid)
    redis.call('ZADD', P .. 'pop:' .. o[4], o[3], id)
    if o[5] ~= '' and redis.call('GET', qkey(o[5])) == oldid then
      redis.call('SET', qkey(o[5]), id, 'KEEPTTL')
    end
  end
end
local h = redis.call('HMGET', k, 'edge', 'conn', 'players', 'sess', 'pop')
if h[1] and h[1] ~= edge then return {'taken', h[1]} end
if h[1] and h[2] ~= conn then
  -- the same id from a new connection on this edge: a new registration
  redis.call('DEL', k)
  redis.call('ZREM', P .. 'pop:' .. h[5], id)
  if h[4] ~= '' and redis.call('GET', qkey(h[4])) == id then redis.call('DEL', qkey(h[4])) end
  h[1] = false
end
if not h[1] then
  local seq = redis.call('INCR', P .. 'seq')
  redis.call('HSET', k, 'id', id, 'pop', pop, 'codecs', codecs, 'edge', edge, 'conn', conn,
    'seq', seq, 'idle', conn, 'players', string.format('%d', players), 'sess', '', 'until', '0')
  redis.call('ZADD', KEYS[1], seq, id)
  redis.call('ZADD', P .. 'pop:' .. pop, seq, id)
else
  if num(h[3]) > 0 and players == 0 then
    redis.call('HSET', k, 'idle', string.format('%d', now))
    if h[4] ~= '' then redis.call('HSET', k, 'until', string.format('%d', now + grace)) end
  end
  redis.call('HSET', k, 'players', string.format('%d', players))
end
redis.call('PEXPIRE', k, ttl)
return {'ok'}
`)

// scriptRemove unregisters a streamer if this edge's connection still owns
// it. ARGV: id, edge, conn.
var scriptRemove = redis.NewScript(luaPrelude + `
local id = ARGV[1]
local k = skey(id)
local h = redis.call('HMGET', k, 'edge', 'conn', 'pop', 'sess')
if h[1] == ARGV[2] and h[2] == ARGV[3] then
  redis.call('DEL', k)
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZREM', P .. 'pop:' .. h[3], id)
  if h[4] ~= '' and redis.call('GET', qkey(h[4])) == id then redis.call('DEL', qkey(h[4])) end
end
return {'ok'}
`)

// scriptLease is Lease (mode "lease") and a token-mode subscribe's claim
// (mode "claim": only ever extends). ARGV: id, session, now, until, mode.
var scriptLease = redis.NewScript(luaPrelude + `
local id, sess, now, untilv, mode = ARGV[1], ARGV[2], num(ARGV[3]), num(ARGV[4]), ARGV[5]
local k = skey(id)
if redis.call('EXISTS', k) == 0 then return {'unknown'} end
local st, s = expire(id, now)
if s == sess then
  if mode == 'lease' or untilv > num(redis.call('HGET', k, 'until')) then
    redis.call('HSET', k, 'until', string.format('%d', untilv))
  end
  return {'ok'}
end
if st ~= 'idle' then return {'notidle', st} end
local e = setlease(id, sess, untilv, now)
if e then return e end
return {'ok'}
`)

// scriptLeaseIdle picks the longest-idle streamer in a POP with a codec and
// leases it. ARGV: pop, codec (upper case, "" = any), session, now, until.
var scriptLeaseIdle = redis.NewScript(luaPrelude + `
local pop, codec, sess, now, untilv = ARGV[1], ARGV[2], ARGV[3], num(ARGV[4]), num(ARGV[5])
local other = redis.call('GET', qkey(sess))
if other and redis.call('EXISTS', skey(other)) == 1 then
  local st, s = expire(other, now)
  if s == sess and st ~= 'idle' then
    local h = redis.call('HMGET', skey(other), 'pop', 'codecs', 'players')
    if h[1] == pop and hascodec(h[2], codec) then
      if num(h[3]) == 0 then redis.call('HSET', skey(other), 'until', string.format('%d', untilv)) end
      return {'ok', other, redis.call('HGETALL', skey(other))}
    end
    return {'sessionleased', other}
  end
end
local pk = P .. 'pop:' .. pop
local best, bidle
for _, id in ipairs(redis.call('ZRANGE', pk, 0, -1)) do
  local h = redis.call('HMGET', skey(id), 'codecs', 'players', 'sess', 'until', 'idle')
  if not h[1] then
    redis.call('ZREM', pk, id)
    redis.call('ZREM', KEYS[1], id)
  elseif num(h[2]) == 0 and hascodec(h[1], codec) then
    local idle, free = num(h[5]), true
    if h[3] ~= '' then
      if now < num(h[4]) then free = false else idle = num(h[4]) end
    end
    -- ZRANGE is in registration order, so a strict < keeps the earlier on ties
    if free and (not best or idle < bidle) then best, bidle = id, idle end
  end
end
if not best then return {'noidle'} end
expire(best, now)
local e = setlease(best, sess, untilv, now)
if e then return e end
return {'ok', best, redis.call('HGETALL', skey(best))}
`)

// scriptRelease drops a session's lease. ARGV: session, now.
var scriptRelease = redis.NewScript(luaPrelude + `
local sess, now = ARGV[1], ARGV[2]
local id = redis.call('GET', qkey(sess))
if not id then return {'unknownsession'} end
redis.call('DEL', qkey(sess))
local k = skey(id)
if redis.call('HGET', k, 'sess') == sess then
  redis.call('HSET', k, 'sess', '', 'until', '0')
  if num(redis.call('HGET', k, 'players')) == 0 then redis.call('HSET', k, 'idle', now) end
end
return {'ok'}
`)

// scriptSnapshot returns every live streamer hash in registration order,
// dropping ids whose hash expired (their edge died).
var scriptSnapshot = redis.NewScript(luaPrelude + `
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local h = redis.call('HGETALL', skey(id))
  if #h == 0 then redis.call('ZREM', KEYS[1], id) else out[#out + 1] = h end
end
return out
`)

var allScripts = []*redis.Script{scriptUpsert, scriptRemove, scriptLease, scriptLeaseIdle, scriptRelease, scriptSnapshot}

// localStreamer is this edge's view of one of its own streamers.
type localStreamer struct {
	pop       string
	codecs    string // ",H264,VP8," for the scripts' substring match
	conn      string // ConnectedAt in ms: tells two registrations of one id apart
	players   int
	renamedOf string // the id Redis knows it by, until the next sync
}

// redisStore is the registryStore of a clustered Server.
type redisStore struct {
	cl    *Cluster      // immutable
	grace time.Duration // immutable

	mu      sync.Mutex
	local   map[string]*localStreamer // guarded by mu: this edge's streamers by id
	removed map[string]string         // guarded by mu: id -> conn, to unregister
	dirty   map[string]struct{}       // guarded by mu: ids to upsert at the next sync
}

var _ registryStore = (*redisStore)(nil)

func newRedisStore(cl *Cluster, grace time.Duration) *redisStore {
	return &redisStore{cl: cl, grace: grace, local: make(map[string]*localStreamer),
		removed: make(map[string]string), dirty: make(map[string]struct{})}
}

func msString(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// ---- fleet side: local, then synced by the cluster ----

func (r *redisStore) add(e entry) error {
	r.mu.Lock()
	if _, ok := r.local[e.info.ID]; ok {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrStreamerExists, e.info.ID)
	}
	r.local[e.info.ID] = &localStreamer{pop: e.info.POP, codecs: "," + strings.Join(e.info.Codecs, ",") + ",",
		conn: msString(e.info.ConnectedAt)}
	delete(r.removed, e.info.ID)
	r.dirty[e.info.ID] = struct{}{}
	r.mu.Unlock()
	r.cl.kickSync()
	return nil
}

func (r *redisStore) remove(id string) {
	r.mu.Lock()
	if l, ok := r.local[id]; ok {
		delete(r.local, id)
		delete(r.dirty, id)
		known := id
		if l.renamedOf != "" {
			known = l.renamedOf
		}
		r.removed[known] = l.conn
	}
	r.mu.Unlock()
	r.cl.kickSync()
}

func (r *redisStore) rename(oldID, newID string) error {
	r.mu.Lock()
	l, ok := r.local[oldID]
	if !ok {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrUnknownStreamer, oldID)
	}
	if _, ok := r.local[newID]; ok && newID != oldID {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrStreamerExists, newID)
	}
	delete(r.local, oldID)
	delete(r.dirty, oldID)
	if l.renamedOf == "" {
		l.renamedOf = oldID
	}
	r.local[newID] = l
	r.dirty[newID] = struct{}{}
	r.mu.Unlock()
	r.cl.kickSync()
	return nil
}

func (r *redisStore) joined(id string) error {
	r.mu.Lock()
	l, ok := r.local[id]
	if ok {
		l.players++
		r.dirty[id] = struct{}{}
	}
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownStreamer, id)
	}
	r.cl.kickSync()
	return nil
}

func (r *redisStore) left(id string, _ time.Time, _ time.Duration) {
	r.mu.Lock()
	l, ok := r.local[id]
	if ok && l.players > 0 {
		l.players--
		r.dirty[id] = struct{}{}
	}
	r.mu.Unlock()
	r.cl.kickSync()
}

// sync pushes this edge's changes (all of its streamers when full, as the
// heartbeat does) to Redis in one pipeline.
func (r *redisStore) sync(ctx context.Context, full bool, now time.Time) error {
	type up struct {
		id string
		l  localStreamer
	}
	r.mu.Lock()
	var ups []up
	for id, l := range r.local {
		if _, d := r.dirty[id]; full || d {
			ups = append(ups, up{id, *l})
		}
	}
	rm := make(map[string]string, len(r.removed))
	for id, conn := range r.removed {
		rm[id] = conn
	}
	clear(r.dirty)
	clear(r.removed)
	r.mu.Unlock()
	if len(ups) == 0 && len(rm) == 0 {
		return nil
	}
	ttl := strconv.FormatInt(r.cl.ttl.Milliseconds(), 10)
	nowS, grace := msString(now), strconv.FormatInt(r.grace.Milliseconds(), 10)
	cmds, err := r.cl.pipeScripts(ctx, func(p redis.Pipeliner) {
		for id, conn := range rm {
			scriptRemove.EvalSha(ctx, p, []string{pxIDsKey}, id, r.cl.edge, conn)
		}
		for _, u := range ups {
			scriptUpsert.EvalSha(ctx, p, []string{pxIDsKey}, u.id, u.l.renamedOf, r.cl.edge, u.l.pop,
				u.l.codecs, u.l.conn, u.l.players, nowS, grace, ttl)
		}
	})
	if err != nil {
		// Not applied: mark it all again; the next sync retries.
		r.mu.Lock()
		for id, conn := range rm {
			if _, back := r.local[id]; !back {
				r.removed[id] = conn
			}
		}
		for _, u := range ups {
			if _, ok := r.local[u.id]; ok {
				r.dirty[u.id] = struct{}{}
			}
		}
		r.mu.Unlock()
		return err
	}
	r.mu.Lock()
	for i, u := range ups {
		c := cmds[len(rm)+i]
		if res, _ := c.(*redis.Cmd).Slice(); len(res) > 0 && res[0] == "taken" {
			r.cl.log.Warn("streamer id registered by another edge; not in the fleet until it leaves",
				"streamer", u.id, "edge", res[1])
		}
		if l, ok := r.local[u.id]; ok && l.renamedOf == u.l.renamedOf {
			l.renamedOf = ""
		}
	}
	r.mu.Unlock()
	return nil
}

// ---- synchronous: claim and the matchmaker side ----

// status maps a script's {code, detail} answer to the registry's errors.
func scriptStatus(res []any, subject string) error {
	if len(res) == 0 {
		return fmt.Errorf("%w: empty script answer", ErrFleetUnavailable)
	}
	code, _ := res[0].(string)
	detail := ""
	if len(res) > 1 {
		detail, _ = res[1].(string)
	}
	switch code {
	case "ok":
		return nil
	case "unknown":
		return fmt.Errorf("%w: %s", ErrUnknownStreamer, subject)
	case "notidle":
		return fmt.Errorf("%w: %s is %s", ErrNotIdle, subject, detail)
	case "sessionleased":
		return fmt.Errorf("%w: %s holds %s", ErrSessionLeased, subject, detail)
	case "noidle":
		return fmt.Errorf("%w: %s", ErrNoIdleStreamer, subject)
	case "unknownsession":
		return fmt.Errorf("%w: %s", ErrUnknownSession, subject)
	}
	return fmt.Errorf("%w: script answered %q", ErrFleetUnavailable, code)
}

func (r *redisStore) runLease(id, sessionID string, now, until time.Time, mode string) error {
	ctx, cancel := r.cl.opContext()
	defer cancel()
	res, err := r.cl.runScript(ctx, scriptLease, []string{pxIDsKey}, id, sessionID, msString(now), msString(until), mode)
	if err != nil {
		return err
	}
	return scriptStatus(res, id)
}

func (r *redisStore) claim(id, sessionID string, now, until time.Time) error {
	return r.runLease(id, sessionID, now, until, "claim")
}

func (r *redisStore) lease(id, sessionID string, now, until time.Time) error {
	return r.runLease(id, sessionID, now, until, "lease")
}

func (r *redisStore) leaseIdle(pop, codec, sessionID string, now, until time.Time) (StreamerInfo, error) {
	ctx, cancel := r.cl.opContext()
	defer cancel()
	res, err := r.cl.runScript(ctx, scriptLeaseIdle, []string{pxIDsKey}, pop, strings.ToUpper(codec), sessionID,
		msString(now), msString(until))
	if err != nil {
		return StreamerInfo{}, err
	}
	if err := scriptStatus(res, fmt.Sprintf("pop %q codec %q", pop, codec)); err != nil {
		if errors.Is(err, ErrSessionLeased) {
			return StreamerInfo{}, fmt.Errorf("%w: %s holds %v", ErrSessionLeased, sessionID, res[1])
		}
		return StreamerInfo{}, err
	}
	if len(res) < 3 {
		return StreamerInfo{}, fmt.Errorf("%w: short leaseIdle answer", ErrFleetUnavailable)
	}
	h, _ := res[2].([]any)
	return infoFromHash(pairs(h), now), nil
}

func (r *redisStore) release(sessionID string, now time.Time) error {
	ctx, cancel := r.cl.opContext()
	defer cancel()
	res, err := r.cl.runScript(ctx, scriptRelease, []string{pxIDsKey}, sessionID, msString(now))
	if err != nil {
		return err
	}
	return scriptStatus(res, sessionID)
}

// snapshot is the whole fleet; nil while Redis is unreachable (counted in
// egbe_pxstream_redis_errors_total and logged by the cluster).
func (r *redisStore) snapshot(now time.Time) []StreamerInfo {
	fleet, err := r.fleetEntries(now)
	if err != nil {
		return nil
	}
	out := make([]StreamerInfo, len(fleet))
	for i, e := range fleet {
		out[i] = e.info
	}
	return out
}

func (r *redisStore) get(id string, now time.Time) (StreamerInfo, bool) {
	h, err := r.hash(id)
	if err != nil || len(h) == 0 {
		return StreamerInfo{}, false
	}
	return infoFromHash(h, now), true
}

// hash reads one streamer's hash (empty: not registered).
func (r *redisStore) hash(id string) (map[string]string, error) {
	if err := r.cl.usable(); err != nil {
		return nil, err
	}
	ctx, cancel := r.cl.opContext()
	defer cancel()
	h, err := r.cl.rdb.HGetAll(ctx, pxTag+"s:"+id).Result()
	if err != nil {
		return nil, r.cl.failed(err)
	}
	return h, nil
}

func pairs(flat []any) map[string]string {
	m := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		m[k] = v
	}
	return m
}

func msTime(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

// infoFromHash derives a StreamerInfo as memStore.view does.
func infoFromHash(h map[string]string, now time.Time) StreamerInfo {
	players, _ := strconv.Atoi(h["players"])
	i := StreamerInfo{ID: h["id"], POP: h["pop"], Players: players, ConnectedAt: msTime(h["conn"])}
	for _, c := range strings.Split(h["codecs"], ",") {
		if c != "" {
			i.Codecs = append(i.Codecs, c)
		}
	}
	sess, until := h["sess"], msTime(h["until"])
	switch {
	case players > 0:
		i.State = StateStreaming
	case sess != "" && now.Before(until):
		i.State = StateLeased
	default:
		i.State = StateIdle
	}
	if sess != "" && (i.State != StateIdle) {
		i.SessionID, i.LeaseUntil = sess, until
	}
	return i
}
