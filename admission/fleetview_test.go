package admission

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// testFleet is a two-POP fleet: east is busy, west is quiet.
func testFleet() FleetSnapshot {
	return FleetSnapshot{FreeTierMaxUtilBP: 8500, POPs: []FleetPOP{
		{ID: "east", RTTMs: map[string]int{"us-east": 12, "eu-west": 80}, MaxSessions: 100, PaidHeadroomSessions: 10,
			Priority: 2, Codecs: []string{"H264"}, Sessions: 86, IdleStreamers: 5, UtilisationBP: 8600},
		{ID: "west", RTTMs: map[string]int{"us-east": 70}, MaxSessions: 100, PaidHeadroomSessions: 10,
			Codecs: []string{"H264", "AV1"}, Sessions: 10, IdleStreamers: 7, UtilisationBP: 1000},
	}}
}

// TestFleetViewCandidates: a POP is a candidate where it serves the
// client's region; its available workers are what this caller could
// lease, as the matchmaker judges.
func TestFleetViewCandidates(t *testing.T) {
	cases := []struct {
		name   string
		edit   func(*FleetSnapshot)
		region string
		paid   bool
		want   map[string]int // POP -> available workers
	}{
		{name: "paid caller leases a busy POP's idle streamers", region: "us-east", paid: true, want: map[string]int{"east": 5, "west": 7}},
		{name: "free caller not sent past the backpressure", region: "us-east", want: map[string]int{"east": 0, "west": 7}},
		{name: "free caller kept out of the paid headroom", region: "us-east",
			edit: func(s *FleetSnapshot) { s.POPs[1].Sessions, s.POPs[1].UtilisationBP = 90, 1000 }, want: map[string]int{"east": 0, "west": 0}},
		{name: "a full POP has nothing even for a paid caller", region: "us-east", paid: true,
			edit: func(s *FleetSnapshot) { s.POPs[0].Sessions = 100 }, want: map[string]int{"east": 0, "west": 7}},
		{name: "only the POPs serving the region", region: "eu-west", paid: true, want: map[string]int{"east": 5}},
		{name: "no POP serves the region", region: "ap-south", paid: true, want: map[string]int{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := testFleet()
			if c.edit != nil {
				c.edit(&snap)
			}
			f := NewFleetView(func() (FleetSnapshot, bool) { return snap, true }, nil)
			got, err := f.PopCandidates(context.Background(), c.region, c.paid)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("candidates %+v, want POPs %v", got, c.want)
			}
			for _, pc := range got {
				want, ok := c.want[pc.PopID]
				if !ok || pc.AvailableWorkers != want {
					t.Errorf("%s: %d available, want %d (listed %v)", pc.PopID, pc.AvailableWorkers, want, ok)
				}
				if pc.PopID == "east" && (pc.RTTMs != float64(snap.POPs[0].RTTMs[c.region]) || pc.ProgrammingPriority != 2 || pc.Codecs[0] != "H264") {
					t.Errorf("east's candidate %+v does not carry its topology", pc)
				}
			}
		})
	}
}

// TestFleetViewNoFleet: without a streaming fleet there are no candidates
// and no utilisation.
func TestFleetViewNoFleet(t *testing.T) {
	f := NewFleetView(func() (FleetSnapshot, bool) { return FleetSnapshot{}, false }, nil)
	if got, err := f.PopCandidates(context.Background(), "us-east", true); err != nil || got != nil {
		t.Fatalf("candidates without a fleet: %+v %v", got, err)
	}
	if bp, ok := f.RegionUtilisationBP("east"); ok || bp != 0 {
		t.Fatalf("utilisation without a fleet: %d %v", bp, ok)
	}
}

// TestFleetViewReuse: a snapshot is reused for FleetViewTTL, then read
// afresh; an unknown POP has no utilisation.
func TestFleetViewReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reads := 0
		snap := testFleet()
		f := NewFleetView(func() (FleetSnapshot, bool) { reads++; return snap, true }, nil)
		if bp, ok := f.RegionUtilisationBP("east"); !ok || bp != 8600 {
			t.Fatalf("east: %d %v, want 8600", bp, ok)
		}
		snap.POPs[0].UtilisationBP = 9900
		time.Sleep(FleetViewTTL - time.Millisecond)
		if bp, _ := f.RegionUtilisationBP("east"); bp != 8600 || reads != 1 {
			t.Fatalf("inside the TTL: %d after %d reads, want the first snapshot's 8600 after 1", bp, reads)
		}
		if _, err := f.PopCandidates(context.Background(), "us-east", true); err != nil || reads != 1 {
			t.Fatalf("candidates inside the TTL: %v after %d reads, want 1", err, reads)
		}
		time.Sleep(time.Millisecond)
		if bp, _ := f.RegionUtilisationBP("east"); bp != 9900 || reads != 2 {
			t.Fatalf("after the TTL: %d after %d reads, want 9900 after 2", bp, reads)
		}
		if _, ok := f.RegionUtilisationBP("nowhere"); ok {
			t.Fatal("an unknown POP has a utilisation")
		}
	})
}
