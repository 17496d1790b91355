package sfu

import (
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/testwait"
)

// TestSlotSwitchContinuity: a listener with one slot hears A, then B (A
// muted), then A again; its one received stream keeps one SSRC, strictly
// increasing sequence numbers and timestamps that advance in whole Opus
// frames, never less than the sequence gap.
func TestSlotSwitchContinuity(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.joinAll(1, tm{id: 1, room: "r"})
	a := e.joinAll(1, tm{id: 2, room: "r"})[0]
	b := e.joinAll(1, tm{id: 3, room: "r"})[0]
	a.level.Store(10) // louder: ranks first
	b.level.Store(30)
	l := cs[0]
	testwait.Within(t, 5*time.Second, "A in the slot", func() bool { return l.snapshot()[2] >= 10 })
	if err := e.sfu.Control(sessionName(1), mute(2)); err != nil {
		t.Fatal(err)
	}
	testwait.Within(t, 5*time.Second, "B in the slot", func() bool { return l.snapshot()[3] >= 10 })
	if err := e.sfu.Control(sessionName(1), unmute(2)); err != nil {
		t.Fatal(err)
	}
	n := l.snapshot()[2]
	testwait.Within(t, 5*time.Second, "A back in the slot", func() bool { return l.snapshot()[2] >= n+10 })

	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.tracks) != 1 {
		t.Fatalf("received %d SSRCs, want 1 (slot SSRC is fixed)", len(l.tracks))
	}
	for ssrc, pkts := range l.tracks {
		switches := 0
		for i := 1; i < len(pkts); i++ {
			p, q := pkts[i-1], pkts[i]
			ds, dt := int16(q.seq-p.seq), int32(q.ts-p.ts)
			if ds <= 0 {
				t.Fatalf("ssrc %x: seq %d -> %d not increasing (packet %d)", ssrc, p.seq, q.seq, i)
			}
			if dt <= 0 || dt%opusFrame != 0 || dt/opusFrame < int32(ds) {
				t.Fatalf("ssrc %x: ts %d -> %d (seq +%d) not consistent", ssrc, p.ts, q.ts, ds)
			}
			if p.speaker != q.speaker {
				switches++
				if !q.marker {
					t.Errorf("switch at packet %d without marker", i)
				}
				if ds != 1 {
					t.Errorf("switch at packet %d: seq gap %d, want 1", i, ds)
				}
			}
		}
		if switches < 2 {
			t.Fatalf("saw %d speaker switches, want >= 2", switches)
		}
	}
}

// TestStalledListener: a client that stops reading does not delay the
// others (UDP never pushes back, and the fan-out on the speaker's read
// goroutine never waits on a listener).
func TestStalledListener(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.joinAll(2, tm{id: 1, room: "r"}, tm{id: 2, room: "r"}, tm{id: 3, room: "r"})
	expectHearing(t, cs, map[*client][]byte{cs[0]: {2, 3}, cs[1]: {1, 3}, cs[2]: {1, 2}})
	cs[1].stopRead.Store(true)
	cs[0].reset()
	start := time.Now()
	// 1 keeps receiving 3 at the full 50 packets/s.
	testwait.Within(t, 3*time.Second, "50 packets at the unaffected listener", func() bool { return cs[0].snapshot()[3] >= 50 })
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Fatalf("50 packets took %v (50 pps expected)", d)
	}
}
