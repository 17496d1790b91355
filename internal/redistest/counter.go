package redistest

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Counter counts what a client sends to Redis: round trips (a pipeline is
// one) and commands by name. Tests of packages that must not import a
// Redis client (signalling) count a state handle's traffic with it.
type Counter struct {
	trips  atomic.Int64
	mu     sync.Mutex
	byName map[string]int // guarded by mu
}

// Count attaches a Counter to c. Hooks added later run inside it: attach
// it after the state handle's own hook (redisstate.New) to count only
// what reaches Redis.
func Count(c redis.UniversalClient) *Counter {
	h := &Counter{byName: make(map[string]int)}
	c.AddHook(h)
	return h
}

// Load returns the round trips so far.
func (h *Counter) Load() int64 { return h.trips.Load() }

// Reset returns the counts by command name since the last Reset.
func (h *Counter) Reset() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.byName
	h.byName = make(map[string]int)
	return m
}

func (h *Counter) add(cmds ...redis.Cmder) {
	h.trips.Add(1)
	h.mu.Lock()
	for _, c := range cmds {
		h.byName[c.Name()]++
	}
	h.mu.Unlock()
}

// DialHook implements redis.Hook.
func (h *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.add(cmd); return next(ctx, cmd) }
}

// ProcessPipelineHook implements redis.Hook.
func (h *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.add(cmds...); return next(ctx, cmds) }
}
