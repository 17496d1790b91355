package redisstate

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/statetest"
)

// TestRedisAvailability: one store's call that finds Redis gone marks it
// down for every store of the handle; they then fail at once (no dial),
// except one probe call per period, until a call finds Redis back.
func TestRedisAvailability(t *testing.T) {
	srv := redistest.StartServer(t)
	var (
		mu  sync.Mutex
		now = statetest.T0
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	r := New(redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 300 * time.Millisecond, MaxRetries: -1}),
		Options{Now: clock, ProbeEvery: time.Second})
	t.Cleanup(func() { _ = r.Close() })
	ctx := context.Background()
	kv, budgets := NewKV(r, "test:kv:"), NewBudgets(r)
	if err := kv.Put(ctx, "k", []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := r.Available(); err != nil {
		t.Fatalf("available while up: %v", err)
	}

	srv.Kill()
	_, err := kv.Get(ctx, "k")
	if !errors.Is(err, state.ErrUnavailable) || errors.Is(err, errRedisDown) {
		t.Fatalf("first call after the kill: %v, want a real failure", err)
	}
	if err := r.Available(); !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("available after a failure: %v", err)
	}
	// Every store fails fast now, without going to Redis.
	if _, err := budgets.Used(ctx, "u", now); !errors.Is(err, errRedisDown) {
		t.Fatalf("another store while down: %v, want the fast failure", err)
	}
	if _, err := kv.Get(ctx, "k"); !errors.Is(err, errRedisDown) {
		t.Fatalf("same store while down: %v", err)
	}
	// One call per probe period goes through (and fails: still down).
	advance(time.Second)
	if _, err := kv.Get(ctx, "k"); !errors.Is(err, state.ErrUnavailable) || errors.Is(err, errRedisDown) {
		t.Fatalf("probe call: %v, want a real failure", err)
	}
	if _, err := kv.Get(ctx, "k"); !errors.Is(err, errRedisDown) {
		t.Fatalf("after the probe: %v, want the fast failure", err)
	}
	// A caller that gives up says nothing about Redis.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, _ = kv.Get(cctx, "k")

	srv.Restart()
	if _, err := kv.Get(ctx, "k"); !errors.Is(err, errRedisDown) {
		t.Fatalf("back, before a probe: %v", err)
	}
	advance(time.Second)
	// The pool may hold a dead connection: the probe can fail once more.
	testwait.Within(t, 10*time.Second, "a probe finds Redis back", func() bool {
		advance(time.Second)
		_, err := budgets.Used(ctx, "u", now)
		return err == nil
	})
	if err := r.Available(); err != nil {
		t.Fatalf("available after the probe: %v", err)
	}
	if _, err := kv.Get(ctx, "k"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("kv after an empty restart: %v", err)
	}

	// Check asks Redis whatever the tracker says, and tells the tracker.
	srv.Kill()
	if err := r.Check(ctx); !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("check while down: %v", err)
	}
	if err := r.Available(); err == nil {
		t.Fatal("check did not mark Redis down")
	}
	srv.Restart()
	testwait.Within(t, 10*time.Second, "check finds Redis back", func() bool { return r.Check(ctx) == nil })
	if err := r.Available(); err != nil {
		t.Fatalf("check did not mark Redis up: %v", err)
	}
}

// scriptReload: a Redis that lost the scripts (SCRIPT FLUSH on every
// master) gets them again, for a single call and for a pipeline.
func scriptReload(t *testing.T, r *Conn) {
	ctx := context.Background()
	if err := flushAll(ctx, r.Client()); err != nil {
		t.Fatal(err)
	}
	st := NewStreamers(r)
	sync := func() {
		t.Helper()
		if _, err := st.Sync(ctx, state.StreamerSync{Edge: "edge-a", Up: []state.StreamerReg{{ID: "x", POP: "p", ConnectedAt: statetest.T0}}, Now: statetest.T0, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	if err := r.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	sync() // a pipeline of EVALSHAs
	if err := r.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if s, err := st.Lease(ctx, state.StreamerLease{Mode: state.LeaseAnyIdle, POP: "p", SessionID: "s", Until: statetest.T0.Add(time.Minute)}, statetest.T0); err != nil || s.ID != "x" {
		t.Fatalf("lease after SCRIPT FLUSH: %+v %v", s, err)
	}
}

func TestScriptReload(t *testing.T) {
	srv := redistest.StartServer(t)
	scriptReload(t, testRedis(t, &redis.Options{Addr: srv.Addr}))
}
