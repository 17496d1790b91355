package state

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
)

// TestTalliesContract runs the same checks against memory and real Redis.
func TestTalliesContract(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := testRedis(t, &redis.Options{Addr: srv.Addr})
	for name, tl := range map[string]Tallies{"memory": NewMemoryTallies(), "redis": NewRedisTallies(rdb)} {
		t.Run(name, func(t *testing.T) { talliesContract(t, tl) })
	}
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := NewRedisTallies(rdb).Read(ctx, time.Now(), "k"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("redis down: %v", err)
	}
}

func talliesContract(t *testing.T, tl Tallies) {
	ctx := context.Background()
	t0 := time.Now()
	got, err := tl.Read(ctx, t0, "absent")
	if err != nil || len(got) != 1 || len(got[0]) != 0 {
		t.Fatalf("absent: %v %v", got, err)
	}
	if err := tl.Add(ctx, "a", map[string]int64{"x": 2, "y": 5}, time.Minute, t0); err != nil {
		t.Fatal(err)
	}
	if err := tl.Add(ctx, "a", map[string]int64{"x": 3}, time.Minute, t0); err != nil {
		t.Fatal(err)
	}
	if err := tl.Add(ctx, "", nil, time.Minute, t0); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("empty key: %v", err)
	}
	// Gaps of 1000, 1200 and 800 ms; a late (earlier) event changes nothing.
	for _, ms := range []int64{0, 1000, 2200, 2100, 3000} {
		if err := tl.Gap(ctx, "a", "r", time.Minute, t0.Add(time.Duration(ms)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	got, err = tl.Read(ctx, t0, "a", "absent")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"x": 5, "y": 5, "r.n": 3, "r.sum": 3000, "r.sq": 1000*1000 + 1200*1200 + 800*800,
		"r.last": t0.Add(3 * time.Second).UnixMilli()}
	for k, v := range want {
		if got[0][k] != v {
			t.Errorf("%s = %d, want %d (all %v)", k, got[0][k], v, got[0])
		}
	}
	if len(got[0]) != len(want) || len(got[1]) != 0 {
		t.Fatalf("fields %v / %v", got[0], got[1])
	}
}
