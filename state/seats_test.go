package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestSeatsContract(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { seatsContract(t, b) })
	}
}

// seatsContract is the Seats contract on one backend.
func seatsContract(t *testing.T, b backend) {
	ctx := context.Background()
	sfus := []SeatLimit{{"SFU", 2}, {"SFU2", 3}}
	used := func(t *testing.T, s Seats, pool string, now time.Time) map[string]int {
		t.Helper()
		u, err := s.Used(ctx, pool, []string{"SFU", "SFU2"}, now)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	t.Run("FillsMostFreeFirstNeverOver", func(t *testing.T) {
		s := b.seats(t)
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
		s := b.seats(t)
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
		s := b.seats(t)
		one := []SeatLimit{{"SFU", 2}}
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
		s := b.seats(t)
		for _, c := range []struct {
			pool, holder string
			sfus         []SeatLimit
		}{{"", "h", sfus}, {"gala", "", sfus}, {"ga{la}", "h", sfus}, {"gala", "h", []SeatLimit{{"", 1}}}, {"gala", "h", []SeatLimit{{"SFU", -1}}}} {
			if _, err := s.Take(ctx, c.pool, c.holder, c.sfus, time.Minute, t0); !errors.Is(err, ErrBadArgument) {
				t.Errorf("take %+v: %v, want ErrBadArgument", c, err)
			}
		}
	})
	t.Run("ConcurrentTakersNeverOversell", func(t *testing.T) {
		// Two clients (two edges; memory: one node) race 40 takers for 5
		// seats.
		a := b.seats(t)
		z := a
		if b.name != "memory" {
			z = b.seats(t)
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
