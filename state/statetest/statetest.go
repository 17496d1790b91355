// Package statetest holds the contracts every implementation of state's
// interfaces keeps. The memory implementations (state's tests) and the
// Redis ones (state/redisstate's tests, on one server, a real Cluster and
// a master found through a real Sentinel) run the same suites, so the
// same calls give the same answers whichever store an edge is given.
package statetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/state"
)

// T0 is the contracts' fake start of time.
var T0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// RoomRates are waiting-room rates with the policy's windows.
func RoomRates(gPerMin, gBurst, rPerMin, rBurst float64) state.Rates {
	return state.Rates{GlobalPerMin: gPerMin, GlobalBurst: gBurst, RegionPerMin: rPerMin, RegionBurst: rBurst,
		PxstreamAllowed: true, JoinWindow: 5 * time.Minute, KeepPlace: 15 * time.Minute,
		TicketTTL: 4 * time.Hour, MaxAdmits: 64}
}

// TicketN is queue ticket number i.
func TicketN(i int, region string, lane state.Lane) state.Ticket {
	return state.Ticket{ID: fmt.Sprintf("t%04d", i), Region: region, Lane: lane}
}

// MustFor fails t on a queue call's error.
func MustFor(t *testing.T) func(state.Position, error) state.Position {
	return func(p state.Position, err error) state.Position {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

// RevocationsContract is the Revocations contract on a fresh, empty store,
// with a KV to pair it with for GetRevoked. trips, when not nil, counts the
// store's round trips: a batch read and GetRevoked must take one each.
func RevocationsContract(t *testing.T, r state.Revocations, kv state.KV, trips func() int64) {
	ctx := context.Background()
	count := trips != nil
	if trips == nil {
		trips = func() int64 { return 0 }
	}
	if got, err := r.Revoked(ctx, "a", "b"); err != nil || len(got) != 0 {
		t.Fatalf("nothing revoked yet: %v %v", got, err)
	}
	if got, err := r.Revoked(ctx); err != nil || len(got) != 0 {
		t.Fatalf("no ids: %v %v", got, err)
	}
	if err := r.Revoke(ctx, "a", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, err := r.Revoked(ctx, "a", "b", "c")
	if err != nil || len(got) != 1 || !got["a"] {
		t.Fatalf("revoked a: %v %v", got, err)
	}
	// Bad arguments are typed.
	for name, err := range map[string]error{
		"empty id":      r.Revoke(ctx, "", time.Now().Add(time.Minute)),
		"past deadline": r.Revoke(ctx, "x", time.Now().Add(-time.Second)),
	} {
		if !errors.Is(err, state.ErrBadArgument) {
			t.Errorf("%s: %v, want ErrBadArgument", name, err)
		}
	}
	// A revocation lapses at its deadline; a later revoke with an earlier
	// deadline does not shorten one.
	for id, d := range map[string]time.Duration{"long": time.Minute} {
		if err := r.Revoke(ctx, id, time.Now().Add(d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Revoke(ctx, "long", time.Now().Add(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := r.Revoke(ctx, "short", time.Now().Add(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	testwait.Within(t, 5*time.Second, "the short revocation lapses", func() bool {
		got, err := r.Revoked(ctx, "short", "long")
		if err != nil {
			t.Fatal(err)
		}
		if !got["short"] && !got["long"] {
			t.Fatal("a revocation was shortened by a later, shorter one")
		}
		return !got["short"]
	})
	// Many ids (more than one Redis MGET chunk of 512) are one round trip
	// and find exactly the revoked ones.
	ids := make([]string, 3*512+7)
	want := map[string]bool{}
	for i := range ids {
		ids[i] = fmt.Sprintf("s%05d", i)
		if i%701 == 3 {
			want[ids[i]] = true
			if err := r.Revoke(ctx, ids[i], time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := trips()
	got, err = r.Revoked(ctx, ids...)
	if err != nil || len(got) != len(want) {
		t.Fatalf("batch: %v %v, want %v", got, err, want)
	}
	for id := range want {
		if !got[id] {
			t.Fatalf("batch misses %s", id)
		}
	}
	if n := trips() - before; count && n != 1 {
		t.Fatalf("batch of %d ids took %d round trips, want 1", len(ids), n)
	}

	// GetRevoked: a resume's pin read and revocation check.
	if err := kv.Put(ctx, "live", []byte("pin"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := r.Revoke(ctx, "gone", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := r.Revoke(ctx, "kicked", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := kv.Put(ctx, "kicked", []byte("pin2"), time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key     string
		value   string
		revoked bool
		err     error
	}{
		{"live", "pin", false, nil},
		{"absent", "", false, state.ErrNotFound},
		{"gone", "", true, state.ErrNotFound}, // pin lapsed, still revoked
		{"kicked", "pin2", true, nil},
	} {
		before := trips()
		v, revoked, err := state.GetRevoked(ctx, kv, tc.key, r, tc.key)
		if string(v) != tc.value || revoked != tc.revoked || !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
			t.Errorf("%s: %q %v %v, want %q %v %v", tc.key, v, revoked, err, tc.value, tc.revoked, tc.err)
		}
		if n := trips() - before; count && n != 1 {
			t.Errorf("%s: %d round trips, want 1 (the pin read and the revocation share a pipeline)", tc.key, n)
		}
	}
}

// RevocationNoticesContract: watcher (the store as another edge sees it)
// hears each revocation made through rev as it happens.
func RevocationNoticesContract(t *testing.T, rev state.Revocations, watcher state.RevocationNotices) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	heard := make(chan string, 4)
	done := make(chan error, 1)
	go func() { done <- watcher.Watch(ctx, func(id string) { heard <- id }) }()
	// A subscription takes a moment to be in place: revoke until the first
	// notice arrives, then check one more exactly.
	deadline := time.After(10 * time.Second)
	for first := false; !first; {
		if err := rev.Revoke(ctx, "warm-up", time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-heard:
			first = id == "warm-up"
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("no notice within 10 s")
		}
	}
	for len(heard) > 0 {
		<-heard
	}
	if err := rev.Revoke(ctx, "s_42", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-heard:
		if id != "s_42" {
			t.Fatalf("heard %q, want s_42", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the revocation of s_42 was not heard")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Watch ended with %v after its context", err)
	}
}

// EqualShardRecord compares two records field by field.
func EqualShardRecord(a, b state.ShardRecord) bool {
	return a.ID == b.ID && a.Addr == b.Addr && slices.Equal(a.Instances, b.Instances) &&
		a.Capacity == b.Capacity && a.Sessions == b.Sessions && a.EdgeID == b.EdgeID
}

func recordIDs(rs []state.ShardRecord) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// QueueContract is the Queue contract; newQueue returns a fresh, empty
// queue and a function that wipes its store (state loss).
func QueueContract(t *testing.T, newQueue func(*testing.T) (state.Queue, func())) {
	ctx := context.Background()
	t.Run("BucketCeiling", func(t *testing.T) {
		must := MustFor(t)
		q, _ := newQueue(t)
		r := RoomRates(60, 10, 30, 5)
		const n = 150
		for i := range n {
			must(q.Join(ctx, TicketN(i, "eu", state.LaneWeb), r, T0))
		}
		window := 2 * time.Minute
		for s := time.Duration(0); s <= window; s += time.Second {
			// Keep every ticket present is unnecessary: drains
			// happen on any poll; KeepPlace covers the window.
			must(q.Poll(ctx, TicketN(n-1, "eu", state.LaneWeb), r, T0.Add(s)))
		}
		admitted := 0
		for i := range n {
			p := must(q.Poll(ctx, TicketN(i, "eu", state.LaneWeb), r, T0.Add(window)))
			if p.Status == state.StatusAdmitted {
				admitted++
			}
		}
		limit := int(r.RegionBurst + r.RegionPerMin*window.Minutes())
		if admitted > limit || admitted < limit-1 {
			t.Fatalf("admitted %d over %v, want <= burst+rate*window = %d (and close to it)", admitted, window, limit)
		}
	})
	t.Run("GlobalBucketAcrossRegions", func(t *testing.T) {
		must := MustFor(t)
		q, _ := newQueue(t)
		r := RoomRates(6, 4, 600, 100)
		for i := range 20 {
			must(q.Join(ctx, TicketN(i, []string{"a", "b"}[i%2], state.LaneWeb), r, T0))
		}
		adm := 0
		for i := range 20 {
			if p := must(q.Poll(ctx, TicketN(i, []string{"a", "b"}[i%2], state.LaneWeb), r, T0.Add(time.Minute))); p.Status == state.StatusAdmitted {
				adm++
			}
		}
		if adm > 4+6 {
			t.Fatalf("global bucket admitted %d > 10", adm)
		}
	})
	t.Run("PxstreamBackpressureAndFreeze", func(t *testing.T) {
		must := MustFor(t)
		q, _ := newQueue(t)
		r := RoomRates(600, 100, 600, 100)
		r.PxstreamAllowed = false
		for i := range 10 {
			lane := state.LaneWeb
			if i%2 == 0 {
				lane = state.LanePxstream
			}
			p := must(q.Join(ctx, TicketN(i, "eu", lane), r, T0))
			if lane == state.LanePxstream && p.Status != state.StatusQueued {
				t.Fatalf("pxstream ticket %d %s at >= 85 %%", i, p.Status)
			}
			if lane == state.LaneWeb && p.Status != state.StatusAdmitted {
				t.Fatalf("web ticket %d %s, want admitted past pxstream heads", i, p.Status)
			}
		}
		r.Frozen = true
		r.PxstreamAllowed = true
		must(q.Join(ctx, TicketN(20, "eu", state.LaneWeb), r, T0))
		for _, i := range []int{0, 2, 4, 6, 8, 20} {
			if p := must(q.Poll(ctx, TicketN(i, "eu", []state.Lane{state.LanePxstream, state.LaneWeb}[i/20]), r, T0.Add(time.Second))); p.Status != state.StatusQueued {
				t.Fatalf("ticket %d %s while frozen", i, p.Status)
			}
		}
		r.Frozen = false
		if _, err := q.Control(ctx, state.Control{Op: state.OpFreeze}); err != nil {
			t.Fatal(err)
		}
		if p := must(q.Poll(ctx, TicketN(20, "eu", state.LaneWeb), r, T0.Add(2*time.Second))); p.Status != state.StatusQueued {
			t.Fatalf("operator freeze admitted: %s", p.Status)
		}
		if _, err := q.Control(ctx, state.Control{Op: state.OpUnfreeze}); err != nil {
			t.Fatal(err)
		}
		if p := must(q.Poll(ctx, TicketN(0, "eu", state.LanePxstream), r, T0.Add(3*time.Second))); p.Status != state.StatusAdmitted {
			t.Fatalf("after unfreeze: %s", p.Status)
		}
		// Waitlist mode is a flag of the meta every node reads.
		if m, err := q.Control(ctx, state.Control{Op: state.OpWaitlist}); err != nil || !m.Waitlist {
			t.Fatalf("waitlist: %+v %v", m, err)
		}
		if m, err := q.Meta(ctx); err != nil || !m.Waitlist || m.Frozen {
			t.Fatalf("meta after waitlist: %+v %v", m, err)
		}
		if m, err := q.Control(ctx, state.Control{Op: state.OpUnwaitlist}); err != nil || m.Waitlist {
			t.Fatalf("unwaitlist: %+v %v", m, err)
		}
	})
	t.Run("FIFOPerRegion", func(t *testing.T) {
		must := MustFor(t)
		q, _ := newQueue(t)
		r := RoomRates(600, 1, 600, 1) // one admit per 100 ms
		var ids []state.Ticket
		for i := range 30 {
			ti := TicketN(i, []string{"us", "eu"}[i%3/2], []state.Lane{state.LaneWeb, state.LanePxstream}[i%2])
			ids = append(ids, ti)
			must(q.Join(ctx, ti, r, T0))
		}
		now := T0
		for step := range 40 {
			now = now.Add(100 * time.Millisecond)
			must(q.Poll(ctx, ids[step%len(ids)], r, now))
			for _, region := range []string{"us", "eu"} {
				seenQueued := false
				for _, ti := range ids {
					if ti.Region != region {
						continue
					}
					p := must(q.Poll(ctx, ti, state.Rates{GlobalBurst: 1, RegionBurst: 1, KeepPlace: time.Hour, JoinWindow: time.Hour, TicketTTL: time.Hour, MaxAdmits: 0}, now))
					if p.Status == state.StatusQueued {
						seenQueued = true
					} else if seenQueued {
						t.Fatalf("step %d: %s admitted after an earlier ticket of %s still queued", step, ti.ID, region)
					}
				}
			}
		}
	})
	t.Run("PositionAndDrainRate", func(t *testing.T) {
		must := MustFor(t)
		q, _ := newQueue(t)
		r := RoomRates(600, 2, 600, 2)
		for i := range 5 {
			must(q.Join(ctx, TicketN(i, "eu", state.LaneWeb), r, T0))
		}
		p := must(q.Poll(ctx, TicketN(4, "eu", state.LaneWeb), r, T0))
		if p.Status != state.StatusQueued || p.Ahead != 2 || p.Depth != 3 || p.DrainPerMin != 2 {
			t.Fatalf("position %+v, want queued ahead 2 depth 3 drain 2", p)
		}
	})
	t.Run("RefundExactlyOnce", func(t *testing.T) {
		must := MustFor(t)
		q, _ := newQueue(t)
		r := RoomRates(600, 1, 0.0001, 1) // one token, effectively no refill
		for i := range 4 {
			must(q.Join(ctx, TicketN(i, "eu", state.LaneWeb), r, T0))
		}
		if p := must(q.Poll(ctx, TicketN(0, "eu", state.LaneWeb), r, T0)); p.Status != state.StatusAdmitted {
			t.Fatalf("first ticket %s", p.Status)
		}
		for i, want := range []bool{true, false} {
			got, err := q.Leave(ctx, TicketN(0, "eu", state.LaneWeb), r, T0)
			if err != nil || got != want {
				t.Fatalf("leave #%d refunded=%v err=%v, want %v", i, got, err, want)
			}
		}
		if p := must(q.Poll(ctx, TicketN(1, "eu", state.LaneWeb), r, T0)); p.Status != state.StatusAdmitted {
			t.Fatalf("refunded token not reused: %s", p.Status)
		}
		// Ticket 1 lets its join window lapse: its token returns once.
		late := T0.Add(5*time.Minute + time.Millisecond)
		if p := must(q.Poll(ctx, TicketN(2, "eu", state.LaneWeb), r, late)); p.Status != state.StatusAdmitted {
			t.Fatalf("lapsed admission not refunded: ticket 2 %s", p.Status)
		}
		if ok, _ := q.Use(ctx, TicketN(1, "eu", state.LaneWeb), late); ok {
			t.Fatal("lapsed admission still usable")
		}
		if ref, _ := q.Leave(ctx, TicketN(1, "eu", state.LaneWeb), r, late); ref {
			t.Fatal("lapsed admission refunded twice (leave after lapse)")
		}
		if p := must(q.Poll(ctx, TicketN(3, "eu", state.LaneWeb), r, late)); p.Status != state.StatusQueued {
			t.Fatalf("double refund admitted ticket 3: %s", p.Status)
		}
		// Used admissions never refund.
		if ok, err := q.Use(ctx, TicketN(2, "eu", state.LaneWeb), late); !ok || err != nil {
			t.Fatalf("use: %v %v", ok, err)
		}
		if ok, _ := q.Use(ctx, TicketN(2, "eu", state.LaneWeb), late); !ok {
			t.Fatal("use is not idempotent")
		}
		if ref, _ := q.Leave(ctx, TicketN(2, "eu", state.LaneWeb), r, late); ref {
			t.Fatal("used admission refunded")
		}
		if p := must(q.Poll(ctx, TicketN(3, "eu", state.LaneWeb), r, late.Add(10*time.Minute))); p.Status != state.StatusQueued {
			t.Fatalf("used admission refunded on lapse: ticket 3 %s", p.Status)
		}
	})
	t.Run("KeepPlace", func(t *testing.T) {
		must := MustFor(t)
		q, _ := newQueue(t)
		r := RoomRates(600, 1, 0.0001, 1)
		must(q.Join(ctx, TicketN(0, "eu", state.LaneWeb), r, T0)) // admitted at once
		must(q.Join(ctx, TicketN(1, "eu", state.LaneWeb), r, T0)) // tab closes, never polls
		must(q.Join(ctx, TicketN(2, "eu", state.LaneWeb), r, T0))
		now := T0
		for range 4 { // ticket 2 keeps polling
			now = now.Add(5 * time.Minute)
			must(q.Poll(ctx, TicketN(2, "eu", state.LaneWeb), RoomRates(600, 1, 0.0001, 1), now))
		}
		// Ticket 0's lapse at 5 min returned a token; ticket 1 was
		// still within 15 min, so it took it.
		if p := must(q.Poll(ctx, TicketN(1, "eu", state.LaneWeb), r, now)); p.Status != state.StatusGone {
			t.Fatalf("ticket 1 (admitted at 5 min, never used) %s, want gone after lapse", p.Status)
		}
		if _, err := q.Leave(ctx, TicketN(1, "eu", state.LaneWeb), r, now); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Take", func(t *testing.T) {
		q, _ := newQueue(t)
		for i := range 4 {
			ok, err := q.Take(ctx, "signup", 0.0001, 3, T0)
			if err != nil || ok != (i < 3) {
				t.Fatalf("take %d = %v %v", i, ok, err)
			}
		}
	})
	t.Run("LossFailsClosed", func(t *testing.T) {
		must := MustFor(t)
		q, wipe := newQueue(t)
		r := RoomRates(600, 100, 600, 100)
		if _, err := q.Control(ctx, state.Control{Op: state.OpArm}); err != nil {
			t.Fatal(err)
		}
		old := TicketN(1, "eu", state.LaneWeb)
		if p := must(q.Join(ctx, old, r, T0)); p.Status != state.StatusAdmitted {
			t.Fatalf("join %s", p.Status)
		}
		wipe()
		if _, err := q.Join(ctx, TicketN(2, "eu", state.LaneWeb), r, T0); !errors.Is(err, state.ErrStateLost) {
			t.Fatalf("join after loss: %v", err)
		}
		if _, err := q.Use(ctx, old, T0); !errors.Is(err, state.ErrStateLost) {
			t.Fatalf("use after loss: %v", err)
		}
		if _, err := q.Meta(ctx); !errors.Is(err, state.ErrStateLost) {
			t.Fatalf("meta after loss: %v", err)
		}
		if _, err := q.Take(ctx, "signup", 1, 1, T0); !errors.Is(err, state.ErrStateLost) {
			t.Fatalf("take after loss: %v", err)
		}
		if _, err := q.Control(ctx, state.Control{Op: state.OpArm}); !errors.Is(err, state.ErrStateLost) {
			t.Fatalf("arm after loss: %v", err)
		}
		m, err := q.Control(ctx, state.Control{Op: state.OpRearm})
		if err != nil || !m.ArmedGlobal || state.EpochGen(m.Epoch) < 2 {
			t.Fatalf("rearm: %+v %v", m, err)
		}
		if ok, err := q.Use(ctx, old, T0); ok || err != nil {
			t.Fatalf("old ticket after rearm: %v %v", ok, err)
		}
		if p := must(q.Join(ctx, TicketN(3, "eu", state.LaneWeb), r, T0)); p.Status != state.StatusAdmitted {
			t.Fatalf("join after rearm %s", p.Status)
		}
	})
}

// LeasesContract is the Leases contract on a fresh, empty store.
func LeasesContract(t *testing.T, l state.Leases) {
	ctx := context.Background()
	lim := []state.LeaseLimit{{Key: "user:u", Limit: 2}, {Key: "net:10.0.0", Limit: 3}}
	for i, want := range []int{-1, -1, 0} {
		got, err := l.Acquire(ctx, fmt.Sprintf("h%d", i), lim, time.Minute, T0)
		if err != nil || got != want {
			t.Fatalf("acquire %d = %d %v, want %d", i, got, err, want)
		}
	}
	if got, _ := l.Acquire(ctx, "h0", lim, time.Minute, T0); got != -1 {
		t.Fatal("re-acquire by a holder counted twice")
	}
	if got, _ := l.Acquire(ctx, "other", []state.LeaseLimit{{Key: "user:v", Limit: 2}, {Key: "net:10.0.0", Limit: 3}}, time.Minute, T0); got != -1 {
		t.Fatal("third on network refused")
	}
	if got, _ := l.Acquire(ctx, "fourth", []state.LeaseLimit{{Key: "user:w", Limit: 2}, {Key: "net:10.0.0", Limit: 3}}, time.Minute, T0); got != 1 {
		t.Fatalf("fourth on network = %d, want 1", got)
	}
	// Blocked acquires take nothing: user:w must still be empty.
	if got, _ := l.Acquire(ctx, "w1", []state.LeaseLimit{{Key: "user:w", Limit: 1}}, time.Minute, T0); got != -1 {
		t.Fatal("blocked acquire leaked a lease")
	}
	if err := l.Release(ctx, "h0", []string{"user:u", "net:10.0.0"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Acquire(ctx, "h2", lim, time.Minute, T0); got != -1 {
		t.Fatal("release did not free a slot")
	}
	// A dead holder lapses: h1 never refreshes; h2 does.
	later := T0.Add(90 * time.Second)
	if err := l.Refresh(ctx, "h2", []string{"user:u", "net:10.0.0"}, time.Minute, T0.Add(50*time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Acquire(ctx, "h3", lim, time.Minute, later); got != -1 {
		t.Fatal("expired lease still counted")
	}
	if got, _ := l.Acquire(ctx, "h4", lim, time.Minute, later); got != 0 {
		t.Fatalf("refreshed lease lapsed: %d", got)
	}
}

// BudgetsContract is the Budgets contract on a fresh, empty store.
func BudgetsContract(t *testing.T, bu state.Budgets) {
	ctx := context.Background()
	if n, _ := bu.Used(ctx, "u:2026-12-02", T0); n != 0 {
		t.Fatal(n)
	}
	bu.Add(ctx, "u:2026-12-02", 100, time.Hour, T0)
	if n, _ := bu.Add(ctx, "u:2026-12-02", 30, time.Hour, T0); n != 130 {
		t.Fatal(n)
	}
	if n, _ := bu.Used(ctx, "u:2026-12-02", T0); n != 130 {
		t.Fatal(n)
	}
}

// KVContract is the KV contract on a fresh, empty store.
func KVContract(t *testing.T, kv state.KV) {
	ctx := context.Background()
	if _, err := kv.Get(ctx, "absent"); !errors.Is(err, state.ErrNotFound) {
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
		if errors.Is(err, state.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("value outlived its ttl: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TalliesContract is the Tallies contract on a fresh, empty store.
func TalliesContract(t *testing.T, tl state.Tallies) {
	ctx := context.Background()
	T0 := time.Now()
	got, err := tl.Read(ctx, T0, "absent")
	if err != nil || len(got) != 1 || len(got[0]) != 0 {
		t.Fatalf("absent: %v %v", got, err)
	}
	if err := tl.Add(ctx, "a", map[string]int64{"x": 2, "y": 5}, time.Minute, T0); err != nil {
		t.Fatal(err)
	}
	if err := tl.Add(ctx, "a", map[string]int64{"x": 3}, time.Minute, T0); err != nil {
		t.Fatal(err)
	}
	if err := tl.Add(ctx, "", nil, time.Minute, T0); !errors.Is(err, state.ErrBadArgument) {
		t.Fatalf("empty key: %v", err)
	}
	// Gaps of 1000, 1200 and 800 ms; a late (earlier) event changes nothing.
	for _, ms := range []int64{0, 1000, 2200, 2100, 3000} {
		if err := tl.Gap(ctx, "a", "r", time.Minute, T0.Add(time.Duration(ms)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	got, err = tl.Read(ctx, T0, "a", "absent")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"x": 5, "y": 5, "r.n": 3, "r.sum": 3000, "r.sq": 1000*1000 + 1200*1200 + 800*800,
		"r.last": T0.Add(3 * time.Second).UnixMilli()}
	for k, v := range want {
		if got[0][k] != v {
			t.Errorf("%s = %d, want %d (all %v)", k, got[0][k], v, got[0])
		}
	}
	if len(got[0]) != len(want) || len(got[1]) != 0 {
		t.Fatalf("fields %v / %v", got[0], got[1])
	}
}

// StreamersContract is the Streamers contract on a fresh, empty store.
func StreamersContract(t *testing.T, st state.Streamers) {
	ctx := context.Background()
	now := T0
	const grace = 10 * time.Second
	conns := map[string]time.Time{}
	reg := func(id, pop string, codecs ...string) state.StreamerReg {
		conns[id] = now
		return state.StreamerReg{ID: id, POP: pop, Codecs: codecs, ConnectedAt: now}
	}
	sync := func(edge string, up []state.StreamerReg, gone ...state.StreamerKey) map[string]string {
		t.Helper()
		taken, err := st.Sync(ctx, state.StreamerSync{Edge: edge, Up: up, Gone: gone, Now: now, TTL: time.Hour, Grace: grace})
		if err != nil {
			t.Fatalf("sync: %v", err)
		}
		return taken
	}
	get := func(id string) (state.FleetStreamer, bool) {
		t.Helper()
		s, ok, err := st.Get(ctx, id, now)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		return s, ok
	}
	counts := func() map[string][3]int { // pop -> idle, leased, streaming
		t.Helper()
		all, err := st.List(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][3]int{}
		for _, s := range all {
			c := out[s.POP]
			c[map[state.StreamerState]int{state.StreamerIdle: 0, state.StreamerLeased: 1, state.StreamerStreaming: 2}[s.State]]++
			out[s.POP] = c
		}
		return out
	}
	for _, r := range []state.StreamerReg{reg("a", "eu-west-1", "H264"), {}, reg("b", "eu-west-1", "H264", "AV1"), {}, reg("c", "us-east-1", "H264")} {
		if r.ID == "" {
			now = now.Add(time.Second)
			continue
		}
		if taken := sync("edge-a", []state.StreamerReg{r}); taken != nil {
			t.Fatalf("first registration taken: %v", taken)
		}
	}
	now = now.Add(time.Second)
	if s, ok := get("b"); !ok || s.Edge != "edge-a" || s.POP != "eu-west-1" || !slices.Equal(s.Codecs, []string{"H264", "AV1"}) ||
		s.State != state.StreamerIdle || !s.ConnectedAt.Equal(conns["b"]) {
		t.Fatalf("get b: %+v %v", s, ok)
	}

	until := now.Add(30 * time.Second)
	for _, tc := range []struct {
		name, pop, codec, session string
		wantID                    string
		wantErr                   error
	}{
		{"longest idle first", "eu-west-1", "h264", "s1", "a", nil},
		{"idempotent retry", "eu-west-1", "H264", "s1", "a", nil},
		{"codec filter", "eu-west-1", "AV1", "s2", "b", nil},
		{"pop exhausted", "eu-west-1", "H264", "s3", "", state.ErrNoIdleStreamer},
		{"no such codec", "us-east-1", "VP9", "s4", "", state.ErrNoIdleStreamer},
		{"session holds another", "us-east-1", "H264", "s1", "", state.ErrSessionLeased},
		{"any codec", "us-east-1", "", "s5", "c", nil},
		{"empty session", "us-east-1", "", "", "", state.ErrBadArgument},
	} {
		got, err := st.Lease(ctx, state.StreamerLease{Mode: state.LeaseAnyIdle, POP: tc.pop, Codec: tc.codec, SessionID: tc.session, Until: until}, now)
		if !errors.Is(err, tc.wantErr) {
			t.Fatalf("%s: err %v, want %v", tc.name, err, tc.wantErr)
		}
		if err == nil && (got.ID != tc.wantID || got.State != state.StreamerLeased || got.SessionID != tc.session || !got.LeaseUntil.Equal(until)) {
			t.Fatalf("%s: got %+v, want %s leased to %s", tc.name, got, tc.wantID, tc.session)
		}
	}
	if c := counts(); c["eu-west-1"] != [3]int{0, 2, 0} || c["us-east-1"] != [3]int{0, 1, 0} {
		t.Fatalf("counts %v", c)
	}
	for _, s := range []string{"s1", "s2", "s5"} {
		if err := st.Release(ctx, s, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Release(ctx, "s1", now); !errors.Is(err, state.ErrUnknownSession) {
		t.Fatalf("second release: %v", err)
	}
	named := func(mode state.LeaseMode, id, sess string, until time.Time) error {
		_, err := st.Lease(ctx, state.StreamerLease{Mode: mode, ID: id, SessionID: sess, Until: until}, now)
		return err
	}
	stateOfA := func() state.StreamerState { s, _ := get("a"); return s.State }
	if err := named(state.LeaseNamed, "a", "s1", now.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := named(state.LeaseNamed, "a", "s2", now.Add(30*time.Second)); !errors.Is(err, state.ErrNotIdle) {
		t.Fatalf("second lease: %v", err)
	}
	if err := named(state.LeaseNamed, "zz", "s2", now.Add(time.Minute)); !errors.Is(err, state.ErrUnknownStreamer) {
		t.Fatalf("unknown: %v", err)
	}
	now = now.Add(29 * time.Second)
	if stateOfA() != state.StreamerLeased {
		t.Fatal("lease lapsed early")
	}
	now = now.Add(time.Second)
	if stateOfA() != state.StreamerIdle {
		t.Fatal("lease did not lapse")
	}
	// a's lapsed lease makes it idle since its until: b (idle since its
	// release) goes first, then a.
	if got, err := st.Lease(ctx, state.StreamerLease{Mode: state.LeaseAnyIdle, POP: "eu-west-1", SessionID: "s9", Until: now.Add(10 * time.Second)}, now); err != nil || got.ID != "b" {
		t.Fatalf("after lapse: %+v %v", got, err)
	}
	if err := st.Release(ctx, "s9", now); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Lease(ctx, state.StreamerLease{Mode: state.LeaseAnyIdle, POP: "eu-west-1", SessionID: "s3", Until: now.Add(10 * time.Second)}, now); err != nil || got.ID != "a" {
		t.Fatalf("after lapse: %+v %v", got, err)
	}
	// A claim only ever extends the session's own lease.
	if err := named(state.LeaseClaim, "a", "s3", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := named(state.LeaseClaim, "a", "s3", now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if s, _ := get("a"); !s.LeaseUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("a claim shortened the lease: %+v", s)
	}
	if err := named(state.LeaseClaim, "a", "s4", now.Add(time.Minute)); !errors.Is(err, state.ErrNotIdle) {
		t.Fatalf("claim by another session: %v", err)
	}
	// A player joins (the edge syncs the count): streaming, whatever the
	// lease's until.
	ra := state.StreamerReg{ID: "a", POP: "eu-west-1", Codecs: []string{"H264"}, ConnectedAt: conns["a"], Players: 1}
	sync("edge-a", []state.StreamerReg{ra})
	now = now.Add(time.Hour)
	if stateOfA() != state.StreamerStreaming {
		t.Fatalf("state %s, want streaming", stateOfA())
	}
	// A rename keeps the registration, its lease and its place.
	ra.ID, ra.Was = "a1", "a"
	sync("edge-a", []state.StreamerReg{ra})
	if s, ok := get("a1"); !ok || s.SessionID != "s3" || s.Players != 1 || s.Edge != "edge-a" {
		t.Fatalf("after rename %+v", s)
	}
	if _, ok := get("a"); ok {
		t.Fatal("old id still registered")
	}
	// The last player leaves: the lease is kept for the grace.
	ra.Was, ra.Players = "", 0
	sync("edge-a", []state.StreamerReg{ra})
	if s, _ := get("a1"); s.State != state.StreamerLeased || !s.LeaseUntil.Equal(now.Add(grace)) {
		t.Fatalf("after leave %+v", s)
	}
	if err := st.Release(ctx, "s3", now); err != nil {
		t.Fatal(err)
	}
	if s, _ := get("a1"); s.State != state.StreamerIdle || s.SessionID != "" {
		t.Fatalf("after release %+v", s)
	}
	all, err := st.List(ctx, now)
	if err != nil || len(all) != 3 || all[0].ID != "a1" || all[1].ID != "b" || all[2].ID != "c" {
		t.Fatalf("list order %+v %v", all, err)
	}

	// Another edge cannot take a registered id; the owner keeps it.
	if taken := sync("edge-b", []state.StreamerReg{{ID: "c", POP: "x", ConnectedAt: now}}); taken["c"] != "edge-a" {
		t.Fatalf("taken %v, want c held by edge-a", taken)
	}
	if s, _ := get("c"); s.Edge != "edge-a" || s.POP != "us-east-1" {
		t.Fatalf("c after another edge's claim: %+v", s)
	}
	// Only the registering connection removes a registration.
	sync("edge-b", nil, state.StreamerKey{ID: "c", ConnectedAt: conns["c"]})
	sync("edge-a", nil, state.StreamerKey{ID: "c", ConnectedAt: conns["c"].Add(time.Second)})
	if _, ok := get("c"); !ok {
		t.Fatal("a stranger's removal removed c")
	}
	// The same id from a new connection of the same edge is a new
	// registration: the old lease is gone.
	if err := named(state.LeaseNamed, "c", "s7", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	sync("edge-a", []state.StreamerReg{reg("c", "us-east-1", "VP8")})
	if s, _ := get("c"); s.State != state.StreamerIdle || !slices.Equal(s.Codecs, []string{"VP8"}) || !s.ConnectedAt.Equal(now) {
		t.Fatalf("re-registration: %+v", s)
	}
	if err := st.Release(ctx, "s7", now); !errors.Is(err, state.ErrUnknownSession) {
		t.Fatalf("the old registration's lease survived: %v", err)
	}
	sync("edge-a", nil, state.StreamerKey{ID: "a1", ConnectedAt: conns["a"]}, state.StreamerKey{ID: "b", ConnectedAt: conns["b"]})
	if all, _ := st.List(ctx, now); len(all) != 1 || all[0].ID != "c" {
		t.Fatalf("after remove %+v", all)
	}
	if _, err := st.Sync(ctx, state.StreamerSync{Edge: "bad edge", Now: now}); !errors.Is(err, state.ErrBadArgument) {
		t.Fatalf("bad edge id: %v", err)
	}

	// A registration its edge stops syncing lapses after the TTL, by the
	// store's clock (real time here).
	t.Run("TTL", func(t *testing.T) {
		at := time.Now()
		const ttl = 300 * time.Millisecond
		if _, err := st.Sync(ctx, state.StreamerSync{Edge: "edge-d", Up: []state.StreamerReg{{ID: "d", POP: "p", ConnectedAt: at}}, Now: at, TTL: ttl}); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := st.Get(ctx, "d", time.Now()); !ok {
			t.Fatal("not registered")
		}
		testwait.Within(t, 5*time.Second, "the registration lapses", func() bool {
			_, ok, err := st.Get(ctx, "d", time.Now())
			return err == nil && !ok
		})
		all, err := st.List(ctx, time.Now())
		if err != nil || slices.ContainsFunc(all, func(s state.FleetStreamer) bool { return s.ID == "d" }) {
			t.Fatalf("lapsed registration listed: %+v %v", all, err)
		}
	})
}

// InboxContract is the Inbox contract on fresh, empty inboxes.
func InboxContract(t *testing.T, in state.Inbox) {
	ctx := context.Background()
	read := func(edge, cur string, max int, wait time.Duration) ([]string, string) {
		t.Helper()
		msgs, next, err := in.Read(ctx, edge, cur, max, wait)
		if err != nil {
			t.Fatalf("read %s: %v", edge, err)
		}
		out := make([]string, len(msgs))
		for i, m := range msgs {
			out[i] = string(m)
		}
		return out, next
	}
	if err := in.Send(ctx, "edge-a", []byte("before the reader")); err != nil {
		t.Fatal(err)
	}
	start, err := in.End(ctx, "edge-a")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := read("edge-a", start, 10, 10*time.Millisecond); len(got) != 0 {
		t.Fatalf("read from the end: %q", got)
	}
	if got, _ := read("edge-a", "", 10, 10*time.Millisecond); len(got) != 0 {
		t.Fatalf("read from \"\": %q", got)
	}
	// Order within a send and across sends; max bounds a read.
	var want []string
	for s := range 3 {
		var batch [][]byte
		for i := range 100 {
			m := fmt.Sprintf("m%d-%d", s, i)
			want = append(want, m)
			batch = append(batch, []byte(m))
		}
		if err := in.Send(ctx, "edge-a", batch...); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.Send(ctx, "edge-b", []byte("for b")); err != nil {
		t.Fatal(err)
	}
	var got []string
	cur := start
	for len(got) < len(want) {
		part, next := read("edge-a", cur, 128, time.Second)
		if len(part) == 0 || len(part) > 128 {
			t.Fatalf("read %d messages after %d", len(part), len(got))
		}
		got, cur = append(got, part...), next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("messages out of order or lost: %q", got)
	}
	if part, next := read("edge-a", cur, 128, 20*time.Millisecond); len(part) != 0 || next != cur {
		t.Fatalf("nothing new: %q %q (cursor %q)", part, next, cur)
	}
	if end, err := in.End(ctx, "edge-a"); err != nil || end != cur {
		t.Fatalf("end %q %v, want the cursor after the last message %q", end, err, cur)
	}
	if got, _ := read("edge-b", "", 10, 10*time.Millisecond); len(got) != 0 {
		t.Fatalf("edge-b from its end: %q", got)
	}
	// A blocked reader wakes for a send.
	done := make(chan []string, 1)
	go func() {
		msgs, _, err := in.Read(ctx, "edge-a", cur, 10, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		out := make([]string, len(msgs))
		for i, m := range msgs {
			out[i] = string(m)
		}
		done <- out
	}()
	if err := in.Send(ctx, "edge-a", []byte("wake")); err != nil {
		t.Fatal(err)
	}
	if w := <-done; !slices.Equal(w, []string{"wake"}) {
		t.Fatalf("woken reader got %q", w)
	}
	// A reader's context ends its wait.
	cctx, cancel := context.WithCancel(ctx)
	go cancel()
	if _, _, err := in.Read(cctx, "edge-c", "", 10, 10*time.Second); err == nil {
		t.Fatal("a cancelled read returned no error")
	}
	if err := in.Send(ctx, "a{b}", []byte("x")); !errors.Is(err, state.ErrBadArgument) {
		t.Fatalf("bad edge id: %v", err)
	}
}

// MembersContract is the Members contract on a fresh, empty membership
// whose TTL is ttl: view returns an edge's view of it, pass lets time
// pass for it (a fake clock, or real time for a store that keeps its own).
func MembersContract(t *testing.T, ttl time.Duration, view func(state.Member) state.Members, pass func(time.Duration)) {
	ctx := context.Background()
	a := view(state.Member{ID: "edge-a", URL: "https://a.example:8443"})
	z := view(state.Member{ID: "edge-z"})
	alive := func(ids ...string) map[string]state.Member {
		t.Helper()
		m, err := a.Alive(ctx, ids...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := alive(); len(m) != 0 {
		t.Fatalf("empty membership: %v", m)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.Beat(ctx))
	if m := alive(); len(m) != 1 || m["edge-a"] != (state.Member{ID: "edge-a", URL: "https://a.example:8443"}) {
		t.Fatalf("after a's beat: %v", m)
	}
	if m := alive("edge-a", "edge-z", "edge-nobody"); len(m) != 1 {
		t.Fatalf("asked about three: %v", m)
	}
	must(z.Beat(ctx))
	if m := alive(); len(m) != 2 || m["edge-z"].ID != "edge-z" {
		t.Fatalf("after z's beat: %v", m)
	}
	// A live edge stays alive past the TTL by beating.
	for range 4 {
		pass(ttl / 3)
		must(a.Beat(ctx))
	}
	if m := alive(); len(m) != 1 || m["edge-a"].ID == "" {
		t.Fatalf("a beat, z did not: %v", m)
	}
	// A clean stop leaves at once.
	must(a.Leave(ctx))
	if m := alive("edge-a"); len(m) != 0 {
		t.Fatalf("after leave: %v", m)
	}
	must(z.Beat(ctx))
	if m := alive(); len(m) != 1 || m["edge-z"].ID != "edge-z" {
		t.Fatalf("z back: %v", m)
	}
}

// ShardDirectoryContract is the ShardDirectory contract; newDir returns
// a fresh, empty directory.
func ShardDirectoryContract(t *testing.T, newDir func(*testing.T) state.ShardDirectory) {
	ctx := context.Background()
	t.Run("AnnounceAndList", func(t *testing.T) {
		d := newDir(t)
		if got, err := d.List(ctx); err != nil || len(got) != 0 {
			t.Fatalf("empty directory: %v %v", got, err)
		}
		west := state.ShardRecord{ID: "west", Addr: "10.0.0.2:7000", Instances: []string{"aye-shore"}, Capacity: 500, Sessions: 3, EdgeID: "edge-a"}
		east := state.ShardRecord{ID: "east", Addr: "10.0.0.1:7000", Instances: []string{"orun-grove", "orun-market"}, EdgeID: "edge-b"}
		for _, r := range []state.ShardRecord{west, east} {
			if err := d.Announce(ctx, r, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		got, err := d.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || !EqualShardRecord(got[0], east) || !EqualShardRecord(got[1], west) {
			t.Fatalf("list %+v, want east then west as announced", got)
		}
		// The caller owns what List returns.
		got[0].Instances[0] = "mutated"
		if again, _ := d.List(ctx); again[0].Instances[0] != "orun-grove" {
			t.Fatalf("List handed out the stored slice: %+v", again)
		}
	})
	t.Run("ReannounceReplaces", func(t *testing.T) {
		d := newDir(t)
		r := state.ShardRecord{ID: "s1", Addr: "10.0.0.1:7000", Instances: []string{"a", "b"}, Sessions: 1}
		if err := d.Announce(ctx, r, time.Minute); err != nil {
			t.Fatal(err)
		}
		r2 := state.ShardRecord{ID: "s1", Addr: "10.0.0.9:7001", Instances: []string{"c"}, Sessions: 7}
		if err := d.Announce(ctx, r2, time.Minute); err != nil {
			t.Fatal(err)
		}
		if got, err := d.List(ctx); err != nil || len(got) != 1 || !EqualShardRecord(got[0], r2) {
			t.Fatalf("after re-announce: %+v %v", got, err)
		}
	})
	t.Run("Lapses", func(t *testing.T) {
		d := newDir(t)
		live := state.ShardRecord{ID: "live", Addr: "127.0.0.1:1"}
		if err := d.Announce(ctx, live, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := d.Announce(ctx, state.ShardRecord{ID: "silent", Addr: "127.0.0.1:2"}, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		// Refreshed before it lapses, a record stays.
		if err := d.Announce(ctx, state.ShardRecord{ID: "kept", Addr: "127.0.0.1:3"}, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := d.Announce(ctx, state.ShardRecord{ID: "kept", Addr: "127.0.0.1:3"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, err := d.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ids := recordIDs(got); slices.Equal(ids, []string{"kept", "live"}) {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("a silent shard never lapsed (or a live one did): %v", ids)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("BadArguments", func(t *testing.T) {
		d := newDir(t)
		many := make([]string, state.MaxShardInstances+1)
		for i := range many {
			many[i] = fmt.Sprintf("i%d", i)
		}
		for name, c := range map[string]struct {
			rec state.ShardRecord
			ttl time.Duration
		}{
			"empty id":          {state.ShardRecord{Addr: "127.0.0.1:1"}, time.Minute},
			"long id":           {state.ShardRecord{ID: strings.Repeat("x", 200), Addr: "127.0.0.1:1"}, time.Minute},
			"no address":        {state.ShardRecord{ID: "s"}, time.Minute},
			"address sans port": {state.ShardRecord{ID: "s", Addr: "10.0.0.1"}, time.Minute},
			"empty instance":    {state.ShardRecord{ID: "s", Addr: "127.0.0.1:1", Instances: []string{""}}, time.Minute},
			"too many":          {state.ShardRecord{ID: "s", Addr: "127.0.0.1:1", Instances: many}, time.Minute},
			"negative load":     {state.ShardRecord{ID: "s", Addr: "127.0.0.1:1", Sessions: -1}, time.Minute},
			"zero ttl":          {state.ShardRecord{ID: "s", Addr: "127.0.0.1:1"}, 0},
		} {
			if err := d.Announce(ctx, c.rec, c.ttl); !errors.Is(err, state.ErrBadArgument) {
				t.Errorf("%s: %v, want state.ErrBadArgument", name, err)
			}
		}
		if got, _ := d.List(ctx); len(got) != 0 {
			t.Fatalf("a refused record was stored: %+v", got)
		}
	})
}

// VoiceRoomsContract is the VoiceRooms contract: forEdge returns an edge's
// view of one fresh room table whose windows are times, advance lets time
// pass for it.
func VoiceRoomsContract(t *testing.T, forEdge func(id, url string) state.VoiceRooms, advance func(time.Duration), times state.VoiceRoomTimes) {
	ctx := context.Background()
	a := forEdge("edge-a", "https://a.example:8443")
	c := forEdge("edge-b", "https://b.example:8443")
	claim := func(v state.VoiceRooms, room string) state.RoomHolder {
		t.Helper()
		h, mine, err := v.Claim(ctx, room)
		if err != nil {
			t.Fatal(err)
		}
		if mine != (h.EdgeID == map[state.VoiceRooms]string{a: "edge-a", c: "edge-b"}[v]) {
			t.Fatalf("claim of %s: mine=%v but holder %+v", room, mine, h)
		}
		return h
	}
	// First claim wins; the other edge is told where the room is.
	if h := claim(a, "grove"); h.EdgeID != "edge-a" {
		t.Fatalf("first claim: holder %+v, want edge-a", h)
	}
	if h := claim(c, "grove"); h != (state.RoomHolder{EdgeID: "edge-a", URL: "https://a.example:8443"}) {
		t.Fatalf("second edge: holder %+v, want edge-a with its url", h)
	}
	if h := claim(a, "grove"); h.EdgeID != "edge-a" {
		t.Fatalf("re-claim by holder: %+v", h)
	}
	// Rooms are independent.
	if h := claim(c, "shore"); h.EdgeID != "edge-b" {
		t.Fatalf("other room: %+v", h)
	}

	// A live holder keeps its room past AliveTTL by heartbeating.
	for range 4 {
		advance(times.AliveTTL / 3)
		lost, err := a.Heartbeat(ctx, []string{"grove"})
		if err != nil || len(lost) != 0 {
			t.Fatalf("heartbeat: lost %v err %v", lost, err)
		}
		if _, err := c.Heartbeat(ctx, []string{"shore"}); err != nil {
			t.Fatal(err)
		}
	}
	if h := claim(c, "grove"); h.EdgeID != "edge-a" {
		t.Fatalf("live holder lost its room: %+v", h)
	}

	// Release hands the room to the next claimer; a release by a
	// non-holder changes nothing.
	if err := c.Release(ctx, "grove"); err != nil {
		t.Fatal(err)
	}
	if h := claim(c, "grove"); h.EdgeID != "edge-a" {
		t.Fatalf("release by non-holder moved the room: %+v", h)
	}
	if err := a.Release(ctx, "grove"); err != nil {
		t.Fatal(err)
	}
	if h := claim(c, "grove"); h.EdgeID != "edge-b" {
		t.Fatalf("released room not claimable: %+v", h)
	}

	// The holder dies (no heartbeat for AliveTTL): the room moves to
	// the next claimer, and the old holder learns it lost the room.
	advance(times.AliveTTL + times.AliveTTL/2)
	if h := claim(a, "grove"); h.EdgeID != "edge-a" {
		t.Fatalf("dead holder kept its room: %+v", h)
	}
	lost, err := c.Heartbeat(ctx, []string{"grove", "shore"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lost, []string{"grove"}) {
		t.Fatalf("old holder's heartbeat: lost %v, want [grove]", lost)
	}
}

// SeatsContract is the state.Seats contract; newSeats gives a store on a fresh,
// empty data set, and with twoClients each call is another client of the
// same data (another edge: the race is fought across them).
func SeatsContract(t *testing.T, newSeats func(*testing.T) state.Seats, twoClients bool) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	ctx := context.Background()
	sfus := []state.SeatLimit{{SFU: "SFU", Seats: 2}, {SFU: "SFU2", Seats: 3}}
	used := func(t *testing.T, s state.Seats, pool string, now time.Time) map[string]int {
		t.Helper()
		u, err := s.Used(ctx, pool, []string{"SFU", "SFU2"}, now)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	t.Run("FillsMostFreeFirstNeverOver", func(t *testing.T) {
		s := newSeats(t)
		// Most free first (ties: the first listed): SFU2 (3), then SFU and
		// SFU2 alternate as free seats even out, then full.
		want := []string{"SFU2", "SFU", "SFU2", "SFU", "SFU2", ""}
		for i, w := range want {
			got, err := s.Take(ctx, "gala", fmt.Sprintf("h%d", i), sfus, time.Minute, t0)
			if err != nil || got != w {
				t.Fatalf("take %d = %q %v, want %q", i, got, err, w)
			}
		}
		if u := used(t, s, "gala", t0); u["SFU"] != 2 || u["SFU2"] != 3 {
			t.Fatalf("used %v, want SFU 2, SFU2 3", u)
		}
		// Another pool is another concert.
		if got, _ := s.Take(ctx, "other", "h9", sfus, time.Minute, t0); got != "SFU2" {
			t.Fatalf("other pool: %q", got)
		}
	})
	t.Run("RetakeKeepsTheSeat", func(t *testing.T) {
		s := newSeats(t)
		first, _ := s.Take(ctx, "gala", "h", sfus, time.Minute, t0)
		for range 3 {
			if got, err := s.Take(ctx, "gala", "h", sfus, time.Minute, t0.Add(30*time.Second)); err != nil || got != first {
				t.Fatalf("retake = %q %v, want %q", got, err, first)
			}
		}
		if u := used(t, s, "gala", t0); u["SFU"]+u["SFU2"] != 1 {
			t.Fatalf("retake counted twice: %v", u)
		}
		// The retake moved the deadline: alive at t0+80s.
		if u := used(t, s, "gala", t0.Add(80*time.Second)); u[first] != 1 {
			t.Fatalf("retake did not refresh: %v", u)
		}
	})
	t.Run("LapseRefreshRelease", func(t *testing.T) {
		s := newSeats(t)
		one := []state.SeatLimit{{SFU: "SFU", Seats: 2}}
		for _, h := range []string{"dead", "live"} {
			if got, _ := s.Take(ctx, "gala", h, one, time.Minute, t0); got != "SFU" {
				t.Fatalf("take %s: %q", h, got)
			}
		}
		if got, _ := s.Take(ctx, "gala", "late", one, time.Minute, t0); got != "" {
			t.Fatalf("full SFU seated %q", got)
		}
		if err := s.Refresh(ctx, "gala", "SFU", "live", time.Minute, t0.Add(50*time.Second)); err != nil {
			t.Fatal(err)
		}
		// Refreshing a holder that has no seat takes none.
		if err := s.Refresh(ctx, "gala", "SFU", "ghost", time.Minute, t0.Add(50*time.Second)); err != nil {
			t.Fatal(err)
		}
		later := t0.Add(70 * time.Second)
		if u := used(t, s, "gala", later); u["SFU"] != 1 {
			t.Fatalf("after the dead seat lapsed: %v, want 1", u)
		}
		if got, _ := s.Take(ctx, "gala", "late", one, time.Minute, later); got != "SFU" {
			t.Fatalf("lapsed seat not free: %q", got)
		}
		if got, _ := s.Take(ctx, "gala", "later", one, time.Minute, later); got != "" {
			t.Fatalf("refreshed seat lapsed: %q", got)
		}
		if err := s.Release(ctx, "gala", "SFU", "live"); err != nil {
			t.Fatal(err)
		}
		if err := s.Release(ctx, "gala", "SFU", "live"); err != nil {
			t.Fatal("second release:", err)
		}
		if got, _ := s.Take(ctx, "gala", "later", one, time.Minute, later); got != "SFU" {
			t.Fatalf("released seat not free: %q", got)
		}
	})
	t.Run("BadArguments", func(t *testing.T) {
		s := newSeats(t)
		for _, c := range []struct {
			pool, holder string
			sfus         []state.SeatLimit
		}{{"", "h", sfus}, {"gala", "", sfus}, {"ga{la}", "h", sfus}, {"gala", "h", []state.SeatLimit{{SFU: "", Seats: 1}}}, {"gala", "h", []state.SeatLimit{{SFU: "SFU", Seats: -1}}}} {
			if _, err := s.Take(ctx, c.pool, c.holder, c.sfus, time.Minute, t0); !errors.Is(err, state.ErrBadArgument) {
				t.Errorf("take %+v: %v, want state.ErrBadArgument", c, err)
			}
		}
	})
	t.Run("ConcurrentTakersNeverOversell", func(t *testing.T) {
		// Two clients (two edges; memory: one node) race 40 takers for 5
		// seats.
		a := newSeats(t)
		z := a
		if twoClients {
			z = newSeats(t)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		got := map[string]int{}
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := a
				if i%2 == 1 {
					s = z
				}
				sfu, err := s.Take(ctx, "gala", fmt.Sprintf("h%02d", i), sfus, time.Minute, t0)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				got[sfu]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		if got["SFU"] != 2 || got["SFU2"] != 3 || got[""] != 35 {
			t.Fatalf("seated %v, want SFU 2, SFU2 3, 35 refused", got)
		}
		if u := used(t, a, "gala", t0); u["SFU"] != 2 || u["SFU2"] != 3 {
			t.Fatalf("used %v", u)
		}
	})
}
