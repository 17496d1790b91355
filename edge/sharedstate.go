package edge

import (
	"context"
	"fmt"

	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/redisstate"
)

// openSharedState opens the fleet's shared state when --redis-url is set:
// the one Redis handle every store of this edge is built on (so its
// availability tracker is the one the waiting room, the realtime plane,
// voice rooms, Pixel Streaming signalling and /readyz all consult, and they
// fail fast together), and this edge's membership of the fleet, the one
// answer to "which edges are alive" for voice rooms, the fleet board and
// signalling. The membership is beaten until the edge stops and left on a
// clean stop, so peers learn at once.
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
	e.runners = append(e.runners, func(ctx context.Context) error {
		err := m.Run(ctx)
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readinessDeadline)
		defer cancel()
		_ = m.Leave(lctx) // a Redis outage: the membership lapses within its TTL instead
		return err
	})
	return nil
}
