package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/state"
)

func TestNetworkKey(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.77":           "203.0.113.0/24",
		"::ffff:203.0.113.77":    "203.0.113.0/24",
		"2001:db8:abcd:12::1":    "2001:db8:abcd::/48",
		"2001:db8:abcd:ffff::99": "2001:db8:abcd::/48",
	} {
		if got := NetworkKey(netip.MustParseAddr(in), 24, 48); got != want {
			t.Errorf("%s -> %s, want %s", in, got, want)
		}
	}
}

type pxEnv struct {
	a     *Admitter
	seats *state.MemorySeats
	audit *bytes.Buffer
	now   time.Time
}

func newPxEnv() *pxEnv {
	e := &pxEnv{audit: &bytes.Buffer{}, now: clock0, seats: state.NewMemorySeats()}
	clk := func() time.Time { return e.now }
	e.a = NewAdmitter(DefaultPolicy(), state.NewMemoryLeases(), state.NewMemoryBudgets(), e.seats, nil, NewAuditor(e.audit, clk), clk, nil)
	return e
}

func pxReq(session, subject, ip string) PxRequest {
	return PxRequest{SessionID: session, Subject: subject, TenantID: "tara-studio", ClientIP: netip.MustParseAddr(ip)}
}

func TestPxAdmission(t *testing.T) {
	ctx := context.Background()
	type step struct {
		req    PxRequest
		action PxAction
		status int
	}
	grant := func(r PxRequest, n int) PxRequest {
		r.Grant = &UserGrant{MaxSessions: n, Reason: "instructor"}
		return r
	}
	inst := func(r PxRequest) PxRequest { r.InstitutionApproved = true; return r }
	paid := func(r PxRequest) PxRequest { r.Paid = true; return r }
	walk := func(r PxRequest, slots int) PxRequest { r.WalkUp = &WalkUp{Event: "gala", Slots: slots}; return r }
	util := func(r PxRequest, u ...int) PxRequest { r.EligiblePopUtilBP = u; return r }
	cases := []struct {
		name  string
		steps []step
	}{
		{"user cap 2", []step{
			{pxReq("s1", "u", "10.0.0.1"), PxAdmit, 200},
			{pxReq("s2", "u", "10.0.1.1"), PxAdmit, 200},
			{pxReq("s3", "u", "10.0.2.1"), PxRejectUserCap, 409},
		}},
		{"grant lifts user cap", []step{
			{grant(pxReq("s1", "u", "10.0.0.1"), 3), PxAdmit, 200},
			{grant(pxReq("s2", "u", "10.0.1.1"), 3), PxAdmit, 200},
			{grant(pxReq("s3", "u", "10.0.2.1"), 3), PxAdmit, 200},
			{grant(pxReq("s4", "u", "10.0.3.1"), 3), PxRejectUserCap, 409},
		}},
		{"same session re-admits without counting twice", []step{
			{pxReq("s1", "u", "10.0.0.1"), PxAdmit, 200},
			{pxReq("s1", "u", "10.0.0.1"), PxAdmit, 200},
			{pxReq("s2", "u", "10.0.0.1"), PxAdmit, 200},
		}},
		{"network cap 8 on the /24", func() []step {
			var s []step
			for i := range 8 {
				s = append(s, step{pxReq("s"+string(rune('a'+i)), "u"+string(rune('a'+i)), "198.51.100."+string(rune('1'+i))), PxAdmit, 200})
			}
			s = append(s, step{pxReq("s9", "u9", "198.51.100.200"), PxRejectNetworkCap, 429})
			s = append(s, step{pxReq("s10", "u10", "198.51.101.1"), PxAdmit, 200})
			return s
		}()},
		{"network cap on the /48", func() []step {
			var s []step
			for i := range 8 {
				s = append(s, step{pxReq("s"+string(rune('a'+i)), "u"+string(rune('a'+i)), "2001:db8:1:"+string(rune('1'+i))+"::1"), PxAdmit, 200})
			}
			s = append(s, step{pxReq("s9", "u9", "2001:db8:1:ffff::9"), PxRejectNetworkCap, 429})
			s = append(s, step{pxReq("s10", "u10", "2001:db8:2::1"), PxAdmit, 200})
			return s
		}()},
		{"institution cap 64", func() []step {
			var s []step
			for i := range 64 {
				id := string(rune('A'+i/26)) + string(rune('a'+i%26))
				s = append(s, step{inst(pxReq("s"+id, "u"+id, "192.0.2.10")), PxAdmit, 200})
			}
			s = append(s, step{inst(pxReq("sx", "ux", "192.0.2.11")), PxRejectNetworkCap, 429})
			return s
		}()},
		{"walk-up pool full: free falls back, paid passes", []step{
			{walk(pxReq("s1", "u", "10.0.0.1"), 2), PxAdmit, 200},
			{walk(pxReq("s2", "v", "10.0.0.2"), 2), PxAdmit, 200},
			{walk(pxReq("s3", "x", "10.0.0.3"), 2), PxFallbackWalkUp, 503},
			{paid(walk(pxReq("s4", "w", "10.0.0.4"), 2)), PxAdmit, 200},
		}},
		{"backpressure: every eligible POP >= 85 %", []step{
			{util(pxReq("s1", "u", "10.0.0.1"), 8500, 9100), PxFallbackBackpressure, 503},
			{util(pxReq("s2", "v", "10.0.0.2"), 8500, 8499), PxAdmit, 200},
			{paid(util(pxReq("s3", "w", "10.0.0.3"), 9900)), PxAdmit, 200},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newPxEnv()
			for i, s := range c.steps {
				d, err := e.a.Admit(ctx, s.req)
				if err != nil || d.Action != s.action || d.HTTPStatus != s.status || (d.Lease != nil) != (s.action == PxAdmit) {
					t.Fatalf("step %d: %+v %v, want %s %d", i, d, err, s.action, s.status)
				}
			}
		})
	}
}

func TestPxBudgetAndAudit(t *testing.T) {
	ctx := context.Background()
	e := newPxEnv()
	if _, err := e.a.RecordUsage(ctx, "u", 119); err != nil {
		t.Fatal(err)
	}
	d, _ := e.a.Admit(ctx, pxReq("s1", "u", "10.0.0.1"))
	if d.Action != PxAdmit {
		t.Fatalf("119 min used: %s", d.Action)
	}
	_ = d.Lease.Release(ctx)
	e.a.RecordUsage(ctx, "u", 1)
	d, _ = e.a.Admit(ctx, pxReq("s2", "u", "10.0.0.1"))
	if d.Action != PxRejectBudget || d.HTTPStatus != 402 {
		t.Fatalf("120 min used: %+v", d)
	}
	var line map[string]any
	if err := json.Unmarshal(e.audit.Bytes(), &line); err != nil || line["action"] != "reject-free-budget" || line["network"] != "px:net:10.0.0.0/24" {
		t.Fatalf("audit %q %v", e.audit.String(), err)
	}
	// A refused budget does not hold the lease: the user cap is intact.
	r := pxReq("s3", "u", "10.0.0.1")
	r.Paid = true
	if d, _ := e.a.Admit(ctx, r); d.Action != PxAdmit {
		t.Fatalf("paid exempt: %s", d.Action)
	}
	// Next UTC day: budget resets.
	e.now = clock0.Add(24 * time.Hour)
	if d, _ := e.a.Admit(ctx, pxReq("s4", "u", "10.0.0.1")); d.Action != PxAdmit {
		t.Fatalf("next day: %s", d.Action)
	}
}

// TestPxConcertSeats: a concert match takes a seat on the SFU with the
// most free seats, after the caps and the walk-up pool (a free walk-up
// still takes its slot; a booked attendee takes none); all seats taken is
// fallback-concert-full, audited, taking nothing; backpressure does not
// apply to a seat; the lease's refresh keeps the seat and its release
// frees it.
func TestPxConcertSeats(t *testing.T) {
	ctx := context.Background()
	e := newPxEnv()
	pool := &SeatPool{Event: "gala", SFUs: []state.SeatLimit{{SFU: "SFU", Seats: 1}, {SFU: "SFU2", Seats: 1}}}
	seat := func(r PxRequest, walk bool) PxRequest {
		r.Seat = pool
		if walk {
			r.WalkUp = &WalkUp{Event: "gala", Slots: 1}
		}
		r.EligiblePopUtilBP = []int{9900} // a saturated POP: no streamer, but seats are not streamers
		return r
	}
	d, err := e.a.Admit(ctx, seat(pxReq("s1", "walker", "10.0.0.1"), true))
	if err != nil || d.Action != PxAdmit || d.Lease.Seat() != (Seat{Event: "gala", SFU: "SFU"}) {
		t.Fatalf("first walk-up: %+v %v", d, err)
	}
	first := d.Lease
	// The walk-up pool (1 slot) is charged: the next walk-up falls back
	// before it reaches a seat.
	if d, _ := e.a.Admit(ctx, seat(pxReq("s2", "walker-2", "10.0.0.2"), true)); d.Action != PxFallbackWalkUp {
		t.Fatalf("second walk-up: %+v", d)
	}
	booked := func(s, sub string) PxRequest { r := seat(pxReq(s, sub, "10.0.0.3"), false); r.Paid = true; return r }
	d, _ = e.a.Admit(ctx, booked("s3", "vip"))
	if d.Action != PxAdmit || d.Lease.Seat().SFU != "SFU2" {
		t.Fatalf("booked attendee: %+v", d)
	}
	e.audit.Reset()
	d, _ = e.a.Admit(ctx, booked("s4", "vip-2"))
	if d.Action != PxFallbackSeats || d.HTTPStatus != 503 || d.Lease != nil {
		t.Fatalf("full concert: %+v", d)
	}
	var line map[string]any
	if err := json.Unmarshal(e.audit.Bytes(), &line); err != nil || line["action"] != "fallback-concert-full" || line["event"] != "gala" {
		t.Fatalf("audit %q %v", e.audit.String(), err)
	}
	// The refusal took nothing: vip-2's user cap is whole.
	for _, s := range []string{"s5", "s6"} {
		if d, _ := e.a.Admit(ctx, pxReq(s, "vip-2", "10.0.0.4")); d.Action != PxAdmit {
			t.Fatalf("vip-2 after the refusal: %+v", d)
		}
	}
	// The first seat outlives its TTL while refreshed, and is freed by
	// the release.
	e.now = clock0.Add(ms(DefaultPolicy().Pxstream.LeaseTTLMs) / 2)
	if err := first.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	e.now = clock0.Add(ms(DefaultPolicy().Pxstream.LeaseTTLMs) + time.Second)
	if u, _ := e.seats.Used(ctx, "gala", []string{"SFU", "SFU2"}, e.now); u["SFU"] != 1 || u["SFU2"] != 0 {
		t.Fatalf("after one TTL: %v, want the refreshed seat only", u)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if u, _ := e.seats.Used(ctx, "gala", []string{"SFU"}, e.now); u["SFU"] != 0 {
		t.Fatalf("released seat still used: %v", u)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestPxAuditFailureKeepsDenial(t *testing.T) {
	clk := func() time.Time { return clock0 }
	a := NewAdmitter(DefaultPolicy(), state.NewMemoryLeases(), state.NewMemoryBudgets(), nil, nil, NewAuditor(failWriter{}, clk), clk, nil)
	r := pxReq("s", "u", "10.0.0.1")
	r.EligiblePopUtilBP = []int{9000}
	d, err := a.Admit(context.Background(), r)
	if !errors.Is(err, ErrAudit) || d.Action != PxFallbackBackpressure {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestPxLeaseLapses(t *testing.T) {
	ctx := context.Background()
	e := newPxEnv()
	for _, s := range []string{"s1", "s2"} {
		if d, _ := e.a.Admit(ctx, pxReq(s, "u", "10.0.0.1")); d.Action != PxAdmit {
			t.Fatal(d.Action)
		}
	}
	e.now = clock0.Add(61 * time.Second) // holders died without releasing
	if d, _ := e.a.Admit(ctx, pxReq("s3", "u", "10.0.0.1")); d.Action != PxAdmit {
		t.Fatalf("dead holders' leases did not lapse: %s", d.Action)
	}
}

func TestAbuseClassifier(t *testing.T) {
	p := &DefaultPolicy().Abuse
	cases := []struct {
		name    string
		s       AbuseSignals
		bp      int
		verdict AbuseVerdict
	}{
		{"clean", AbuseSignals{MouseEvents: 500, KeyboardEvents: 100, AvatarMotionSamples: 100, InputEventsPerSecond: 8, InputIntervalJitterMs: 30}, 0, VerdictAllow},
		{"mouse only", AbuseSignals{MouseEvents: 200}, 2500, VerdictAllow},
		{"mouse only below sample floor", AbuseSignals{MouseEvents: 199}, 0, VerdictAllow},
		{"zero inertia", AbuseSignals{MouseEvents: 10, KeyboardEvents: 1, AvatarMotionSamples: 100, ZeroInertiaSamples: 95}, 3000, VerdictAllow},
		{"zero inertia below ratio", AbuseSignals{KeyboardEvents: 1, AvatarMotionSamples: 100, ZeroInertiaSamples: 94}, 0, VerdictAllow},
		{"reconnect loop", AbuseSignals{KeyboardEvents: 1, ReconnectsPerMinute: 6, ReconnectIntervalJitterMs: 250}, 3000, VerdictAllow},
		{"reconnects with human jitter", AbuseSignals{KeyboardEvents: 1, ReconnectsPerMinute: 9, ReconnectIntervalJitterMs: 251}, 0, VerdictAllow},
		{"cadence too fast", AbuseSignals{KeyboardEvents: 1, InputEventsPerSecond: 41, InputIntervalJitterMs: 50}, 4000, VerdictAllow},
		{"cadence too regular", AbuseSignals{KeyboardEvents: 1, InputEventsPerSecond: 5, InputIntervalJitterMs: 1.9}, 4000, VerdictAllow},
		{"review at 7000", AbuseSignals{KeyboardEvents: 1, ReconnectsPerMinute: 10, InputEventsPerSecond: 50}, 7000, VerdictReview},
		{"review below ban", AbuseSignals{MouseEvents: 300, AvatarMotionSamples: 100, ZeroInertiaSamples: 100, ReconnectsPerMinute: 10}, 8500, VerdictReview},
		{"ban at 9000", AbuseSignals{KeyboardEvents: 1, AvatarMotionSamples: 100, ZeroInertiaSamples: 100, ReconnectsPerMinute: 10, InputEventsPerSecond: 50}, 10000, VerdictBan},
		{"capped at 10000", AbuseSignals{MouseEvents: 300, AvatarMotionSamples: 100, ZeroInertiaSamples: 100, ReconnectsPerMinute: 10, InputEventsPerSecond: 50}, 10000, VerdictBan},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := p.ClassifyAbuse(c.s)
			if got.BasisPoints != c.bp || got.Verdict != c.verdict {
				t.Fatalf("%+v, want %d %s", got, c.bp, c.verdict)
			}
		})
	}
}

// TestAbusePrecisionGate fails below the policy's 90 % precision on the
// labelled sample set.
func TestAbusePrecisionGate(t *testing.T) {
	samples, err := AbuseSamples()
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) < 40 {
		t.Fatalf("only %d samples", len(samples))
	}
	p := &DefaultPolicy().Abuse
	prec, recall := p.AbusePrecision(samples)
	t.Logf("precision %d bp, recall %d bp over %d samples", prec, recall, len(samples))
	if prec < p.MinPrecisionBP {
		t.Fatalf("precision %d bp below the %d bp gate", prec, p.MinPrecisionBP)
	}
}

func TestIdleTracker(t *testing.T) {
	p := DefaultPolicy().Idle
	at := func(s int) time.Time { return clock0.Add(time.Duration(s) * time.Second) }
	type ev struct {
		sec   int
		input bool
		want  IdleAction
	}
	cases := []struct {
		name string
		evs  []ev
	}{
		{"prompt at 90, disconnect at 150", []ev{{89, false, IdleNone}, {90, false, IdlePrompt}, {120, false, IdleNone}, {149, false, IdleNone}, {150, false, IdleDisconnect}, {200, false, IdleNone}}},
		{"input answers the prompt", []ev{{90, false, IdlePrompt}, {100, true, IdleNone}, {189, false, IdleNone}, {190, false, IdlePrompt}, {250, false, IdleDisconnect}}},
		{"late prompt: 150 s still wins", []ev{{120, false, IdlePrompt}, {149, false, IdleNone}, {150, false, IdleDisconnect}}},
		{"prompt grace: 60 s after the prompt", []ev{{30, true, IdleNone}, {120, false, IdlePrompt}, {179, false, IdleNone}, {180, false, IdleDisconnect}}},
		{"input after disconnect does not revive", []ev{{150, false, IdleDisconnect}, {151, true, IdleNone}, {400, false, IdleNone}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := NewIdleTracker(p, clock0)
			for _, e := range c.evs {
				var got IdleAction
				if e.input {
					tr.Input(at(e.sec))
				} else {
					got = tr.Tick(at(e.sec))
				}
				if got != e.want {
					t.Fatalf("at %ds: action %d, want %d", e.sec, got, e.want)
				}
			}
			if !tr.Next().IsZero() {
				t.Fatal("never disconnected: a next action is still due")
			}
		})
	}
	tr := NewIdleTracker(p, clock0)
	if tr.Next() != at(90) {
		t.Fatal(tr.Next())
	}
	tr.Tick(at(100))
	if tr.Next() != at(150) {
		t.Fatal(tr.Next())
	}
}

// TestConcertEvents: a concert's codec is normalised (default H264) and
// its SFUs validated; every bad one is a typed ErrEvents naming it.
func TestConcertEvents(t *testing.T) {
	ev := func(concert string) string {
		return `{"version":1,"events":[{"id":"gala","pop":"us-east-1","start":"2026-06-01T19:00:00Z","end":"2026-06-01T21:00:00Z","concert":` + concert + `}]}`
	}
	got, err := ParseEvents([]byte(ev(`{"codec":"vp8","sfus":[{"id":"SFU","seats":2},{"id":"SFU2","seats":3}]}`)))
	if err != nil || got.Events[0].Concert.Codec != "VP8" ||
		!slices.Equal(got.Events[0].Concert.SeatLimits(), []state.SeatLimit{{SFU: "SFU", Seats: 2}, {SFU: "SFU2", Seats: 3}}) {
		t.Fatalf("concert: %+v %v", got, err)
	}
	if got, err := ParseEvents([]byte(ev(`{"sfus":[{"id":"SFU","seats":1}]}`))); err != nil || got.Events[0].Concert.Codec != "H264" {
		t.Fatalf("default codec: %v", err)
	}
	for _, bad := range []string{
		`{"codec":"MJPEG","sfus":[{"id":"SFU","seats":1}]}`,
		`{"sfus":[]}`,
		`{"sfus":[{"id":"","seats":1}]}`,
		`{"sfus":[{"id":"SFU","seats":0}]}`,
		`{"sfus":[{"id":"SFU","seats":1},{"id":"SFU","seats":1}]}`,
		`{"sfus":[{"id":"SFU","seats":1}],"surprise":1}`,
	} {
		if _, err := ParseEvents([]byte(ev(bad))); !errors.Is(err, ErrEvents) {
			t.Errorf("%s: %v, want ErrEvents", bad, err)
		}
	}
}
