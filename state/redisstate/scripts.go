package redisstate

// The one script runner. Every Lua script of this package is a *script;
// it runs by EVALSHA, and a Redis that no longer has it (a restart, SCRIPT
// FLUSH, a failover to a replica that never saw it) is given it again
// here and only here: EVAL for a single call, SCRIPT LOAD (on every master
// of a Cluster) and one retry for a pipeline.

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/state"
)

// script is one Lua script. A script names in KEYS at least one key of the
// hash tag it works in, and touches only keys of that tag (keys.go), so a
// Redis Cluster runs it on one node.
type script struct{ s *redis.Script }

func newScript(src string) *script { return &script{s: redis.NewScript(src)} }

// run runs sc once: EVALSHA, then EVAL when Redis answers NOSCRIPT.
func (r *Conn) run(ctx context.Context, sc *script, keys []string, args ...any) *redis.Cmd {
	return sc.s.Run(ctx, r.c, keys, args...)
}

// scriptPipe queues script calls (and plain commands) for one round trip.
type scriptPipe struct {
	redis.Pipeliner
	ctx  context.Context
	used map[*script]struct{}
}

// eval queues sc by EVALSHA.
func (p *scriptPipe) eval(sc *script, keys []string, args ...any) *redis.Cmd {
	p.used[sc] = struct{}{}
	return sc.s.EvalSha(p.ctx, p.Pipeliner, keys, args...)
}

// pipe runs what fill queues in one pipeline. When Redis had lost a script
// the pipeline used, it loads them all and runs the pipeline once more
// (a pipeline is not atomic: the caller's commands must be safe to repeat,
// as upserts and sequence-numbered appends are). The error is the first
// failed command's, wrapped in ErrUnavailable.
func (r *Conn) pipe(ctx context.Context, fill func(p *scriptPipe)) ([]redis.Cmder, error) {
	for try := 0; ; try++ {
		used := map[*script]struct{}{}
		cmds, err := r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			fill(&scriptPipe{Pipeliner: p, ctx: ctx, used: used})
			return nil
		})
		if err == nil {
			return cmds, nil
		}
		if try == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
			for sc := range used {
				if lerr := sc.s.Load(ctx, r.c).Err(); lerr != nil {
					return nil, r.wrap("load script", lerr)
				}
			}
			continue
		}
		return cmds, r.wrap("pipeline", err)
	}
}

// wrap names a failed call. Every failure is ErrUnavailable, a reply
// error included: callers fail closed on it.
func (r *Conn) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s: %w", state.ErrUnavailable, what, err)
}
