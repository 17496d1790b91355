package redisstate

import (
	"context"
	"fmt"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// ---- Redis ----

// Members is one edge's view of the fleet's membership on Redis:
// {egbe-edges}:alive scores each edge by the time it is dead after, by
// Redis's own clock (TIME), so the edges' clocks never disagree about who
// is dead; {egbe-edges}:url holds their URLs (keys.go).
type Members struct {
	r   *Conn         // immutable
	me  state.Member  // immutable
	ttl time.Duration // immutable
}

var _ state.Members = (*Members)(nil)

// NewMembers returns me's view of the membership on r; ttl 0 is
// DefaultMemberTTL.
func NewMembers(r *Conn, me state.Member, ttl time.Duration) (*Members, error) {
	if ttl <= 0 {
		ttl = state.DefaultMemberTTL
	}
	if err := state.CheckMember(me, ttl); err != nil {
		return nil, err
	}
	return &Members{r: r, me: me, ttl: ttl}, nil
}

// Self is the edge this view beats for.
func (m *Members) Self() state.Member { return m.me }

// TTL is how long a beat keeps this edge alive.
func (m *Members) TTL() time.Duration { return m.ttl }

// membersLua is the membership's Lua, shared by every script that reads
// or beats it (voice rooms, the fleet board): now is Redis's clock in ms.
var membersLua = fmt.Sprintf(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ALIVE, URLS = '%s', '%s'
local function beat(id, url, ttl)
  redis.call('ZADD', ALIVE, now + tonumber(ttl), id)
  redis.call('HSET', URLS, id, url)
  local gone = redis.call('ZRANGEBYSCORE', ALIVE, '-inf', now - %d, 'LIMIT', 0, 64)
  if #gone > 0 then
    redis.call('ZREM', ALIVE, unpack(gone))
    redis.call('HDEL', URLS, unpack(gone))
  end
end
local function live(id)
  local s = redis.call('ZSCORE', ALIVE, id)
  return s ~= false and s ~= nil and tonumber(s) > now
end
`, edgesAlive, edgesURL, state.ForgetDeadAfter.Milliseconds())

// KEYS[1] alive, KEYS[2] urls; ARGV id, url, ttl ms.
var luaMemberBeat = newScript(membersLua + `
beat(ARGV[1], ARGV[2], ARGV[3])
return 0
`)

// KEYS[1] alive, KEYS[2] urls; ARGV the ids asked about (none: every one).
// Returns {id, url, id, url, ...} of the live ones.
var luaMembersAlive = newScript(membersLua + `
local ids = ARGV
if #ids == 0 then ids = redis.call('ZRANGEBYSCORE', ALIVE, '(' .. now, '+inf') end
local out = {}
for _, id in ipairs(ids) do
  if live(id) then
    out[#out + 1] = id
    out[#out + 1] = redis.call('HGET', URLS, id) or ''
  end
end
return out
`)

// KEYS[1] alive, KEYS[2] urls; ARGV id.
var luaMemberLeave = newScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 0
`)

var membersKeys = []string{edgesAlive, edgesURL}

// Beat implements Members.
func (m *Members) Beat(ctx context.Context) error {
	err := m.r.run(ctx, luaMemberBeat, membersKeys, m.me.ID, m.me.URL, m.ttl.Milliseconds()).Err()
	return m.r.wrap("membership beat", err)
}

// Alive implements Members.
func (m *Members) Alive(ctx context.Context, ids ...string) (map[string]state.Member, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	flat, err := m.r.run(ctx, luaMembersAlive, membersKeys, args...).StringSlice()
	if err != nil {
		return nil, m.r.wrap("membership", err)
	}
	out := make(map[string]state.Member, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		out[flat[i]] = state.Member{ID: flat[i], URL: flat[i+1]}
	}
	return out, nil
}

// Leave implements Members.
func (m *Members) Leave(ctx context.Context) error {
	return m.r.wrap("membership leave", m.r.run(ctx, luaMemberLeave, membersKeys, m.me.ID).Err())
}

// Run beats every third of the TTL until ctx ends.
func (m *Members) Run(ctx context.Context) error { return state.RunHeartbeat(ctx, m, m.ttl) }
