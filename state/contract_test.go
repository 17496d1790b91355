package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
)

// backend is one implementation under the contract suite.
type backend struct {
	name   string
	queue  func(t *testing.T) (q Queue, wipe func())
	leases func(t *testing.T) Leases
	budget func(t *testing.T) Budgets
	seats  func(t *testing.T) Seats
}

func backends(t *testing.T) []backend {
	srv := redistest.StartServer(t)
	return []backend{
		{
			name: "memory",
			queue: func(t *testing.T) (Queue, func()) {
				q := NewMemoryQueue()
				return q, q.Wipe
			},
			leases: func(*testing.T) Leases { return NewMemoryLeases() },
			budget: func(*testing.T) Budgets { return NewMemoryBudgets() },
			seats:  func(*testing.T) Seats { return NewMemorySeats() },
		},
		redisBackend("redis", func(t *testing.T) redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}),
	}
}

// redisBackend is the Redis implementations on a fresh client from open
// (one server, a Cluster or a Sentinel's master), each emptied first.
func redisBackend(name string, open func(t *testing.T) redis.UniversalClient) backend {
	return backend{
		name: name,
		queue: func(t *testing.T) (Queue, func()) {
			c := open(t)
			if err := flushAll(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			q, err := NewRedisQueue(context.Background(), c, true)
			if err != nil {
				t.Fatal(err)
			}
			return q, func() { _ = flushAll(context.Background(), c) }
		},
		leases: func(t *testing.T) Leases {
			c := open(t)
			_ = flushAll(context.Background(), c)
			return NewRedisLeases(c)
		},
		budget: func(t *testing.T) Budgets {
			c := open(t)
			_ = flushAll(context.Background(), c)
			return NewRedisBudgets(c)
		},
		seats: func(t *testing.T) Seats {
			c := open(t)
			_ = flushAll(context.Background(), c)
			return NewRedisSeats(c)
		},
	}
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

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func rates(gPerMin, gBurst, rPerMin, rBurst float64) Rates {
	return Rates{GlobalPerMin: gPerMin, GlobalBurst: gBurst, RegionPerMin: rPerMin, RegionBurst: rBurst,
		PxstreamAllowed: true, JoinWindow: 5 * time.Minute, KeepPlace: 15 * time.Minute,
		TicketTTL: 4 * time.Hour, MaxAdmits: 64}
}

func tk(i int, region string, lane Lane) Ticket {
	return Ticket{ID: fmt.Sprintf("t%04d", i), Region: region, Lane: lane}
}

func mustFor(t *testing.T) func(Position, error) Position {
	return func(p Position, err error) Position {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

func TestQueueContract(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { queueContract(t, b) })
	}
}

// queueContract is the Queue contract on one backend.
func queueContract(t *testing.T, b backend) {
	ctx := context.Background()
	t.Run("BucketCeiling", func(t *testing.T) {
		must := mustFor(t)
		q, _ := b.queue(t)
		r := rates(60, 10, 30, 5)
		const n = 150
		for i := range n {
			must(q.Join(ctx, tk(i, "eu", LaneWeb), r, t0))
		}
		window := 2 * time.Minute
		for s := time.Duration(0); s <= window; s += time.Second {
			// Keep every ticket present is unnecessary: drains
			// happen on any poll; KeepPlace covers the window.
			must(q.Poll(ctx, tk(n-1, "eu", LaneWeb), r, t0.Add(s)))
		}
		admitted := 0
		for i := range n {
			p := must(q.Poll(ctx, tk(i, "eu", LaneWeb), r, t0.Add(window)))
			if p.Status == StatusAdmitted {
				admitted++
			}
		}
		limit := int(r.RegionBurst + r.RegionPerMin*window.Minutes())
		if admitted > limit || admitted < limit-1 {
			t.Fatalf("admitted %d over %v, want <= burst+rate*window = %d (and close to it)", admitted, window, limit)
		}
	})
	t.Run("GlobalBucketAcrossRegions", func(t *testing.T) {
		must := mustFor(t)
		q, _ := b.queue(t)
		r := rates(6, 4, 600, 100)
		for i := range 20 {
			must(q.Join(ctx, tk(i, []string{"a", "b"}[i%2], LaneWeb), r, t0))
		}
		adm := 0
		for i := range 20 {
			if p := must(q.Poll(ctx, tk(i, []string{"a", "b"}[i%2], LaneWeb), r, t0.Add(time.Minute))); p.Status == StatusAdmitted {
				adm++
			}
		}
		if adm > 4+6 {
			t.Fatalf("global bucket admitted %d > 10", adm)
		}
	})
	t.Run("PxstreamBackpressureAndFreeze", func(t *testing.T) {
		must := mustFor(t)
		q, _ := b.queue(t)
		r := rates(600, 100, 600, 100)
		r.PxstreamAllowed = false
		for i := range 10 {
			lane := LaneWeb
			if i%2 == 0 {
				lane = LanePxstream
			}
			p := must(q.Join(ctx, tk(i, "eu", lane), r, t0))
			if lane == LanePxstream && p.Status != StatusQueued {
				t.Fatalf("pxstream ticket %d %s at >= 85 %%", i, p.Status)
			}
			if lane == LaneWeb && p.Status != StatusAdmitted {
				t.Fatalf("web ticket %d %s, want admitted past pxstream heads", i, p.Status)
			}
		}
		r.Frozen = true
		r.PxstreamAllowed = true
		must(q.Join(ctx, tk(20, "eu", LaneWeb), r, t0))
		for _, i := range []int{0, 2, 4, 6, 8, 20} {
			if p := must(q.Poll(ctx, tk(i, "eu", []Lane{LanePxstream, LaneWeb}[i/20]), r, t0.Add(time.Second))); p.Status != StatusQueued {
				t.Fatalf("ticket %d %s while frozen", i, p.Status)
			}
		}
		r.Frozen = false
		if _, err := q.Control(ctx, Control{Op: OpFreeze}); err != nil {
			t.Fatal(err)
		}
		if p := must(q.Poll(ctx, tk(20, "eu", LaneWeb), r, t0.Add(2*time.Second))); p.Status != StatusQueued {
			t.Fatalf("operator freeze admitted: %s", p.Status)
		}
		if _, err := q.Control(ctx, Control{Op: OpUnfreeze}); err != nil {
			t.Fatal(err)
		}
		if p := must(q.Poll(ctx, tk(0, "eu", LanePxstream), r, t0.Add(3*time.Second))); p.Status != StatusAdmitted {
			t.Fatalf("after unfreeze: %s", p.Status)
		}
		// Waitlist mode is a flag of the meta every node reads.
		if m, err := q.Control(ctx, Control{Op: OpWaitlist}); err != nil || !m.Waitlist {
			t.Fatalf("waitlist: %+v %v", m, err)
		}
		if m, err := q.Meta(ctx); err != nil || !m.Waitlist || m.Frozen {
			t.Fatalf("meta after waitlist: %+v %v", m, err)
		}
		if m, err := q.Control(ctx, Control{Op: OpUnwaitlist}); err != nil || m.Waitlist {
			t.Fatalf("unwaitlist: %+v %v", m, err)
		}
	})
	t.Run("FIFOPerRegion", func(t *testing.T) {
		must := mustFor(t)
		q, _ := b.queue(t)
		r := rates(600, 1, 600, 1) // one admit per 100 ms
		var ids []Ticket
		for i := range 30 {
			ti := tk(i, []string{"us", "eu"}[i%3/2], []Lane{LaneWeb, LanePxstream}[i%2])
			ids = append(ids, ti)
			must(q.Join(ctx, ti, r, t0))
		}
		now := t0
		for step := range 40 {
			now = now.Add(100 * time.Millisecond)
			must(q.Poll(ctx, ids[step%len(ids)], r, now))
			for _, region := range []string{"us", "eu"} {
				seenQueued := false
				for _, ti := range ids {
					if ti.Region != region {
						continue
					}
					p := must(q.Poll(ctx, ti, Rates{GlobalBurst: 1, RegionBurst: 1, KeepPlace: time.Hour, JoinWindow: time.Hour, TicketTTL: time.Hour, MaxAdmits: 0}, now))
					if p.Status == StatusQueued {
						seenQueued = true
					} else if seenQueued {
						t.Fatalf("step %d: %s admitted after an earlier ticket of %s still queued", step, ti.ID, region)
					}
				}
			}
		}
	})
	t.Run("PositionAndDrainRate", func(t *testing.T) {
		must := mustFor(t)
		q, _ := b.queue(t)
		r := rates(600, 2, 600, 2)
		for i := range 5 {
			must(q.Join(ctx, tk(i, "eu", LaneWeb), r, t0))
		}
		p := must(q.Poll(ctx, tk(4, "eu", LaneWeb), r, t0))
		if p.Status != StatusQueued || p.Ahead != 2 || p.Depth != 3 || p.DrainPerMin != 2 {
			t.Fatalf("position %+v, want queued ahead 2 depth 3 drain 2", p)
		}
	})
	t.Run("RefundExactlyOnce", func(t *testing.T) {
		must := mustFor(t)
		q, _ := b.queue(t)
		r := rates(600, 1, 0.0001, 1) // one token, effectively no refill
		for i := range 4 {
			must(q.Join(ctx, tk(i, "eu", LaneWeb), r, t0))
		}
		if p := must(q.Poll(ctx, tk(0, "eu", LaneWeb), r, t0)); p.Status != StatusAdmitted {
			t.Fatalf("first ticket %s", p.Status)
		}
		for i, want := range []bool{true, false} {
			got, err := q.Leave(ctx, tk(0, "eu", LaneWeb), r, t0)
			if err != nil || got != want {
				t.Fatalf("leave #%d refunded=%v err=%v, want %v", i, got, err, want)
			}
		}
		if p := must(q.Poll(ctx, tk(1, "eu", LaneWeb), r, t0)); p.Status != StatusAdmitted {
			t.Fatalf("refunded token not reused: %s", p.Status)
		}
		// Ticket 1 lets its join window lapse: its token returns once.
		late := t0.Add(5*time.Minute + time.Millisecond)
		if p := must(q.Poll(ctx, tk(2, "eu", LaneWeb), r, late)); p.Status != StatusAdmitted {
			t.Fatalf("lapsed admission not refunded: ticket 2 %s", p.Status)
		}
		if ok, _ := q.Use(ctx, tk(1, "eu", LaneWeb), late); ok {
			t.Fatal("lapsed admission still usable")
		}
		if ref, _ := q.Leave(ctx, tk(1, "eu", LaneWeb), r, late); ref {
			t.Fatal("lapsed admission refunded twice (leave after lapse)")
		}
		if p := must(q.Poll(ctx, tk(3, "eu", LaneWeb), r, late)); p.Status != StatusQueued {
			t.Fatalf("double refund admitted ticket 3: %s", p.Status)
		}
		// Used admissions never refund.
		if ok, err := q.Use(ctx, tk(2, "eu", LaneWeb), late); !ok || err != nil {
			t.Fatalf("use: %v %v", ok, err)
		}
		if ok, _ := q.Use(ctx, tk(2, "eu", LaneWeb), late); !ok {
			t.Fatal("use is not idempotent")
		}
		if ref, _ := q.Leave(ctx, tk(2, "eu", LaneWeb), r, late); ref {
			t.Fatal("used admission refunded")
		}
		if p := must(q.Poll(ctx, tk(3, "eu", LaneWeb), r, late.Add(10*time.Minute))); p.Status != StatusQueued {
			t.Fatalf("used admission refunded on lapse: ticket 3 %s", p.Status)
		}
	})
	t.Run("KeepPlace", func(t *testing.T) {
		must := mustFor(t)
		q, _ := b.queue(t)
		r := rates(600, 1, 0.0001, 1)
		must(q.Join(ctx, tk(0, "eu", LaneWeb), r, t0)) // admitted at once
		must(q.Join(ctx, tk(1, "eu", LaneWeb), r, t0)) // tab closes, never polls
		must(q.Join(ctx, tk(2, "eu", LaneWeb), r, t0))
		now := t0
		for range 4 { // ticket 2 keeps polling
			now = now.Add(5 * time.Minute)
			must(q.Poll(ctx, tk(2, "eu", LaneWeb), rates(600, 1, 0.0001, 1), now))
		}
		// Ticket 0's lapse at 5 min returned a token; ticket 1 was
		// still within 15 min, so it took it.
		if p := must(q.Poll(ctx, tk(1, "eu", LaneWeb), r, now)); p.Status != StatusGone {
			t.Fatalf("ticket 1 (admitted at 5 min, never used) %s, want gone after lapse", p.Status)
		}
		if _, err := q.Leave(ctx, tk(1, "eu", LaneWeb), r, now); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Take", func(t *testing.T) {
		q, _ := b.queue(t)
		for i := range 4 {
			ok, err := q.Take(ctx, "signup", 0.0001, 3, t0)
			if err != nil || ok != (i < 3) {
				t.Fatalf("take %d = %v %v", i, ok, err)
			}
		}
	})
	t.Run("LossFailsClosed", func(t *testing.T) {
		must := mustFor(t)
		q, wipe := b.queue(t)
		r := rates(600, 100, 600, 100)
		if _, err := q.Control(ctx, Control{Op: OpArm}); err != nil {
			t.Fatal(err)
		}
		old := tk(1, "eu", LaneWeb)
		if p := must(q.Join(ctx, old, r, t0)); p.Status != StatusAdmitted {
			t.Fatalf("join %s", p.Status)
		}
		wipe()
		if _, err := q.Join(ctx, tk(2, "eu", LaneWeb), r, t0); !errors.Is(err, ErrStateLost) {
			t.Fatalf("join after loss: %v", err)
		}
		if _, err := q.Use(ctx, old, t0); !errors.Is(err, ErrStateLost) {
			t.Fatalf("use after loss: %v", err)
		}
		if _, err := q.Meta(ctx); !errors.Is(err, ErrStateLost) {
			t.Fatalf("meta after loss: %v", err)
		}
		if _, err := q.Take(ctx, "signup", 1, 1, t0); !errors.Is(err, ErrStateLost) {
			t.Fatalf("take after loss: %v", err)
		}
		if _, err := q.Control(ctx, Control{Op: OpArm}); !errors.Is(err, ErrStateLost) {
			t.Fatalf("arm after loss: %v", err)
		}
		m, err := q.Control(ctx, Control{Op: OpRearm})
		if err != nil || !m.ArmedGlobal || epochGen(m.Epoch) < 2 {
			t.Fatalf("rearm: %+v %v", m, err)
		}
		if ok, err := q.Use(ctx, old, t0); ok || err != nil {
			t.Fatalf("old ticket after rearm: %v %v", ok, err)
		}
		if p := must(q.Join(ctx, tk(3, "eu", LaneWeb), r, t0)); p.Status != StatusAdmitted {
			t.Fatalf("join after rearm %s", p.Status)
		}
	})
}

func TestLeasesContract(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { leasesContract(t, b) })
		t.Run(b.name+"/budgets", func(t *testing.T) { budgetsContract(t, b) })
	}
}

// leasesContract is the Leases contract on one backend.
func leasesContract(t *testing.T, b backend) {
	ctx := context.Background()
	l := b.leases(t)
	lim := []LeaseLimit{{"user:u", 2}, {"net:10.0.0", 3}}
	for i, want := range []int{-1, -1, 0} {
		got, err := l.Acquire(ctx, fmt.Sprintf("h%d", i), lim, time.Minute, t0)
		if err != nil || got != want {
			t.Fatalf("acquire %d = %d %v, want %d", i, got, err, want)
		}
	}
	if got, _ := l.Acquire(ctx, "h0", lim, time.Minute, t0); got != -1 {
		t.Fatal("re-acquire by a holder counted twice")
	}
	if got, _ := l.Acquire(ctx, "other", []LeaseLimit{{"user:v", 2}, {"net:10.0.0", 3}}, time.Minute, t0); got != -1 {
		t.Fatal("third on network refused")
	}
	if got, _ := l.Acquire(ctx, "fourth", []LeaseLimit{{"user:w", 2}, {"net:10.0.0", 3}}, time.Minute, t0); got != 1 {
		t.Fatalf("fourth on network = %d, want 1", got)
	}
	// Blocked acquires take nothing: user:w must still be empty.
	if got, _ := l.Acquire(ctx, "w1", []LeaseLimit{{"user:w", 1}}, time.Minute, t0); got != -1 {
		t.Fatal("blocked acquire leaked a lease")
	}
	if err := l.Release(ctx, "h0", []string{"user:u", "net:10.0.0"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Acquire(ctx, "h2", lim, time.Minute, t0); got != -1 {
		t.Fatal("release did not free a slot")
	}
	// A dead holder lapses: h1 never refreshes; h2 does.
	later := t0.Add(90 * time.Second)
	if err := l.Refresh(ctx, "h2", []string{"user:u", "net:10.0.0"}, time.Minute, t0.Add(50*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Acquire(ctx, "h3", lim, time.Minute, later); got != -1 {
		t.Fatal("expired lease still counted")
	}
	if got, _ := l.Acquire(ctx, "h4", lim, time.Minute, later); got != 0 {
		t.Fatalf("refreshed lease lapsed: %d", got)
	}
}

// budgetsContract is the Budgets contract on one backend.
func budgetsContract(t *testing.T, b backend) {
	ctx := context.Background()
	bu := b.budget(t)
	if n, _ := bu.Used(ctx, "u:2026-12-02", t0); n != 0 {
		t.Fatal(n)
	}
	bu.Add(ctx, "u:2026-12-02", 100, time.Hour, t0)
	if n, _ := bu.Add(ctx, "u:2026-12-02", 30, time.Hour, t0); n != 130 {
		t.Fatal(n)
	}
	if n, _ := bu.Used(ctx, "u:2026-12-02", t0); n != 130 {
		t.Fatal(n)
	}
}

// TestRedisEpochFaults covers the faults only Redis has: a restart with
// empty data, an epoch rolled back, two nodes sharing one Redis.
func TestRedisEpochFaults(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartServer(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	r := rates(600, 100, 600, 100)

	t.Run("RestartEmpty", func(t *testing.T) {
		must := mustFor(t)
		c.FlushAll(ctx)
		q, err := NewRedisQueue(ctx, c, true)
		if err != nil {
			t.Fatal(err)
		}
		must(q.Join(ctx, tk(1, "eu", LaneWeb), r, t0))
		srv.Restart()
		var lastErr error
		for range 50 { // the pool reconnects on a later call
			if _, lastErr = q.Join(ctx, tk(2, "eu", LaneWeb), r, t0); errors.Is(lastErr, ErrStateLost) {
				break
			}
		}
		if !errors.Is(lastErr, ErrStateLost) {
			t.Fatalf("after empty restart: %v", lastErr)
		}
		// A node started later without bootstrap also fails closed.
		q2, _ := NewRedisQueue(ctx, c, false)
		if _, err := q2.Meta(ctx); !errors.Is(err, ErrStateLost) {
			t.Fatalf("fresh node on empty redis: %v", err)
		}
		// A node that re-bootstraps an empty Redis does not fool the
		// first node: same generation, different epoch.
		if _, err := NewRedisQueue(ctx, c, true); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Meta(ctx); !errors.Is(err, ErrStateLost) {
			t.Fatalf("after re-bootstrap elsewhere: %v", err)
		}
		// Operator re-arms on q2; q adopts the higher generation.
		if _, err := q2.Control(ctx, Control{Op: OpRearm}); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Meta(ctx); err != nil {
			t.Fatalf("q did not adopt the re-armed epoch: %v", err)
		}
	})
	t.Run("EpochRolledBack", func(t *testing.T) {
		c.FlushAll(ctx)
		q, _ := NewRedisQueue(ctx, c, true)
		if _, err := q.Control(ctx, Control{Op: OpRearm}); err != nil { // generation 2
			t.Fatal(err)
		}
		c.HSet(ctx, queueTag+"meta", "epoch", "1-stale")
		if _, err := q.Join(ctx, tk(1, "eu", LaneWeb), r, t0); !errors.Is(err, ErrStateLost) {
			t.Fatalf("rolled-back epoch: %v", err)
		}
	})
	t.Run("TwoNodesNeverOverAdmit", func(t *testing.T) {
		c.FlushAll(ctx)
		a, _ := NewRedisQueue(ctx, c, true)
		c2 := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = c2.Close() })
		bq, _ := NewRedisQueue(ctx, c2, false)
		rr := rates(60, 20, 60, 20)
		var wg sync.WaitGroup
		const per = 100
		for n, q := range []Queue{a, bq} {
			wg.Go(func() {
				for i := range per {
					id := n*per + i
					now := t0.Add(time.Duration(i) * 300 * time.Millisecond)
					if _, err := q.Join(ctx, tk(id, "eu", LaneWeb), rr, now); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		end := t0.Add(per * 300 * time.Millisecond)
		admitted := 0
		for id := range 2 * per {
			if p, _ := a.Poll(ctx, tk(id, "eu", LaneWeb), Rates{KeepPlace: time.Hour, JoinWindow: time.Hour, TicketTTL: time.Hour}, end); p.Status == StatusAdmitted {
				admitted++
			}
		}
		limit := int(rr.RegionBurst + rr.RegionPerMin*(end.Sub(t0).Minutes()))
		if admitted > limit {
			t.Fatalf("two nodes admitted %d > %d", admitted, limit)
		}
		t.Logf("two nodes admitted %d of %d (ceiling %d)", admitted, 2*per, limit)
	})
}
