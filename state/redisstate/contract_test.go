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

// TestRedisContracts runs every store's contract (state/statetest, which
// the memory stores also keep) on one real redis-server; topologies_test.go
// runs the same on a Cluster and through a Sentinel.
func TestRedisContracts(t *testing.T) {
	srv := redistest.StartServer(t)
	redisContracts(t, func(t *testing.T) *Conn { return testRedis(t, &redis.Options{Addr: srv.Addr}) })
}

// redisContracts runs the contracts on handles from open, each store on a
// freshly emptied data set.
func redisContracts(t *testing.T, open func(t *testing.T) *Conn) {
	ctx := context.Background()
	fresh := func(t *testing.T) *Conn {
		t.Helper()
		r := open(t)
		if err := flushAll(ctx, r.Client()); err != nil {
			t.Fatal(err)
		}
		return r
	}
	t.Run("queue", func(t *testing.T) {
		statetest.QueueContract(t, func(t *testing.T) (state.Queue, func()) {
			r := fresh(t)
			q, err := NewQueue(ctx, r, true)
			if err != nil {
				t.Fatal(err)
			}
			return q, func() { _ = flushAll(ctx, r.Client()) }
		})
	})
	t.Run("leases", func(t *testing.T) { statetest.LeasesContract(t, NewLeases(fresh(t))) })
	t.Run("budgets", func(t *testing.T) { statetest.BudgetsContract(t, NewBudgets(fresh(t))) })
	t.Run("kv", func(t *testing.T) { statetest.KVContract(t, NewKV(fresh(t), "test:kv:")) })
	t.Run("tallies", func(t *testing.T) { statetest.TalliesContract(t, NewTallies(fresh(t))) })
	t.Run("seats", func(t *testing.T) {
		// The first store of a subtest gets an emptied data set, the
		// second (the other edge of the race) the same data.
		seen := map[*testing.T]bool{}
		statetest.SeatsContract(t, func(t *testing.T) state.Seats {
			if !seen[t] {
				seen[t] = true
				return NewSeats(fresh(t))
			}
			return NewSeats(open(t))
		}, true)
	})
	t.Run("revocations", func(t *testing.T) {
		r := fresh(t)
		rtt := &roundTrips{}
		r.Client().AddHook(rtt)
		statetest.RevocationsContract(t, NewRevocations(r, nil), NewKV(r, "test:pin:"), rtt.n.Load)
	})
	t.Run("revocation-notices", func(t *testing.T) {
		// The watcher has a client of its own: another edge.
		statetest.RevocationNoticesContract(t, NewRevocations(fresh(t), nil), NewRevocations(open(t), nil))
	})
	t.Run("shards", func(t *testing.T) {
		statetest.ShardDirectoryContract(t, func(t *testing.T) state.ShardDirectory { return NewShardDirectory(fresh(t)) })
	})
	t.Run("voicerooms", func(t *testing.T) {
		r := fresh(t)
		times := state.VoiceRoomTimes{AliveTTL: 400 * time.Millisecond, RoomTTL: 2 * time.Second}
		statetest.VoiceRoomsContract(t, func(id, url string) state.VoiceRooms {
			m, err := NewMembers(r, state.Member{ID: id, URL: url}, times.AliveTTL)
			if err != nil {
				t.Fatal(err)
			}
			return NewVoiceRooms(m, times.RoomTTL)
		}, time.Sleep, times) // Redis's clock decides: real time
	})
	t.Run("streamers", func(t *testing.T) { statetest.StreamersContract(t, NewStreamers(fresh(t))) })
	t.Run("inbox", func(t *testing.T) { statetest.InboxContract(t, NewInbox(fresh(t), 0, nil)) })
	t.Run("members", func(t *testing.T) {
		r := fresh(t)
		const ttl = 400 * time.Millisecond
		statetest.MembersContract(t, ttl, func(me state.Member) state.Members {
			m, err := NewMembers(r, me, ttl)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}, time.Sleep)
	})
	t.Run("scripts", func(t *testing.T) { scriptReload(t, fresh(t)) })
}

// flushAll empties c's data set: on a Cluster, every master's.
func flushAll(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.FlushAll(ctx).Err()
		})
	}
	return c.FlushAll(ctx).Err()
}

// TestRedisEpochFaults covers the faults only Redis has: a restart with
// empty data, an epoch rolled back, two nodes sharing one Redis.
func TestRedisEpochFaults(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartServer(t)
	h := testRedis(t, &redis.Options{Addr: srv.Addr, MaxRetries: -1})
	c := h.Client()
	r := statetest.RoomRates(600, 100, 600, 100)

	t.Run("RestartEmpty", func(t *testing.T) {
		must := statetest.MustFor(t)
		c.FlushAll(ctx)
		q, err := NewQueue(ctx, h, true)
		if err != nil {
			t.Fatal(err)
		}
		must(q.Join(ctx, statetest.TicketN(1, "eu", state.LaneWeb), r, statetest.T0))
		srv.Restart()
		// The first call after the restart may fail on a dead pooled
		// connection and mark Redis down; a probe call finds it back.
		var lastErr error
		testwait.Within(t, 10*time.Second, "state loss seen after the empty restart", func() bool {
			_, lastErr = q.Join(ctx, statetest.TicketN(2, "eu", state.LaneWeb), r, statetest.T0)
			return errors.Is(lastErr, state.ErrStateLost)
		})
		// A node started later without bootstrap also fails closed.
		q2, _ := NewQueue(ctx, h, false)
		if _, err := q2.Meta(ctx); !errors.Is(err, state.ErrStateLost) {
			t.Fatalf("fresh node on empty redis: %v", err)
		}
		// A node that re-bootstraps an empty Redis does not fool the
		// first node: same generation, different epoch.
		if _, err := NewQueue(ctx, h, true); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Meta(ctx); !errors.Is(err, state.ErrStateLost) {
			t.Fatalf("after re-bootstrap elsewhere: %v", err)
		}
		// Operator re-arms on q2; q adopts the higher generation.
		if _, err := q2.Control(ctx, state.Control{Op: state.OpRearm}); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Meta(ctx); err != nil {
			t.Fatalf("q did not adopt the re-armed epoch: %v", err)
		}
	})
	t.Run("EpochRolledBack", func(t *testing.T) {
		c.FlushAll(ctx)
		q, _ := NewQueue(ctx, h, true)
		if _, err := q.Control(ctx, state.Control{Op: state.OpRearm}); err != nil { // generation 2
			t.Fatal(err)
		}
		c.HSet(ctx, queueTag+"meta", "epoch", "1-stale")
		if _, err := q.Join(ctx, statetest.TicketN(1, "eu", state.LaneWeb), r, statetest.T0); !errors.Is(err, state.ErrStateLost) {
			t.Fatalf("rolled-back epoch: %v", err)
		}
	})
	t.Run("TwoNodesNeverOverAdmit", func(t *testing.T) {
		c.FlushAll(ctx)
		a, _ := NewQueue(ctx, h, true)
		bq, _ := NewQueue(ctx, testRedis(t, &redis.Options{Addr: srv.Addr}), false)
		rr := statetest.RoomRates(60, 20, 60, 20)
		var wg sync.WaitGroup
		const per = 100
		for n, q := range []state.Queue{a, bq} {
			wg.Go(func() {
				for i := range per {
					id := n*per + i
					now := statetest.T0.Add(time.Duration(i) * 300 * time.Millisecond)
					if _, err := q.Join(ctx, statetest.TicketN(id, "eu", state.LaneWeb), rr, now); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		end := statetest.T0.Add(per * 300 * time.Millisecond)
		admitted := 0
		for id := range 2 * per {
			if p, _ := a.Poll(ctx, statetest.TicketN(id, "eu", state.LaneWeb), state.Rates{KeepPlace: time.Hour, JoinWindow: time.Hour, TicketTTL: time.Hour}, end); p.Status == state.StatusAdmitted {
				admitted++
			}
		}
		limit := int(rr.RegionBurst + rr.RegionPerMin*(end.Sub(statetest.T0).Minutes()))
		if admitted > limit {
			t.Fatalf("two nodes admitted %d > %d", admitted, limit)
		}
		t.Logf("two nodes admitted %d of %d (ceiling %d)", admitted, 2*per, limit)
	})
}
