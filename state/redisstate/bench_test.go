package redisstate

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/statetest"
)

// BenchmarkQueue measures waiting-room operations (a join, then a poll of
// the same ticket: two atomic scripts) against real Redis and memory,
// reporting operations/s and p99 latency per operation.
func BenchmarkQueue(b *testing.B) {
	srv := redistest.StartServer(b)
	ctx := context.Background()
	for _, name := range []string{"memory", "redis"} {
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/parallel=%d", name, par), func(b *testing.B) {
				var q state.Queue
				if name == "memory" {
					q = state.NewMemoryQueue()
				} else {
					c := testRedis(b, &redis.Options{Addr: srv.Addr, PoolSize: 64})
					c.Client().FlushAll(ctx)
					rq, err := NewQueue(ctx, c, true)
					if err != nil {
						b.Fatal(err)
					}
					q = rq
				}
				r := statetest.RoomRates(600, 1200, 186, 372)
				regions := []string{"us-east-1", "us-west-2", "eu-west-1", "ap-south-1"}
				var seq atomic.Int64
				var mu sync.Mutex
				var lat []time.Duration
				b.SetParallelism(par)
				b.ReportAllocs()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					local := make([]time.Duration, 0, 1024)
					for pb.Next() {
						n := seq.Add(1)
						t := state.Ticket{ID: fmt.Sprintf("b%d", n), Region: regions[n%4], Lane: state.LaneWeb}
						now := statetest.T0.Add(time.Duration(n) * time.Millisecond)
						s := time.Now()
						if _, err := q.Join(ctx, t, r, now); err != nil {
							b.Error(err)
							return
						}
						m := time.Now()
						if _, err := q.Poll(ctx, t, r, now); err != nil {
							b.Error(err)
							return
						}
						e := time.Now()
						local = append(local, m.Sub(s), e.Sub(m))
					}
					mu.Lock()
					lat = append(lat, local...)
					mu.Unlock()
				})
				el := time.Since(start)
				if len(lat) == 0 {
					return
				}
				slices.Sort(lat)
				b.ReportMetric(float64(len(lat))/el.Seconds(), "ops/s")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			})
		}
	}
}

// BenchmarkSeats is concert seat leases on one real Redis (and memory):
// each op takes a seat for a new holder (one script: the SFU with the
// most free seats of four) and gives it back, as a session that comes and
// goes; reports seat leases per second and the take's p99.
func BenchmarkSeats(b *testing.B) {
	srv := redistest.StartServer(b)
	ctx := context.Background()
	sfus := []state.SeatLimit{{SFU: "SFU", Seats: 250}, {SFU: "SFU2", Seats: 250}, {SFU: "SFU3", Seats: 250}, {SFU: "SFU4", Seats: 250}}
	for _, name := range []string{"memory", "redis"} {
		for _, par := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/parallel=%d", name, par), func(b *testing.B) {
				var s state.Seats = state.NewMemorySeats()
				if name == "redis" {
					c := testRedis(b, &redis.Options{Addr: srv.Addr, PoolSize: 64})
					c.Client().FlushAll(ctx)
					s = NewSeats(c)
				}
				var seq atomic.Int64
				var mu sync.Mutex
				var lat []time.Duration
				b.SetParallelism(par)
				b.ReportAllocs()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					local := make([]time.Duration, 0, 1024)
					for pb.Next() {
						h := fmt.Sprintf("s%d", seq.Add(1))
						st := time.Now()
						sfu, err := s.Take(ctx, "gala", h, sfus, time.Minute, time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
						if err != nil || sfu == "" {
							b.Errorf("take: %q %v", sfu, err)
							return
						}
						local = append(local, time.Since(st))
						if err := s.Release(ctx, "gala", sfu, h); err != nil {
							b.Error(err)
							return
						}
					}
					mu.Lock()
					lat = append(lat, local...)
					mu.Unlock()
				})
				el := time.Since(start)
				if len(lat) == 0 {
					return
				}
				slices.Sort(lat)
				b.ReportMetric(float64(len(lat))/el.Seconds(), "leases/s")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "take-p99-ms")
			})
		}
	}
}
