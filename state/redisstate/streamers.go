package redisstate

// The Redis streamer registry (keys.go, {px}). Every script names {px}:ids
// in KEYS and derives the rest from the same tag, so each is one Cluster
// slot. States are derived exactly as in MemoryStreamers; times are the
// caller's Unix milliseconds, never Redis's clock; a lapsed lease is dropped
// lazily by the scripts that write. A registration's hash expires (PEXPIRE)
// TTL after its edge's last sync.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// streamersLua holds the helpers every registry script shares.
var streamersLua = `
local P = '` + pxTag + `'
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

// luaStreamerUpsert registers or refreshes one of the calling edge's
// streamers. ARGV: id, oldid (a rename), edge, pop, codecs, conn, players,
// now, grace, ttl (0: no expiry).
var luaStreamerUpsert = newScript(streamersLua + `
local id, oldid, edge, pop, codecs, conn = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local players, now, grace, ttl = num(ARGV[7]), num(ARGV[8]), num(ARGV[9]), num(ARGV[10])
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
if ttl > 0 then redis.call('PEXPIRE', k, ttl) else redis.call('PERSIST', k) end
return {'ok'}
`)

// luaStreamerRemove unregisters a streamer if the calling edge's
// connection still owns it. ARGV: id, edge, conn.
var luaStreamerRemove = newScript(streamersLua + `
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

// luaStreamerLease is LeaseNamed (mode "lease") and LeaseClaim (mode
// "claim": only ever extends). ARGV: id, session, now, until, mode.
var luaStreamerLease = newScript(streamersLua + `
local id, sess, now, untilv, mode = ARGV[1], ARGV[2], num(ARGV[3]), num(ARGV[4]), ARGV[5]
local k = skey(id)
if redis.call('EXISTS', k) == 0 then return {'unknown'} end
local st, s = expire(id, now)
if s == sess then
  if mode == 'lease' or untilv > num(redis.call('HGET', k, 'until')) then
    redis.call('HSET', k, 'until', string.format('%d', untilv))
  end
  return {'ok', id, redis.call('HGETALL', k)}
end
if st ~= 'idle' then return {'notidle', st} end
local e = setlease(id, sess, untilv, now)
if e then return e end
return {'ok', id, redis.call('HGETALL', k)}
`)

// luaStreamerLeaseIdle picks the longest-idle streamer in a POP with a
// codec and leases it. ARGV: pop, codec (upper case, "" = any), session,
// now, until.
var luaStreamerLeaseIdle = newScript(streamersLua + `
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

// luaStreamerRelease drops a session's lease. ARGV: session, now.
var luaStreamerRelease = newScript(streamersLua + `
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

// luaStreamerList returns every live streamer hash in registration order,
// dropping ids whose hash expired (their edge died).
var luaStreamerList = newScript(streamersLua + `
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local h = redis.call('HGETALL', skey(id))
  if #h == 0 then redis.call('ZREM', KEYS[1], id) else out[#out + 1] = h end
end
return out
`)

// Streamers is the fleet's Streamers on Redis.
type Streamers struct{ r *Conn }

var _ state.Streamers = (*Streamers)(nil)

// NewStreamers returns the registry on r.
func NewStreamers(r *Conn) *Streamers { return &Streamers{r: r} }

var pxKeys = []string{pxIDsKey}

func msString(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// Sync implements Streamers: every removal and upsert in one pipeline.
func (s *Streamers) Sync(ctx context.Context, sy state.StreamerSync) (map[string]string, error) {
	if err := state.CheckStreamerSync(sy); err != nil {
		return nil, err
	}
	if len(sy.Up) == 0 && len(sy.Gone) == 0 {
		return nil, nil
	}
	now, grace, ttl := msString(sy.Now), strconv.FormatInt(sy.Grace.Milliseconds(), 10), strconv.FormatInt(max(sy.TTL.Milliseconds(), 0), 10)
	cmds, err := s.r.pipe(ctx, func(p *scriptPipe) {
		for _, g := range sy.Gone {
			p.eval(luaStreamerRemove, pxKeys, g.ID, sy.Edge, msString(g.ConnectedAt))
		}
		for _, u := range sy.Up {
			p.eval(luaStreamerUpsert, pxKeys, u.ID, u.Was, sy.Edge, u.POP, ","+strings.Join(u.Codecs, ",")+",",
				msString(u.ConnectedAt), u.Players, now, grace, ttl)
		}
	})
	if err != nil {
		return nil, err
	}
	var taken map[string]string
	for i, u := range sy.Up {
		c, ok := cmds[len(sy.Gone)+i].(interface{ Slice() ([]any, error) })
		if !ok {
			continue
		}
		if res, _ := c.Slice(); len(res) > 1 && res[0] == "taken" {
			if taken == nil {
				taken = map[string]string{}
			}
			taken[u.ID], _ = res[1].(string)
		}
	}
	return taken, nil
}

// streamerStatus maps a script's {code, detail} answer to the registry's
// errors.
func streamerStatus(res []any, subject string) error {
	if len(res) == 0 {
		return fmt.Errorf("%w: empty script answer", state.ErrUnavailable)
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
		return fmt.Errorf("%w: %s", state.ErrUnknownStreamer, subject)
	case "notidle":
		return fmt.Errorf("%w: %s is %s", state.ErrNotIdle, subject, detail)
	case "sessionleased":
		return fmt.Errorf("%w: %s holds %s", state.ErrSessionLeased, subject, detail)
	case "noidle":
		return fmt.Errorf("%w: %s", state.ErrNoIdleStreamer, subject)
	case "unknownsession":
		return fmt.Errorf("%w: %s", state.ErrUnknownSession, subject)
	}
	return fmt.Errorf("%w: script answered %q", state.ErrUnavailable, code)
}

// Lease implements Streamers.
func (s *Streamers) Lease(ctx context.Context, l state.StreamerLease, now time.Time) (state.Streamer, error) {
	if err := state.CheckStreamerLease(l); err != nil {
		return state.Streamer{}, err
	}
	var (
		res     []any
		err     error
		subject string
	)
	switch l.Mode {
	case state.LeaseAnyIdle:
		subject = fmt.Sprintf("pop %q codec %q", l.POP, l.Codec)
		res, err = s.r.run(ctx, luaStreamerLeaseIdle, pxKeys, l.POP, strings.ToUpper(l.Codec), l.SessionID,
			msString(now), msString(l.Until)).Slice()
	default:
		mode := "lease"
		if l.Mode == state.LeaseClaim {
			mode = "claim"
		}
		subject = l.ID
		res, err = s.r.run(ctx, luaStreamerLease, pxKeys, l.ID, l.SessionID, msString(now), msString(l.Until), mode).Slice()
	}
	if err != nil {
		return state.Streamer{}, s.r.wrap("lease", err)
	}
	if err := streamerStatus(res, subject); err != nil {
		if l.Mode == state.LeaseAnyIdle && errors.Is(err, state.ErrSessionLeased) {
			return state.Streamer{}, fmt.Errorf("%w: %s holds %v", state.ErrSessionLeased, l.SessionID, res[1])
		}
		return state.Streamer{}, err
	}
	if len(res) < 3 {
		return state.Streamer{}, fmt.Errorf("%w: short lease answer", state.ErrUnavailable)
	}
	h, _ := res[2].([]any)
	return streamerFromHash(pairs(h), now).Streamer, nil
}

// Release implements Streamers.
func (s *Streamers) Release(ctx context.Context, sessionID string, now time.Time) error {
	res, err := s.r.run(ctx, luaStreamerRelease, pxKeys, sessionID, msString(now)).Slice()
	if err != nil {
		return s.r.wrap("release", err)
	}
	return streamerStatus(res, sessionID)
}

// List implements Streamers.
func (s *Streamers) List(ctx context.Context, now time.Time) ([]state.FleetStreamer, error) {
	res, err := s.r.run(ctx, luaStreamerList, pxKeys).Slice()
	if err != nil {
		return nil, s.r.wrap("list streamers", err)
	}
	out := make([]state.FleetStreamer, 0, len(res))
	for _, x := range res {
		h, _ := x.([]any)
		out = append(out, streamerFromHash(pairs(h), now))
	}
	return out, nil
}

// Get implements Streamers: one HGETALL.
func (s *Streamers) Get(ctx context.Context, id string, now time.Time) (state.FleetStreamer, bool, error) {
	h, err := s.r.c.HGetAll(ctx, pxTag+"s:"+id).Result()
	if err != nil {
		return state.FleetStreamer{}, false, s.r.wrap("get streamer", err)
	}
	if len(h) == 0 {
		return state.FleetStreamer{}, false, nil
	}
	return streamerFromHash(h, now), true, nil
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

// streamerFromHash derives a FleetStreamer as MemoryStreamers does.
func streamerFromHash(h map[string]string, now time.Time) state.FleetStreamer {
	players, _ := strconv.Atoi(h["players"])
	i := state.Streamer{ID: h["id"], POP: h["pop"], Players: players, ConnectedAt: msTime(h["conn"])}
	for _, c := range strings.Split(h["codecs"], ",") {
		if c != "" {
			i.Codecs = append(i.Codecs, c)
		}
	}
	sess, until := h["sess"], msTime(h["until"])
	switch {
	case players > 0:
		i.State = state.StreamerStreaming
	case sess != "" && now.Before(until):
		i.State = state.StreamerLeased
	default:
		i.State = state.StreamerIdle
	}
	if sess != "" && i.State != state.StreamerIdle {
		i.SessionID, i.LeaseUntil = sess, until
	}
	return state.FleetStreamer{Streamer: i, Edge: h["edge"]}
}
