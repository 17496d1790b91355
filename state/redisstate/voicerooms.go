package redisstate

import (
	"context"
	"fmt"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// VoiceRooms keeps one key per room (value: holder edge id) beside
// the fleet's membership, under the same {egbe-edges} hash tag, so a claim
// checks its holder's liveness in the same script (keys.go). A claim and a
// heartbeat beat the calling edge's membership.
type VoiceRooms struct {
	m       *Members      // immutable
	roomTTL time.Duration // immutable
}

// NewVoiceRooms returns the room table of m's edge; a room key lives
// roomTTL (at least three membership TTLs) past the last heartbeat.
func NewVoiceRooms(m *Members, roomTTL time.Duration) *VoiceRooms {
	return &VoiceRooms{m: m, roomTTL: max(roomTTL, 3*m.ttl)}
}

// KEYS[1] alive, KEYS[2] urls, KEYS[3] room; ARGV me, url, alive ms, room ms.
// Returns {holder, url}.
var voiceClaimScript = newScript(membersLua + `
beat(ARGV[1], ARGV[2], ARGV[3])
local h = redis.call('GET', KEYS[3])
if h and h ~= ARGV[1] and live(h) then
  return {h, redis.call('HGET', URLS, h) or ''}
end
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[4])
return {ARGV[1], ARGV[2]}
`)

// KEYS[1] alive, KEYS[2] urls, KEYS[3..] rooms; ARGV me, url, alive ms,
// room ms. Returns the indexes (1-based among rooms) of rooms another edge
// holds.
var voiceHeartbeatScript = newScript(membersLua + `
beat(ARGV[1], ARGV[2], ARGV[3])
local lost = {}
for i = 3, #KEYS do
  local h = redis.call('GET', KEYS[i])
  if not h or h == ARGV[1] then
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[4])
  else
    lost[#lost + 1] = i - 2
  end
end
return lost
`)

// KEYS[1] room; ARGV me.
var voiceReleaseScript = newScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
`)

func (v *VoiceRooms) args() []any {
	return []any{v.m.me.ID, v.m.me.URL, v.m.ttl.Milliseconds(), v.roomTTL.Milliseconds()}
}

// Claim implements VoiceRooms.
func (v *VoiceRooms) Claim(ctx context.Context, room string) (state.RoomHolder, bool, error) {
	res, err := v.m.r.run(ctx, voiceClaimScript, []string{edgesAlive, edgesURL, roomPrefix + room}, v.args()...).StringSlice()
	if err != nil {
		return state.RoomHolder{}, false, v.m.r.wrap("voice room claim", err)
	}
	if len(res) != 2 {
		return state.RoomHolder{}, false, fmt.Errorf("%w: voice room claim: reply of %d fields", state.ErrUnavailable, len(res))
	}
	h := state.RoomHolder{EdgeID: res[0], URL: res[1]}
	return h, h.EdgeID == v.m.me.ID, nil
}

// Heartbeat implements VoiceRooms.
func (v *VoiceRooms) Heartbeat(ctx context.Context, rooms []string) ([]string, error) {
	keys := make([]string, 2, len(rooms)+2)
	keys[0], keys[1] = edgesAlive, edgesURL
	for _, room := range rooms {
		keys = append(keys, roomPrefix+room)
	}
	idx, err := v.m.r.run(ctx, voiceHeartbeatScript, keys, v.args()...).Int64Slice()
	if err != nil {
		return nil, v.m.r.wrap("voice heartbeat", err)
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
func (v *VoiceRooms) Release(ctx context.Context, room string) error {
	err := v.m.r.run(ctx, voiceReleaseScript, []string{roomPrefix + room}, v.m.me.ID).Err()
	return v.m.r.wrap("voice room release", err)
}
