package admission

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// TestAbuseWatch: what the edge observes — match requests at a scripted
// 5 s cadence, a worker's reports of mouse-only input at a machine-regular
// cadence — scores as a ban before any lease; a human's does not. The ban
// is audited once, stored, and refuses the subject's next match (403)
// until it lapses; a review verdict is audited once per window.
func TestAbuseWatch(t *testing.T) {
	ctx := context.Background()
	now := clock0
	clk := func() time.Time { return now }
	audit := &bytes.Buffer{}
	p := DefaultPolicy()
	kv := state.NewMemoryKV(clk)
	w := NewAbuseWatch(p, state.NewMemoryTallies(), kv, NewAuditor(audit, clk), clk, nil)
	a := NewAdmitter(p, state.NewMemoryLeases(), state.NewMemoryBudgets(), nil, w, NewAuditor(audit, clk), clk, nil)
	bot := InputReport{Events: 100, SpanMs: 10_000, JitterMs: 0.5, Mouse: 100}
	human := InputReport{Events: 40, SpanMs: 10_000, JitterMs: 80, Mouse: 25, Keyboard: 15, Motion: 60, ZeroInertia: 3}
	for i := range 5 { // four gaps: not yet a loop
		for _, who := range []string{"bot", "human"} {
			d, err := a.Admit(ctx, pxReq("s-"+who+string(rune('a'+i)), who, "10.0.0.1"))
			if err != nil || d.Action != PxAdmit {
				t.Fatalf("%s match %d: %+v %v", who, i, d, err)
			}
			_ = d.Lease.Release(ctx)
		}
		if err := w.ObserveInput(ctx, "bot", bot); err != nil {
			t.Fatal(err)
		}
		if err := w.ObserveInput(ctx, "human", human); err != nil {
			t.Fatal(err)
		}
		now = now.Add(5 * time.Second)
	}
	// The fifth gap of exactly 5 s makes a loop (12/min, no jitter) on top
	// of 500 mouse events and no keyboard, 10 events/s 0.5 ms apart: 9500.
	d, err := a.Admit(ctx, pxReq("s-bot-last", "bot", "10.0.0.1"))
	if err != nil || d.Action != PxRejectAbuse || d.HTTPStatus != 403 {
		t.Fatalf("bot after the loop: %+v %v", d, err)
	}
	sig, err := w.Signals(ctx, "bot")
	if err != nil || sig.ReconnectsPerMinute != 12 || sig.ReconnectIntervalJitterMs != 0 || sig.MouseEvents != 500 || sig.InputEventsPerSecond != 10 {
		t.Fatalf("bot signals %+v %v", sig, err)
	}
	if !strings.Contains(audit.String(), `"event":"operator.abuse.ban"`) || !strings.Contains(audit.String(), `"action":"reject-abuse-ban"`) {
		t.Fatalf("audit %s", audit)
	}
	// Humans keep going.
	if d, err := a.Admit(ctx, pxReq("s-human-last", "human", "10.0.0.2")); err != nil || d.Action != PxAdmit {
		t.Fatalf("human: %+v %v", d, err)
	}
	// The ban outlives the observation window, not its TTL.
	now = now.Add(time.Duration(p.Abuse.ObservationWindowMs) * 3 * time.Millisecond)
	if d, _ := a.Admit(ctx, pxReq("s-bot-later", "bot", "10.0.0.1")); d.Action != PxRejectAbuse {
		t.Fatalf("bot 30 min later: %s", d.Action)
	}
	now = now.Add(time.Duration(p.Abuse.BanTTLMs) * time.Millisecond)
	if d, _ := a.Admit(ctx, pxReq("s-bot-next-day", "bot", "10.0.0.1")); d.Action != PxAdmit {
		t.Fatalf("bot after the ban: %s", d.Action)
	}
	// A review (reconnect loop + impossible cadence = 7000) is audited once.
	audit.Reset()
	for range 7 {
		if err := w.ObserveMatch(ctx, "reviewed"); err != nil {
			t.Fatal(err)
		}
		now = now.Add(5 * time.Second)
	}
	if err := w.ObserveInput(ctx, "reviewed", InputReport{Events: 500, SpanMs: 10_000, JitterMs: 20, Keyboard: 500}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if sc, err := w.Check(ctx, "reviewed", "match"); err != nil || sc.Verdict != VerdictReview {
			t.Fatalf("review: %+v %v", sc, err)
		}
	}
	if n := strings.Count(audit.String(), "operator.abuse.safety_review"); n != 1 {
		t.Fatalf("%d review audits: %s", n, audit)
	}
}
