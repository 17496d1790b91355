package redisstate

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/state"
)

// TestRedisFleetBoard: the board shows the figures of live members that
// published lately; an edge leaves it when its membership lapses (it
// stopped beating) or its snapshot does (it stopped publishing).
func TestRedisFleetBoard(t *testing.T) {
	srv := redistest.StartServer(t)
	r := testRedis(t, &redis.Options{Addr: srv.Addr})
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	beat := map[string]*Members{}
	for _, id := range []string{"edge-a", "edge-b", "edge-c"} {
		m, err := NewMembers(r, state.Member{ID: id}, ttl)
		if err != nil {
			t.Fatal(err)
		}
		beat[id] = m
	}
	b := NewFleetBoard(r)
	for id, m := range beat {
		if err := m.Beat(ctx); err != nil {
			t.Fatal(err)
		}
		snapTTL := time.Minute
		if id == "edge-c" {
			snapTTL = 100 * time.Millisecond // beats, but stops publishing
		}
		if err := b.Publish(ctx, id, []byte(id+"!"), snapTTL); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Publish(ctx, "edge-z", []byte("never a member"), time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := b.Snapshots(ctx)
	if err != nil || len(got) != 3 || string(got["edge-b"]) != "edge-b!" {
		t.Fatalf("three live members: %q %v", got, err)
	}
	// edge-b stops beating; edge-a and edge-c go on.
	testwait.Within(t, 5*time.Second, "the silent edges leave the board", func() bool {
		for _, id := range []string{"edge-a", "edge-c"} {
			if err := beat[id].Beat(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got, err = b.Snapshots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, bLive := got["edge-b"]
		_, cLive := got["edge-c"]
		return !bLive && !cLive
	})
	if len(got) != 1 || string(got["edge-a"]) != "edge-a!" {
		t.Fatalf("live edge lost: %q", got)
	}
	if err := b.Publish(ctx, "a b", nil, time.Minute); err == nil {
		t.Fatal("an edge id with a space was published")
	}
}
