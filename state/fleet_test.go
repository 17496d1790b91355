package state

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
)

func TestRedisFleetBoard(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	b := NewRedisFleetBoard(rdb)
	ctx := context.Background()
	if err := b.Publish(ctx, "edge-a", []byte("A"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := b.Publish(ctx, "edge-b", []byte("B"), 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got, err := b.Snapshots(ctx)
	if err != nil || string(got["edge-a"]) != "A" || string(got["edge-b"]) != "B" {
		t.Fatalf("both edges: %q %v", got, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err = b.Snapshots(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, alive := got["edge-b"]; !alive {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a silent edge never left the board")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if string(got["edge-a"]) != "A" {
		t.Fatalf("live edge lost: %q", got)
	}
}
