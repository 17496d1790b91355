package redisstate

import (
	"context"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// FleetBoard keeps one key per edge beside the fleet's membership,
// under its {egbe-edges} hash tag (keys.go): a read is one script that
// lists the live members and their snapshots, by Redis's clock.
type FleetBoard struct{ r *Conn }

var _ state.FleetBoard = (*FleetBoard)(nil)

// NewFleetBoard returns a board on r.
func NewFleetBoard(r *Conn) *FleetBoard { return &FleetBoard{r: r} }

// Publish implements FleetBoard.
func (b *FleetBoard) Publish(ctx context.Context, edgeID string, snapshot []byte, ttl time.Duration) error {
	if err := state.CheckEdgeID(edgeID); err != nil {
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
func (b *FleetBoard) Snapshots(ctx context.Context) (map[string][]byte, error) {
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
