package admission

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oshun/egbe-edge/state"
)

// recEnder records the sessions the lifecycle ends.
type recEnder struct {
	mu    sync.Mutex
	ended map[string]string
}

func (e *recEnder) EndSession(sid, reason string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended == nil {
		e.ended = map[string]string{}
	}
	e.ended[sid] = reason
	return true
}

func (e *recEnder) reason(sid string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ended[sid]
}

// sessEnv is one edge's PxSessions over shared memory state, on the
// bubble's clock (time.Now inside synctest).
type sessEnv struct {
	a       *Admitter
	s       *PxSessions
	budgets *state.MemoryBudgets
	seats   *state.MemorySeats
	ender   *recEnder
	reg     *prometheus.Registry
}

const testGrace = 10 * time.Second

func newSessEnv(t *testing.T, edge string, leases *state.MemoryLeases, seats *state.MemorySeats, kv state.KV, budgets *state.MemoryBudgets) *sessEnv {
	t.Helper()
	p := DefaultPolicy()
	tallies := state.NewMemoryTallies()
	watch := NewAbuseWatch(p, tallies, kv, nil, time.Now, nil)
	reg := prometheus.NewRegistry()
	meter, err := NewMeter(tallies, time.Now, reg)
	if err != nil {
		t.Fatal(err)
	}
	a := NewAdmitter(p, leases, budgets, seats, watch, nil, time.Now, nil)
	s, err := NewPxSessions(PxSessionsConfig{Edge: edge, Every: time.Second, Grace: testGrace},
		PxSessionsDeps{Admitter: a, Watch: watch, Meter: meter, KV: kv, Now: time.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e := &sessEnv{a: a, s: s, budgets: budgets, seats: seats, ender: &recEnder{}, reg: reg}
	s.SetEnder(e.ender)
	return e
}

// oneEdge is a PxSessions on its own memory state.
func oneEdge(t *testing.T) *sessEnv {
	return newSessEnv(t, "edge-a", state.NewMemoryLeases(), state.NewMemorySeats(), state.NewMemoryKV(time.Now), state.NewMemoryBudgets())
}

// run runs the rounds until the test's end.
func (e *sessEnv) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// admit admits sid for subject (a concert seat when seat is set) and
// hands it to the lifecycle with a session token valid for ttl.
func (e *sessEnv) admit(t *testing.T, sid, subject string, paid bool, seat *SeatPool, ttl time.Duration) *Lease {
	t.Helper()
	d, err := e.a.Admit(context.Background(), PxRequest{SessionID: sid, Subject: subject, TenantID: "tara-studio",
		ClientIP: netip.MustParseAddr("10.1.2.3"), Paid: paid, Seat: seat})
	if err != nil || d.Action != PxAdmit {
		t.Fatalf("admit %s: %+v %v", sid, d, err)
	}
	now := time.Now()
	e.s.Admitted(context.Background(), sid, PxAdmitted{Subject: subject, Paid: paid, POP: "us-east-1", Lease: d.Lease,
		MatchedAt: now, Until: now.Add(ttl)})
	return d.Lease
}

func (e *sessEnv) used(t *testing.T, subject string) int64 {
	t.Helper()
	n, err := e.budgets.Used(context.Background(), "pxfree:"+subject+":"+time.Now().UTC().Format("2006-01-02"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// starts reads egbe_admission_session_starts_total{outcome}.
func (e *sessEnv) starts(t *testing.T, outcome string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "egbe_admission_session_starts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestPxSessionsChargesStartedMinutes: a free session is charged a minute
// per started minute while a player streams (across a reconnect), not
// while nobody plays, and is ended for its budget (the lease goes with
// it); a paid one is never charged.
func TestPxSessionsChargesStartedMinutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := oneEdge(t)
		e.run(t)
		e.admit(t, "s1", "fan", false, nil, 2*time.Minute)
		e.admit(t, "s2", "patron", true, nil, 2*time.Minute)
		e.s.Subscribed("s1")
		e.s.Subscribed("s2")
		e.s.Offered("s1")
		time.Sleep(61 * time.Second)
		synctest.Wait()
		if n := e.used(t, "fan"); n != 2 {
			t.Fatalf("61 s streamed: %d minutes charged, want 2", n)
		}
		// The player goes and comes back within the grace: nothing is
		// charged meanwhile, and the session carries on.
		e.s.Left("s1")
		time.Sleep(testGrace - time.Second)
		e.s.Subscribed("s1")
		time.Sleep(58 * time.Second) // 61 + 58 = 119 s streamed: still 2 started minutes
		synctest.Wait()
		if n := e.used(t, "fan"); n != 2 {
			t.Fatalf("after the reconnect: %d minutes, want 2", n)
		}
		if n := e.used(t, "patron"); n != 0 {
			t.Fatalf("paid session charged %d", n)
		}
		// The day's budget: 120 - 3 used by others; the next started
		// minute ends it.
		if _, err := e.a.RecordUsage(context.Background(), "fan", e.a.FreeMinutes()-3); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if r := e.ender.reason("s1"); r != PxEndBudget {
			t.Fatalf("ended %q, want budget", r)
		}
		if e.s.kept("s1") || !e.s.kept("s2") {
			t.Fatalf("kept s1 %v s2 %v", e.s.kept("s1"), e.s.kept("s2"))
		}
		if e.starts(t, "started") != 1 {
			t.Fatalf("starts %v", e.starts(t, "started"))
		}
		// The ended session's lease is gone: the user cap (2) is whole.
		e.admit(t, "s3", "fan-2", true, nil, time.Minute) // another subject, same network
		for _, sid := range []string{"s4", "s5"} {
			e.admit(t, sid, "fan", true, nil, time.Minute)
		}
	})
}

// TestPxSessionsGraceAndLapse: after the player leaves, the lease and its
// concert seat are kept for exactly the grace; a session nobody plays
// keeps them until its token lapses and is then a failed start; a seat
// whose edge stopped refreshing lapses with the lease TTL.
func TestPxSessionsGraceAndLapse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := oneEdge(t)
		e.run(t)
		pool := &SeatPool{Event: "gala", SFUs: []state.SeatLimit{{SFU: "SFU", Seats: 10}}}
		seatsUsed := func() int {
			u, err := e.seats.Used(context.Background(), "gala", []string{"SFU"}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			return u["SFU"]
		}
		e.admit(t, "s1", "fan-1", true, pool, 2*time.Minute)
		e.admit(t, "s2", "fan-2", true, pool, 2*time.Minute)
		e.s.Subscribed("s1")
		e.s.Offered("s1")
		time.Sleep(5 * time.Minute) // s1 streams on past its token (refreshed); s2 never came
		synctest.Wait()
		if !e.s.kept("s1") || e.s.kept("s2") || seatsUsed() != 1 {
			t.Fatalf("after 5 min: kept s1 %v s2 %v, seats %d", e.s.kept("s1"), e.s.kept("s2"), seatsUsed())
		}
		if e.starts(t, "failed") != 1 || e.starts(t, "started") != 1 {
			t.Fatalf("starts: failed %v started %v", e.starts(t, "failed"), e.starts(t, "started"))
		}
		e.s.Left("s1")
		time.Sleep(testGrace - time.Second)
		synctest.Wait()
		if !e.s.kept("s1") || seatsUsed() != 1 {
			t.Fatal("seat let go inside the grace")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if e.s.kept("s1") || seatsUsed() != 0 {
			t.Fatalf("after the grace: kept %v, seats %d", e.s.kept("s1"), seatsUsed())
		}
		// A seat held by a session nobody refreshes (its edge died)
		// lapses with the lease TTL.
		lost := newSessEnv(t, "edge-dead", state.NewMemoryLeases(), e.seats, state.NewMemoryKV(time.Now), state.NewMemoryBudgets())
		lost.admit(t, "s3", "fan-3", true, pool, 2*time.Minute)
		if seatsUsed() != 1 {
			t.Fatal("seat not taken")
		}
		time.Sleep(time.Duration(DefaultPolicy().Pxstream.LeaseTTLMs)*time.Millisecond + time.Second)
		if seatsUsed() != 0 {
			t.Fatal("an unrefreshed seat outlived the lease TTL")
		}
	})
}

// TestPxSessionsTakeover: the edge where the player streams takes the
// session over from the edge that admitted it (the shared record); the
// admitting edge then lets go without releasing the lease the other
// edge keeps.
func TestPxSessionsTakeover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		leases, seats, kv, budgets := state.NewMemoryLeases(), state.NewMemorySeats(), state.NewMemoryKV(time.Now), state.NewMemoryBudgets()
		a := newSessEnv(t, "edge-a", leases, seats, kv, budgets)
		b := newSessEnv(t, "edge-b", leases, seats, kv, budgets)
		a.run(t)
		b.run(t)
		a.admit(t, "s1", "fan", false, nil, 2*time.Minute)
		b.s.Subscribed("s1") // the streamer's edge
		time.Sleep(3 * time.Minute)
		synctest.Wait()
		if a.s.kept("s1") || !b.s.kept("s1") {
			t.Fatalf("kept by a %v, b %v; want b only", a.s.kept("s1"), b.s.kept("s1"))
		}
		if n := b.used(t, "fan"); n != 3 {
			t.Fatalf("charged %d, want 3 (by the edge that keeps it)", n)
		}
		// b still holds the lease: the subject's cap (2) has one left.
		a.admit(t, "s2", "fan", false, nil, time.Minute)
		d, err := a.a.Admit(context.Background(), PxRequest{SessionID: "s3", Subject: "fan", TenantID: "tara-studio",
			ClientIP: netip.MustParseAddr("10.1.2.3")})
		if err != nil || d.Action != PxRejectUserCap {
			t.Fatalf("third session: %+v %v, want reject-user-cap", d, err)
		}
	})
}
