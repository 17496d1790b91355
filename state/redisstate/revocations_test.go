package redisstate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/state"
)

// TestRevocationsDown: an unreachable Redis is state.ErrUnavailable on every
// call, never "not revoked".
func TestRevocationsDown(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	// An unreachable Redis is state.ErrUnavailable, never "not revoked".
	rdb := testRedis(t, &redis.Options{Addr: srv.Addr})
	srv.Kill()
	down := NewRevocations(rdb, nil)
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := down.Revoke(dctx, "a", time.Now().Add(time.Minute)); !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("revoke, redis down: %v", err)
	}
	if _, err := down.Revoked(dctx, "a"); !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("revoked, redis down: %v", err)
	}
	if _, _, err := state.GetRevoked(dctx, NewKV(rdb, "test:pin:"), "a", down, "a"); !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("get-revoked, redis down: %v", err)
	}
}
