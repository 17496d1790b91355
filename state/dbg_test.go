package state

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
)

func TestDbg(t *testing.T) {
	srv := redistest.StartServer(t)
	r := NewRedis(redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: 300 * time.Millisecond, MaxRetries: -1}), RedisOptions{ProbeEvery: time.Millisecond})
	ctx := context.Background()
	srv.Kill()
	for i := 0; i < 3; i++ {
		err := r.c.Get(ctx, "x").Err()
		fmt.Printf("%d %T %v down=%v\n", i, err, err, r.down.Load())
		time.Sleep(5 * time.Millisecond)
	}
	srv.Restart()
	for i := 0; i < 5; i++ {
		err := r.c.Get(ctx, "x").Err()
		fmt.Printf("%d %T %v down=%v\n", i, err, err, r.down.Load())
		time.Sleep(300 * time.Millisecond)
	}
}
