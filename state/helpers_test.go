package state

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// testRedis wraps a fresh client (opts) in a handle closed when the test
// ends; the client (Client) still inspects and damages the data directly.
func testRedis(tb testing.TB, opts *redis.Options) *Redis {
	tb.Helper()
	r := NewRedis(redis.NewClient(opts), RedisOptions{})
	tb.Cleanup(func() { _ = r.Close() })
	return r
}

// poll waits until cond holds, checking every 10 ms, and fails the test
// after within.
func poll(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not waiting for sync
	}
}

// mustMembers is me's membership on r with the default TTL.
func mustMembers(tb testing.TB, r *Redis, me Member) *RedisMembers {
	tb.Helper()
	m, err := NewRedisMembers(r, me, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}
