package shard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/state"
)

// The gateway's time comes from Deps.Now (readings) and the time package's
// timers; these tests run in synctest bubbles, where both are the bubble's
// fake clock, or skew the injected clock away from the wall clock to show
// that a behaviour follows the injected one.

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// bubbleGateway is a gateway built inside a synctest bubble (no links run).
func bubbleGateway(t *testing.T, cfg Config, d Deps) *Gateway {
	t.Helper()
	signer, err := auth.New(testSecret, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	d.Signer = signer
	g, err := NewGateway(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestMemoryPinsSweepFollowsInjectedClock: the memory store's sweep drops
// pins expired on the clock it was given (the gateway's), not the wall
// clock's.
func TestMemoryPinsSweepFollowsInjectedClock(t *testing.T) {
	clock := &fakeClock{}
	m := NewMemoryPins(clock.Now)
	ctx := context.Background()
	for i := range 1023 {
		if err := m.Put(ctx, Pin{SessionID: fmt.Sprintf("s%d", i), ShardID: "a", ExpiresAt: clock.Now().Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Add(2 * time.Minute)
	if err := m.Put(ctx, Pin{SessionID: "live", ShardID: "a"}); err != nil { // the 1024th put sweeps
		t.Fatal(err)
	}
	if n := m.Len(); n != 1 {
		t.Fatalf("after the sweep %d pins are held, want 1 (the connected one)", n)
	}
}

// TestStatePinsTTLFollowsInjectedClock: a disconnected pin's key lives until
// its ExpiresAt on the injected clock, however far that clock is from the
// wall clock.
func TestStatePinsTTLFollowsInjectedClock(t *testing.T) {
	clock := &fakeClock{}
	clock.Add(time.Hour) // the injected clock runs an hour ahead of the wall clock
	kv := state.NewMemoryKV(clock.Now)
	pins := NewStatePins(kv, time.Minute, clock.Now)
	ctx := context.Background()
	if err := pins.Put(ctx, Pin{SessionID: "s", ShardID: "a", ExpiresAt: clock.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "s"); err != nil {
		t.Fatalf("the pin's key is missing before its expiry: %v", err)
	}
	clock.Add(2 * time.Minute)
	if _, err := kv.Get(ctx, "s"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("the pin's key outlived its expiry on the injected clock: %v", err)
	}
}

// TestResumeWindow: a disconnected session's pin (its final put) allows a
// resume until min(PinTTL, ResumeTTL) has passed, and not a moment after.
func TestResumeWindow(t *testing.T) {
	for _, pins := range []struct {
		name string
		new  func() PinStore
	}{
		{"memory", func() PinStore { return NewMemoryPins(nil) }},
		{"state", func() PinStore { return NewStatePins(state.NewMemoryKV(nil), time.Minute, nil) }},
	} {
		t.Run(pins.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.PinTTL, cfg.ResumeTTL = 40*time.Second, 15*time.Second
				g := bubbleGateway(t, cfg, Deps{Pins: pins.new()})
				s := &session{g: g, id: "sess-1", subject: "user-1", instance: "inst-1", shardID: "a", entity: 7}
				ctx := context.Background()
				// The token outlives the pin, so only the pin's window decides.
				h := &codec.ClientHello{ResumeToken: g.resumeToken(s, time.Hour), InstanceId: "inst-1"}
				acc := auth.Access{Subject: "user-1"}
				if err := s.putPin(ctx, true); err != nil {
					t.Fatal(err)
				}
				time.Sleep(cfg.ResumeTTL - time.Millisecond)
				if p, err := g.checkResume(ctx, h, acc); err != nil || p.EntityID != 7 {
					t.Fatalf("resume inside the window: pin %+v, err %v", p, err)
				}
				time.Sleep(time.Millisecond)
				_, err := g.checkResume(ctx, h, acc)
				if codec.CodeOf(err) != codec.CodeResumeExpired || !errors.Is(err, ErrPinNotFound) {
					t.Fatalf("resume at the end of the window: %v, want resume_expired (pin not found)", err)
				}
			})
		})
	}
}

// TestPinRefresh: the gateway re-puts a connected session's pin every third
// of PinTTL, so a store that expires keys by itself keeps it while the
// session lives; a pin nobody refreshes lapses after PinTTL.
func TestPinRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.PinTTL = 30 * time.Second
		kv := state.NewMemoryKV(nil)
		pins := NewStatePins(kv, cfg.PinTTL, nil)
		g := bubbleGateway(t, cfg, Deps{Pins: pins})
		ctx, cancel := context.WithCancel(context.Background())
		live := &session{g: g, id: "live", subject: "u", instance: "i", shardID: "a"}
		gone := &session{g: g, id: "gone", subject: "u", instance: "i", shardID: "a"}
		for _, s := range []*session{live, gone} {
			if err := s.putPin(ctx, false); err != nil {
				t.Fatal(err)
			}
		}
		g.register(live)
		var wg sync.WaitGroup
		wg.Go(func() { g.refreshPins(ctx) })

		time.Sleep(5 * cfg.PinTTL)
		synctest.Wait()
		if _, err := pins.Get(ctx, "live", time.Now()); err != nil {
			t.Fatalf("a connected session's pin lapsed: %v", err)
		}
		if _, err := pins.Get(ctx, "gone", time.Now()); !errors.Is(err, ErrPinNotFound) {
			t.Fatalf("an unrefreshed pin outlived PinTTL: %v", err)
		}
		cancel()
		wg.Wait()
	})
}

// TestLinkReconnectBackoff: a link that cannot connect redials after a
// jittered delay in [b/2, b], b doubling from ReconnectMin to ReconnectMax;
// a new address is dialled at once. The address has no port, so each
// dial fails at once, before any lookup or packet (a bubble cannot wait
// on the network).
func TestLinkReconnectBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.ReconnectMin, cfg.ReconnectMax = 100*time.Millisecond, 800*time.Millisecond
		cfg.Shards = map[string]string{"a": "127.0.0.1"}
		reg := prometheus.NewRegistry()
		g := bubbleGateway(t, cfg, Deps{Registerer: reg})
		l := g.links["a"]
		dials := func() int { return int(testutil.ToFloat64(g.m.linkConnects.WithLabelValues("a", "error"))) }
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Go(func() { l.run(ctx) })

		// waitDial advances the bubble's clock 1 ms at a time until the
		// next dial, and returns how long that took.
		waitDial := func(limit time.Duration) time.Duration {
			t.Helper()
			n, start := dials(), time.Now()
			for dials() == n {
				if time.Since(start) > limit {
					t.Fatalf("no redial within %v", limit)
				}
				time.Sleep(time.Millisecond)
				synctest.Wait()
			}
			return time.Since(start)
		}
		synctest.Wait()
		if n := dials(); n != 1 {
			t.Fatalf("%d dials at start, want 1", n)
		}
		b := cfg.ReconnectMin
		for range 6 {
			d := waitDial(2 * cfg.ReconnectMax)
			if d < b/2 || d > b {
				t.Fatalf("redial after %v, want within [%v, %v]", d, b/2, b)
			}
			b = min(2*b, cfg.ReconnectMax)
		}
		// A new address: dialled without waiting out the backoff.
		n := dials()
		if !l.moveTo("127.0.0.2") {
			t.Fatal("a down link refused a new address")
		}
		synctest.Wait()
		if dials() != n+1 {
			t.Fatalf("a moved link did not redial at once (%d dials, want %d)", dials(), n+1)
		}
		if d := waitDial(2 * cfg.ReconnectMax); d < cfg.ReconnectMin/2 || d > cfg.ReconnectMin {
			t.Fatalf("after a move the backoff restarts: redial after %v, want within [%v, %v]", d, cfg.ReconnectMin/2, cfg.ReconnectMin)
		}
	})
}
