package redisstate

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/state"
)

// testRedis wraps a fresh client (opts) in a handle closed when the test
// ends; the client (Client) still inspects and damages the data directly.
func testRedis(tb testing.TB, opts *redis.Options) *Conn {
	tb.Helper()
	r := New(redis.NewClient(opts), Options{})
	tb.Cleanup(func() { _ = r.Close() })
	return r
}

// mustMembers is me's membership on r with the default TTL.
func mustMembers(tb testing.TB, r *Conn, me state.Member) *Members {
	tb.Helper()
	m, err := NewMembers(r, me, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// roundTrips counts what a go-redis client sends: each command sent alone
// and each pipeline is one round trip. A new connection's set-up (HELLO,
// CLIENT SETINFO) is not a request's round trip and is not counted.
type roundTrips struct{ n atomic.Int64 }

func setup(cmds ...redis.Cmder) bool {
	for _, c := range cmds {
		switch c.Name() {
		case "hello", "client", "auth", "select":
		default:
			return false
		}
	}
	return true
}

func (c *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setup(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !setup(cmds...) {
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}
