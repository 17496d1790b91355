package signalling

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/state/redisstate"
)

// The registry contract, run on the memory store and on the Redis one
// (state/redisstate): the same calls give the same answers (DESIGN.md
// section 8). The store contract itself is state/statetest's; this is the
// Registry's own layer over it (this edge's view, synced to the store).

// contractRegistries returns a fresh registry per store kind. The Redis
// one syncs its fleet side at once (kick nil), as a single edge does, so a
// table can follow each step.
func contractRegistries(t *testing.T) map[string]func(clk *fakeClock) *Registry {
	addr, _ := redistest.Start(t)
	conn, _ := redisConn(t, addr)
	return map[string]func(*fakeClock) *Registry{
		"memory": func(clk *fakeClock) *Registry {
			return newRegistry(clk.Now, 10*time.Second, slog.New(slog.DiscardHandler))
		},
		"redis": func(clk *fakeClock) *Registry {
			if err := conn.Client().FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			r := newRegistry(clk.Now, 10*time.Second, slog.New(slog.DiscardHandler))
			r.st, r.edge, r.ttl = redisstate.NewStreamers(conn), "edge-contract", time.Hour
			return r
		},
	}
}

func TestRegistryContract(t *testing.T) {
	for kind, mk := range contractRegistries(t) {
		t.Run(kind, func(t *testing.T) {
			clk := newFakeClock()
			r := mk(clk)
			for _, s := range []StreamerInfo{
				{ID: "a", POP: "eu-west-1", Codecs: []string{"H264"}},
				{ID: "b", POP: "eu-west-1", Codecs: []string{"H264", "AV1"}},
				{ID: "c", POP: "us-east-1", Codecs: []string{"H264"}},
			} {
				s.ConnectedAt = clk.Now()
				if err := r.add(s); err != nil {
					t.Fatal(err)
				}
				clk.Add(time.Second)
			}
			if err := r.add(StreamerInfo{ID: "a", POP: "x", ConnectedAt: clk.Now()}); !errors.Is(err, ErrStreamerExists) {
				t.Fatalf("duplicate add: %v", err)
			}
			until := clk.Now().Add(30 * time.Second)
			for _, tc := range []struct {
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
			} {
				got, err := r.LeaseIdle(tc.pop, tc.codec, tc.session, until)
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("%s: err %v, want %v", tc.name, err, tc.wantErr)
				}
				if err == nil && (got.ID != tc.wantID || got.State != StateLeased || got.SessionID != tc.session ||
					!got.LeaseUntil.Equal(until)) {
					t.Fatalf("%s: got %+v, want %s leased to %s", tc.name, got, tc.wantID, tc.session)
				}
			}
			if c := r.Counts(); c["eu-west-1"] != (POPCounts{Leased: 2}) || c["us-east-1"] != (POPCounts{Leased: 1}) {
				t.Fatalf("counts %+v", c)
			}
			for _, s := range []string{"s1", "s2", "s5"} {
				if err := r.Release(s); err != nil {
					t.Fatal(err)
				}
			}
			state := func() StreamerState { i, _ := r.Get("a"); return i.State }
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
			// a's lapsed lease makes it idle since its until: b (idle since
			// its release) goes first, then a.
			if got, err := r.LeaseIdle("eu-west-1", "", "s9", clk.Now().Add(10*time.Second)); err != nil || got.ID != "b" {
				t.Fatalf("after lapse: %+v %v", got, err)
			}
			if err := r.Release("s9"); err != nil {
				t.Fatal(err)
			}
			if got, err := r.LeaseIdle("eu-west-1", "", "s3", clk.Now().Add(10*time.Second)); err != nil || got.ID != "a" {
				t.Fatalf("after lapse: %+v %v", got, err)
			}
			if err := r.claim("a", "s3", clk.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			if err := r.claim("a", "s4", clk.Now().Add(time.Minute)); !errors.Is(err, ErrNotIdle) {
				t.Fatalf("claim by another session: %v", err)
			}
			if err := r.joined("a"); err != nil {
				t.Fatal(err)
			}
			clk.Add(time.Hour)
			if state() != StateStreaming {
				t.Fatalf("state %s, want streaming", state())
			}
			if err := r.rename("a", "a1"); err != nil {
				t.Fatal(err)
			}
			if i, ok := r.Get("a1"); !ok || i.SessionID != "s3" || i.Players != 1 {
				t.Fatalf("after rename %+v", i)
			}
			if _, ok := r.Get("a"); ok {
				t.Fatal("old id still registered")
			}
			r.left("a1")
			if i, _ := r.Get("a1"); i.State != StateLeased || !i.LeaseUntil.Equal(clk.Now().Add(10*time.Second)) {
				t.Fatalf("after leave %+v", i)
			}
			if err := r.Release("s3"); err != nil {
				t.Fatal(err)
			}
			if i, _ := r.Get("a1"); i.State != StateIdle || i.SessionID != "" {
				t.Fatalf("after release %+v", i)
			}
			if snap := r.Snapshot(); len(snap) != 3 || snap[0].ID != "a1" || snap[1].ID != "b" || snap[2].ID != "c" {
				t.Fatalf("snapshot order %+v", snap)
			}
			r.remove("a1")
			r.remove("b")
			if snap := r.Snapshot(); len(snap) != 1 || snap[0].ID != "c" {
				t.Fatalf("after remove %+v", snap)
			}
		})
	}
}
