package signalling

import (
	"errors"
	"log/slog"
	"testing"
	"time"
)

func regWith(t *testing.T, clk *fakeClock, streamers ...StreamerInfo) *Registry {
	t.Helper()
	r := newRegistry(clk.Now, 10*time.Second, slog.New(slog.DiscardHandler))
	for _, s := range streamers {
		s.ConnectedAt = clk.Now()
		if err := r.add(s); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Second)
	}
	return r
}

func TestRegistryLeaseIdle(t *testing.T) {
	clk := newFakeClock()
	r := regWith(t, clk,
		StreamerInfo{ID: "a", POP: "eu-west-1", Codecs: []string{"H264"}},
		StreamerInfo{ID: "b", POP: "eu-west-1", Codecs: []string{"H264", "AV1"}},
		StreamerInfo{ID: "c", POP: "us-east-1", Codecs: []string{"H264"}},
	)
	until := clk.Now().Add(30 * time.Second)
	tests := []struct {
		name, pop, codec, session string
		wantID                    string
		wantErr                   error
	}{
		{"longest idle first", "eu-west-1", "h264", "s1", "a", nil},
		{"idempotent retry", "eu-west-1", "H264", "s1", "a", nil},
		{"codec filter", "eu-west-1", "AV1", "s2", "b", nil},
		{"pop exhausted", "eu-west-1", "H264", "s3", "", ErrNoIdleStreamer},
		{"no such codec", "us-east-1", "VP9", "s4", "", ErrNoIdleStreamer},
		{"session holds another", "us-east-1", "H264", "s1", "", ErrSessionLeased},
		{"any codec", "us-east-1", "", "s5", "c", nil},
		{"empty session", "us-east-1", "", "", "", ErrBadLease},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.LeaseIdle(tc.pop, tc.codec, tc.session, until)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err == nil && (got.ID != tc.wantID || got.State != StateLeased || got.SessionID != tc.session) {
				t.Fatalf("got %+v, want %s leased to %s", got, tc.wantID, tc.session)
			}
		})
	}
	if c := r.Counts(); c["eu-west-1"] != (POPCounts{Leased: 2}) || c["us-east-1"] != (POPCounts{Leased: 1}) {
		t.Fatalf("counts %+v", c)
	}
}

func TestRegistryLifecycle(t *testing.T) {
	clk := newFakeClock()
	r := regWith(t, clk, StreamerInfo{ID: "a", POP: "p", Codecs: []string{"H264"}})
	state := func() StreamerState { i, _ := r.Get("a"); return i.State }

	// Lease, unused until expiry: back to idle by itself.
	if err := r.Lease("a", "s1", clk.Now().Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := r.Lease("a", "s2", clk.Now().Add(30*time.Second)); !errors.Is(err, ErrNotIdle) {
		t.Fatalf("second lease: %v", err)
	}
	if err := r.Lease("zz", "s2", clk.Now().Add(time.Minute)); !errors.Is(err, ErrUnknownStreamer) {
		t.Fatalf("unknown: %v", err)
	}
	clk.Add(29 * time.Second)
	if state() != StateLeased {
		t.Fatal("lease lapsed early")
	}
	clk.Add(time.Second)
	if state() != StateIdle {
		t.Fatal("lease did not lapse")
	}
	if err := r.Release("s1"); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("release of a lapsed lease: %v", err)
	}

	// Lease used: streaming while a player is on it, whatever the until.
	if _, err := r.LeaseIdle("p", "H264", "s3", clk.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := r.claim("a", "s3", clk.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := r.claim("a", "s4", clk.Now().Add(time.Minute)); !errors.Is(err, ErrNotIdle) {
		t.Fatalf("claim by another session: %v", err)
	}
	_ = r.joined("a")
	clk.Add(time.Hour)
	if state() != StateStreaming {
		t.Fatalf("state %s, want streaming", state())
	}
	// Rename keeps the lease.
	if err := r.rename("a", "a1"); err != nil {
		t.Fatal(err)
	}
	if i, ok := r.Get("a1"); !ok || i.SessionID != "s3" {
		t.Fatalf("after rename %+v", i)
	}
	// Last player leaves: leased for the grace, then idle.
	r.left("a1")
	if i, _ := r.Get("a1"); i.State != StateLeased {
		t.Fatalf("after leave %+v", i)
	}
	if err := r.Release("s3"); err != nil {
		t.Fatal(err)
	}
	if i, _ := r.Get("a1"); i.State != StateIdle || i.SessionID != "" {
		t.Fatalf("after release %+v", i)
	}
	r.remove("a1")
	if len(r.Snapshot()) != 0 {
		t.Fatal("not removed")
	}
}
