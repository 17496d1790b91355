package admission

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/state"
)

// TestLeaseKeeper: one keeper goroutine keeps every live session's leases
// past their TTL (a lease not kept lapses: the cap frees itself), a
// released session's leases go at once, and admitting sessions starts no
// goroutine per session.
func TestLeaseKeeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := DefaultPolicy()
		p.Realtime.UserSessionCap = 1
		p.Realtime.LeaseTTLMs = 3000
		leases := state.NewMemoryLeases()
		h := NewHandshakeAdmitter(p, leases, nil, time.Now, nil)
		k := NewLeaseKeeper(h)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = k.Run(ctx) }()
		synctest.Wait()

		ip := netip.MustParseAddr("192.0.2.7")
		req := func(sess, user string) HandshakeRequest {
			return HandshakeRequest{SessionID: sess, Access: auth.Access{Subject: user}, ClientIP: ip}
		}
		g0 := runtime.NumGoroutine()
		var releases []func()
		for i := range 50 {
			rel, err := k.Admit(ctx, req(fmt.Sprintf("s%d", i), fmt.Sprintf("u%d", i)))
			if err != nil {
				t.Fatal(err)
			}
			releases = append(releases, rel)
		}
		// NumGoroutine counts the whole process: a goroutine of an earlier
		// test may end meanwhile, so only growth is the keeper's (50
		// sessions with a goroutine each would add 50).
		if g := runtime.NumGoroutine(); g > g0 {
			t.Fatalf("admitting 50 sessions grew the goroutines from %d to %d", g0, g)
		}
		// A session admitted without the keeper: its lease lapses after the TTL.
		if _, err := h.Admit(ctx, req("bare", "lapsing")); err != nil {
			t.Fatal(err)
		}

		time.Sleep(10 * time.Second) // three TTLs
		synctest.Wait()
		// The kept lease holds the user's one slot; the bare one lapsed.
		if _, err := h.Admit(ctx, req("other", "u0")); codec.CodeOf(err) != codec.CodeUserCap {
			t.Fatalf("a second session for a kept user: %v, want user_session_cap", err)
		}
		if _, err := h.Admit(ctx, req("again", "lapsing")); err != nil {
			t.Fatalf("the unkept lease did not lapse: %v", err)
		}
		// Released: gone at once, and no longer refreshed.
		releases[0]()
		releases[0]() // idempotent
		if k.Held() != 49 {
			t.Fatalf("held %d, want 49", k.Held())
		}
		if _, err := h.Admit(ctx, req("other", "u0")); err != nil {
			t.Fatalf("after release: %v", err)
		}
		for _, rel := range releases[1:] {
			rel()
		}
		cancel()
		wg.Wait()
	})
}
