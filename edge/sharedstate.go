package edge

import (
	"context"
	"fmt"
	"time"

	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/redisstate"
)

// memberLeaveTimeout bounds leaving the membership on a clean stop.
const memberLeaveTimeout = time.Second

// openSharedState opens the fleet's shared state when --redis-url is set:
// the one Redis handle every store of this edge is built on (so its
// availability tracker is the one the waiting room, the realtime plane,
// voice rooms, Pixel Streaming signalling and /readyz all consult, and they
// fail fast together), and this edge's membership of the fleet, the one
// answer to "which edges are alive" for voice rooms, the fleet board and
// signalling. The membership is beaten until the edge stops and left on a
// clean stop, so peers learn at once.
//
// Closers run in reverse: the subsystems built later (signalling's
// farewell, the SFU) stop before this edge leaves, and the handle closes
// last.
func (e *Edge) openSharedState() error {
	if e.cfg.RedisURL == "" {
		return nil
	}
	conn, err := redisstate.Open(e.cfg.RedisURL, redisstate.Options{Logger: e.base})
	if err != nil {
		return fmt.Errorf("%w: --redis-url: %w", ErrConfig, err)
	}
	e.closers = append(e.closers, conn.Close)
	m, err := redisstate.NewMembers(conn, state.Member{ID: e.edgeID, URL: e.publicURL()}, 0)
	if err != nil {
		return err
	}
	e.redis, e.members = conn, m
	e.board = redisstate.NewFleetBoard(conn)
	e.runners = append(e.runners, m.Run)
	// Closers run after every runner has returned (nothing beats any more:
	// voice heartbeats beat the membership too) and before conn.Close.
	e.closers = append(e.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), memberLeaveTimeout)
		defer cancel()
		_ = m.Leave(ctx) // Redis unreachable: the membership lapses within its TTL instead
		return nil
	})
	return nil
}
