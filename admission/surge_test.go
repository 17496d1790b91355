package admission

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/state"
)

type surgeEnv struct {
	*roomEnv
	s     *Surge
	meter *Meter
	clamp *HealthClamp
}

func newSurgeEnv(t *testing.T) *surgeEnv {
	e := newRoomEnv(t, queueBackend{"memory", func(*testing.T) (state.Queue, func()) { q := state.NewMemoryQueue(); return q, q.Wipe }})
	meter, err := NewMeter(state.NewMemoryTallies(), e.clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	clamp := &HealthClamp{}
	e.room.d.Health = clamp
	s, err := NewSurge(e.pol, SurgeDeps{Room: e.room, Meter: meter, Clamp: clamp, KV: state.NewMemoryKV(e.clock),
		Leases: state.NewMemoryLeases(), Holder: "edge-a", Audit: e.room.d.Audit, Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	return &surgeEnv{roomEnv: e, s: s, meter: meter, clamp: clamp}
}

// run steps the controller every 15 s for d, feeding each step.
func (e *surgeEnv) run(d time.Duration, feed func()) {
	e.t.Helper()
	for end := e.clock().Add(d); e.clock().Before(end); {
		if feed != nil {
			feed()
		}
		if err := e.s.Step(context.Background()); err != nil {
			e.t.Fatalf("step: %v", err)
		}
		e.advance(15 * time.Second)
	}
}

func (e *surgeEnv) meta() state.Meta {
	m, err := e.room.d.Queue.Meta(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// TestSurgeLadder: session-start success below 98 % sustained 15 minutes
// halves the bucket, then 5xx above 2 % sustained 15 minutes freezes;
// each is audited as operator.launch.surge_abort.executed; once green for
// 30 minutes they unwind one step at a time, freeze first.
func TestSurgeLadder(t *testing.T) {
	e := newSurgeEnv(t)
	bad := func() { // 1 start in 10 fails; 1 answer in 10 is a 5xx
		for i := range 10 {
			e.meter.Start("us-east-1", i != 0)
			status := 200
			if i == 0 {
				status = 503
			}
			e.meter.HTTP("match", status, time.Millisecond)
		}
	}
	good := func() {
		for range 10 {
			e.meter.Start("us-east-1", true)
			e.meter.HTTP("match", 200, time.Millisecond)
		}
	}
	e.run(14*time.Minute, bad)
	if m := e.meta(); m.Halved || m.Frozen {
		t.Fatalf("acted before 15 minutes: %+v", m)
	}
	e.run(2*time.Minute, bad)
	if m := e.meta(); !m.Halved || !m.Frozen {
		t.Fatalf("after 16 minutes: %+v, want halved and frozen", m)
	}
	if n := strings.Count(e.audit.String(), `"event":"operator.launch.surge_abort.executed"`); n != 2 {
		t.Fatalf("%d abort audits:\n%s", n, e.audit)
	}
	// The entry criteria armed the room on the way (success < 99.5 %).
	if m := e.meta(); !m.ArmedGlobal {
		t.Fatalf("not armed: %+v", m)
	}
	// The bad minutes stay in the trailing 5-minute window for a while:
	// 30 minutes of good samples are less than 30 minutes green.
	e.run(30*time.Minute, good)
	if m := e.meta(); !m.Halved || !m.Frozen {
		t.Fatalf("unwound before 30 minutes green: %+v", m)
	}
	for i := 0; e.meta().Frozen; i++ {
		if i > 40 {
			t.Fatal("freeze never unwound")
		}
		e.run(15*time.Second, good)
	}
	if m := e.meta(); !m.Halved {
		t.Fatalf("halve unwound with the freeze, want one step at a time: %+v", m)
	}
	e.run(15*time.Second, good)
	if m := e.meta(); m.Halved {
		t.Fatalf("halve not unwound a step after the freeze: %+v", m)
	}
	if !strings.Contains(e.audit.String(), `"greenMs":18`) {
		t.Fatalf("unwind audit lacks a 30-minute green time:\n%s", e.audit)
	}
	if n := strings.Count(e.audit.String(), `"event":"operator.launch.surge_abort.unwound"`); n != 2 {
		t.Fatalf("%d unwind audits", n)
	}
}

// TestSurgeClampAndPage: unhealthy starts (< 99.5 %) clamp the admit rate
// below the bucket; healthy ones lift the clamp; a region at the freeze
// rung pages once.
func TestSurgeClampAndPage(t *testing.T) {
	e := newSurgeEnv(t)
	e.run(time.Minute, func() {
		for i := range 100 {
			e.meter.Start("us-east-1", i != 0) // 99 %
		}
	})
	c, ok := e.clamp.AdmitCeilingPerMinute()
	if !ok || c >= e.room.p.Global.PerMinute {
		t.Fatalf("clamp %v %v", c, ok)
	}
	g, _ := e.room.Rates("us-east-1")
	if g.GlobalPerMin != c {
		t.Fatalf("room rate %v, clamp %v", g.GlobalPerMin, c)
	}
	e.advance(11 * time.Minute) // the bad minutes leave the 10-minute window
	e.run(5*time.Minute, func() {
		for range 100 {
			e.meter.Start("us-east-1", true)
		}
	})
	if _, ok := e.clamp.AdmitCeilingPerMinute(); ok {
		t.Fatal("clamp not lifted after healthy minutes")
	}
	e.util.set("eu-west-1", 9200)
	e.run(time.Minute, nil)
	if n := strings.Count(e.audit.String(), "operator.launch.surge_page"); n != 1 {
		t.Fatalf("%d pages:\n%s", n, e.audit)
	}
}
