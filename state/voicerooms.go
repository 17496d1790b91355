package state

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RoomHolder names the edge a voice room lives on and the base URL its
// clients reach it at.
type RoomHolder struct {
	EdgeID string
	URL    string
}

// VoiceRooms pins each voice room to one edge at a time. A room is held by
// the edge that claimed it for as long as that edge is alive (it heartbeats)
// and keeps the room (it has voice peers there); an edge that stops
// heartbeating loses its rooms to the next edge that claims them.
type VoiceRooms interface {
	// Claim returns the room's holder and whether that is this edge (the
	// room was free, its holder dead, or this edge held it already).
	Claim(ctx context.Context, room string) (holder RoomHolder, mine bool, err error)
	// Heartbeat marks this edge alive and keeps the rooms it holds
	// (re-claiming any whose key was lost). It returns the rooms another
	// edge holds now.
	Heartbeat(ctx context.Context, rooms []string) (lost []string, err error)
	// Release gives room up if this edge holds it.
	Release(ctx context.Context, room string) error
}

// VoiceRoomTimes are the liveness windows. An edge is dead AliveTTL after
// its last heartbeat (heartbeat every AliveTTL/3); a room key outlives its
// holder's heartbeats by RoomTTL so that a slow heartbeat never drops it.
type VoiceRoomTimes struct {
	AliveTTL time.Duration
	RoomTTL  time.Duration
}

// DefaultVoiceRoomTimes: a dead edge's rooms move within 3 s.
var DefaultVoiceRoomTimes = VoiceRoomTimes{AliveTTL: 3 * time.Second, RoomTTL: time.Minute}

func (t VoiceRoomTimes) orDefault() VoiceRoomTimes {
	if t.AliveTTL <= 0 {
		t.AliveTTL = DefaultVoiceRoomTimes.AliveTTL
	}
	if t.RoomTTL <= t.AliveTTL {
		t.RoomTTL = max(DefaultVoiceRoomTimes.RoomTTL, 3*t.AliveTTL)
	}
	return t
}

// MemoryVoiceRoomsStore is the in-process room table. One edge uses
// For(itself); tests hand several edges the same store.
type MemoryVoiceRoomsStore struct {
	now   func() time.Time
	times VoiceRoomTimes

	mu    sync.Mutex
	rooms map[string]string    // guarded by mu: room -> edge id
	alive map[string]time.Time // guarded by mu: edge id -> dead after
	urls  map[string]string    // guarded by mu: edge id -> url
}

// NewMemoryVoiceRooms returns an empty store; now may be nil (time.Now).
func NewMemoryVoiceRooms(now func() time.Time, times VoiceRoomTimes) *MemoryVoiceRoomsStore {
	if now == nil {
		now = time.Now
	}
	return &MemoryVoiceRoomsStore{now: now, times: times.orDefault(),
		rooms: map[string]string{}, alive: map[string]time.Time{}, urls: map[string]string{}}
}

// For returns edge's view of the store.
func (m *MemoryVoiceRoomsStore) For(edgeID, url string) VoiceRooms {
	return &memoryVoiceRooms{m: m, me: RoomHolder{EdgeID: edgeID, URL: url}}
}

type memoryVoiceRooms struct {
	m  *MemoryVoiceRoomsStore
	me RoomHolder
}

func (v *memoryVoiceRooms) beatLocked(now time.Time) {
	v.m.alive[v.me.EdgeID] = now.Add(v.m.times.AliveTTL)
	v.m.urls[v.me.EdgeID] = v.me.URL
}

func (v *memoryVoiceRooms) Claim(_ context.Context, room string) (RoomHolder, bool, error) {
	m := v.m
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	v.beatLocked(now)
	if h, ok := m.rooms[room]; ok && h != v.me.EdgeID && now.Before(m.alive[h]) {
		return RoomHolder{EdgeID: h, URL: m.urls[h]}, false, nil
	}
	m.rooms[room] = v.me.EdgeID
	return v.me, true, nil
}

func (v *memoryVoiceRooms) Heartbeat(_ context.Context, rooms []string) ([]string, error) {
	m := v.m
	m.mu.Lock()
	defer m.mu.Unlock()
	v.beatLocked(m.now())
	var lost []string
	for _, r := range rooms {
		switch h, ok := m.rooms[r]; {
		case !ok:
			m.rooms[r] = v.me.EdgeID
		case h != v.me.EdgeID:
			lost = append(lost, r)
		}
	}
	return lost, nil
}

func (v *memoryVoiceRooms) Release(_ context.Context, room string) error {
	m := v.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rooms[room] == v.me.EdgeID {
		delete(m.rooms, room)
	}
	return nil
}

// RedisVoiceRooms keeps one key per room (value: holder edge id) and one
// hash of edges ("dead-after-ms url"); every key carries the {egbe-voice}
// hash tag so the scripts touch one slot. Liveness is judged by Redis's own
// clock (TIME), so edges' clocks never disagree about who is dead.
type RedisVoiceRooms struct {
	rdb   redis.UniversalClient
	me    RoomHolder
	times VoiceRoomTimes
}

// NewRedisVoiceRooms returns edge's view of the fleet's voice rooms.
func NewRedisVoiceRooms(rdb redis.UniversalClient, edgeID, url string, times VoiceRoomTimes) *RedisVoiceRooms {
	return &RedisVoiceRooms{rdb: rdb, me: RoomHolder{EdgeID: edgeID, URL: url}, times: times.orDefault()}
}

const (
	voiceEdgesKey  = "{egbe-voice}:edges"
	voiceRoomsPref = "{egbe-voice}:room:"
)

// voiceNowLua: the server's clock in milliseconds.
const voiceNowLua = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// KEYS[1] edges hash, KEYS[2] room; ARGV me, url, alive ms, room ms.
// Returns {holder, url}.
var voiceClaimScript = redis.NewScript(voiceNowLua + `
redis.call('HSET', KEYS[1], ARGV[1], (now + tonumber(ARGV[3])) .. ' ' .. ARGV[2])
local h = redis.call('GET', KEYS[2])
if h and h ~= ARGV[1] then
  local v = redis.call('HGET', KEYS[1], h)
  if v then
    local sp = string.find(v, ' ', 1, true)
    if sp and tonumber(string.sub(v, 1, sp - 1)) > now then
      return {h, string.sub(v, sp + 1)}
    end
  end
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[4])
return {ARGV[1], ARGV[2]}
`)

// KEYS[1] edges hash, KEYS[2..] rooms; ARGV me, url, alive ms, room ms.
// Returns the indexes (1-based among rooms) of rooms another edge holds.
// Edges dead for over ten minutes are dropped from the hash.
var voiceHeartbeatScript = redis.NewScript(voiceNowLua + `
redis.call('HSET', KEYS[1], ARGV[1], (now + tonumber(ARGV[3])) .. ' ' .. ARGV[2])
local lost = {}
for i = 2, #KEYS do
  local h = redis.call('GET', KEYS[i])
  if not h or h == ARGV[1] then
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[4])
  else
    lost[#lost + 1] = i - 1
  end
end
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local sp = string.find(all[i + 1], ' ', 1, true)
  if not sp or tonumber(string.sub(all[i + 1], 1, sp - 1)) < now - 600000 then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
return lost
`)

// KEYS[1] room; ARGV me.
var voiceReleaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
`)

func (r *RedisVoiceRooms) args() []any {
	return []any{r.me.EdgeID, r.me.URL, r.times.AliveTTL.Milliseconds(), r.times.RoomTTL.Milliseconds()}
}

// Claim implements VoiceRooms.
func (r *RedisVoiceRooms) Claim(ctx context.Context, room string) (RoomHolder, bool, error) {
	res, err := voiceClaimScript.Run(ctx, r.rdb, []string{voiceEdgesKey, voiceRoomsPref + room}, r.args()...).StringSlice()
	if err != nil {
		return RoomHolder{}, false, fmt.Errorf("%w: voice room claim: %w", ErrUnavailable, err)
	}
	if len(res) != 2 {
		return RoomHolder{}, false, fmt.Errorf("%w: voice room claim: reply of %d fields", ErrUnavailable, len(res))
	}
	h := RoomHolder{EdgeID: res[0], URL: res[1]}
	return h, h.EdgeID == r.me.EdgeID, nil
}

// Heartbeat implements VoiceRooms.
func (r *RedisVoiceRooms) Heartbeat(ctx context.Context, rooms []string) ([]string, error) {
	keys := make([]string, 1, len(rooms)+1)
	keys[0] = voiceEdgesKey
	for _, room := range rooms {
		keys = append(keys, voiceRoomsPref+room)
	}
	idx, err := voiceHeartbeatScript.Run(ctx, r.rdb, keys, r.args()...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("%w: voice heartbeat: %w", ErrUnavailable, err)
	}
	var lost []string
	for _, i := range idx {
		if i >= 1 && int(i) <= len(rooms) {
			lost = append(lost, rooms[i-1])
		}
	}
	return lost, nil
}

// Release implements VoiceRooms.
func (r *RedisVoiceRooms) Release(ctx context.Context, room string) error {
	if err := voiceReleaseScript.Run(ctx, r.rdb, []string{voiceRoomsPref + room}, r.me.EdgeID).Err(); err != nil {
		return fmt.Errorf("%w: voice room release: %w", ErrUnavailable, err)
	}
	return nil
}

// CheckRoomHolderURL rejects a public URL the room table cannot store
// (the edges hash keeps "dead-after url").
func CheckRoomHolderURL(u string) error {
	if strings.ContainsAny(u, " \t\r\n") {
		return fmt.Errorf("state: voice room url %q contains white space", u)
	}
	return nil
}
