package state

import (
	"context"
	"time"
)

// FleetBoard is where every edge of a fleet publishes a small snapshot of
// its own figures (for the operator dashboard), and where any edge reads
// the whole fleet's. A snapshot shows while its edge is a live member of
// the fleet (members.go) and has published within the snapshot's ttl.
type FleetBoard interface {
	Publish(ctx context.Context, edgeID string, snapshot []byte, ttl time.Duration) error
	// Snapshots returns the live snapshots by edge id.
	Snapshots(ctx context.Context) (map[string][]byte, error)
}

// RedisFleetBoard keeps one key per edge beside the fleet's membership,
// under its {egbe-edges} hash tag (keys.go): a read is one script that
// lists the live members and their snapshots, by Redis's clock.
type RedisFleetBoard struct{ r *Redis }

var _ FleetBoard = (*RedisFleetBoard)(nil)

// NewRedisFleetBoard returns a board on r.
func NewRedisFleetBoard(r *Redis) *RedisFleetBoard { return &RedisFleetBoard{r: r} }

// Publish implements FleetBoard.
func (b *RedisFleetBoard) Publish(ctx context.Context, edgeID string, snapshot []byte, ttl time.Duration) error {
	if err := CheckEdgeID(edgeID); err != nil {
		return err
	}
	return b.r.wrap("fleet board", b.r.c.Set(ctx, boardPref+edgeID, snapshot, ttl).Err())
}

// KEYS[1] alive, KEYS[2] urls. Returns {id, snapshot, ...} of the live
// members that have one.
var luaBoard = newScript(membersLua + `
local out = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', ALIVE, '(' .. now, '+inf')) do
  local s = redis.call('GET', '` + boardPref + `' .. id)
  if s then
    out[#out + 1] = id
    out[#out + 1] = s
  end
end
return out
`)

// Snapshots implements FleetBoard.
func (b *RedisFleetBoard) Snapshots(ctx context.Context) (map[string][]byte, error) {
	flat, err := b.r.run(ctx, luaBoard, membersKeys).StringSlice()
	if err != nil {
		return nil, b.r.wrap("fleet board", err)
	}
	out := make(map[string][]byte, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		out[flat[i]] = []byte(flat[i+1])
	}
	return out, nil
}
