package state

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
)

// TestKVContract runs the same checks against memory and real Redis.
func TestKVContract(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := testRedis(t, &redis.Options{Addr: srv.Addr})
	for name, kv := range map[string]KV{"memory": NewMemoryKV(nil), "redis": NewRedisKV(rdb, "test:kv:")} {
		t.Run(name, func(t *testing.T) { kvContract(t, kv) })
	}
	// An unreachable Redis is ErrUnavailable, not "not found".
	srv.Kill()
	down := NewRedisKV(rdb, "test:kv:")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := down.Get(ctx, "k"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("redis down: %v", err)
	}
}

// kvContract is the KV contract on one implementation.
func kvContract(t *testing.T, kv KV) {
	ctx := context.Background()
	if _, err := kv.Get(ctx, "absent"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent: %v", err)
	}
	if err := kv.Put(ctx, "k", []byte("v1"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := kv.Put(ctx, "k", []byte("v2"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if v, err := kv.Get(ctx, "k"); err != nil || string(v) != "v2" {
		t.Fatalf("get: %q %v", v, err)
	}
	if err := kv.Put(ctx, "bad", []byte("x"), 0); err == nil {
		t.Fatal("zero ttl accepted")
	}
	if err := kv.Put(ctx, "short", []byte("x"), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := kv.Get(ctx, "short")
		if errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("value outlived its ttl: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
