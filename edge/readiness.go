package edge

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/admission"
)

// readiness is what /readyz knows beyond "serving and not draining": the
// edge refuses every new session while the shared state it needs is out of
// reach or its waiting room fails closed, and in prod it has nothing to
// serve without a shard; a load balancer must then send new clients
// elsewhere. /healthz stays the liveness check (the process answers).
type readiness struct {
	mu      sync.Mutex
	reasons []string // guarded by mu; nil: ready
	checked bool     // guarded by mu: a first check ran
}

// Reasons /readyz gives for being unready.
const (
	unreadyStarting   = "starting"                // no check has run yet
	unreadyDraining   = "draining"                // shutting down
	unreadyState      = "state_store_unreachable" // Redis does not answer (down, frozen, partitioned)
	unreadyRoomLost   = "waiting_room_state_lost" // flushed or rolled-back Redis: fail closed until re-armed
	unreadyNoShards   = "no_shards"               // prod, and no shard configured or discovered
	unreadyNoShardUp  = "no_shard_reachable"      // shards known, none linked
	readinessEvery    = time.Second
	readinessDeadline = time.Second
)

// checkReadiness runs the checks once.
func (e *Edge) checkReadiness(ctx context.Context) []string {
	var out []string
	ctx, cancel := context.WithTimeout(ctx, readinessDeadline)
	defer cancel()
	if e.redis != nil {
		// Asks Redis and feeds the answer to the availability tracker every
		// store consults: /readyz and the subsystems agree.
		if err := e.redis.Check(ctx); err != nil {
			out = append(out, unreadyState)
		}
	}
	if e.adm != nil && len(out) == 0 {
		if _, err := e.adm.room.Meta(ctx); err != nil {
			if errors.Is(err, admission.ErrRoomLost) {
				out = append(out, unreadyRoomLost)
			} else {
				out = append(out, unreadyState)
			}
		}
	}
	if e.rt != nil && e.cfg.Mode == ModeProd && len(e.rt.gw.Directory().Routes()) == 0 {
		out = append(out, unreadyNoShards)
	}
	if !e.subsystemsReady() {
		out = append(out, unreadyNoShardUp)
	}
	return out
}

// runReadiness keeps the readiness verdict fresh until ctx ends.
func (e *Edge) runReadiness(ctx context.Context) error {
	t := time.NewTicker(readinessEvery)
	defer t.Stop()
	for {
		r := e.checkReadiness(ctx)
		e.readiness.mu.Lock()
		e.readiness.reasons, e.readiness.checked = r, true
		e.readiness.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// unready lists why the edge is not ready (none: ready).
func (e *Edge) unready() []string {
	if !e.ready.Load() {
		return []string{unreadyDraining}
	}
	e.readiness.mu.Lock()
	defer e.readiness.mu.Unlock()
	if !e.readiness.checked {
		return []string{unreadyStarting}
	}
	return e.readiness.reasons
}
