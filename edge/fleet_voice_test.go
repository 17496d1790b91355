package edge

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/bench"
)

// TestFleetVoice: a voice room lives on one edge at a time. Three edge
// processes share a Redis and a reference shard. Member 1 joins voice on
// edge A (the room is pinned there); member 2, connected to edge B, is told
// where the room lives (409 voice_room_elsewhere with A's URL), moves its
// realtime session there (same session id) and joins; both hear each
// other. A is SIGKILLed: the members resume on B and C; the room moves to
// the edge of the first member to re-join, the other is redirected there,
// and they hear each other again.
func TestFleetVoice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	edges := startOneShardFleet(t, ctx, 3, 10, strings.Repeat("voice-fleet-", 4))
	a, b, c := edges[0], edges[1], edges[2]

	members := make([]*bench.VoiceMember, 2)
	for i := range members {
		tok, err := a.Token("voice-roamer-" + string(rune('1'+i)))
		if err != nil {
			t.Fatal(err)
		}
		m, err := bench.NewVoiceMember(uint16(i+1), tok, "orun-grove", "wolves")
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		members[i] = m
		go m.Speak(ctx)
	}
	m1, m2 := members[0], members[1]

	// Member 1 joins on A: the room is pinned to A.
	if err := m1.Connect(ctx, a.HTTPBase); err != nil {
		t.Fatal(err)
	}
	if err := m1.JoinVoice(ctx); err != nil {
		t.Fatal(err)
	}
	if m1.Moves() != 0 {
		t.Fatalf("member 1 was redirected on a free room")
	}
	// Member 2 connects to B and is sent to A.
	if err := m2.Connect(ctx, b.HTTPBase); err != nil {
		t.Fatal(err)
	}
	sid2, shard2 := m2.SessionID(), m2.ShardID()
	if err := m2.JoinVoice(ctx); err != nil {
		t.Fatal(err)
	}
	if m2.Moves() != 1 || m2.Base() != a.HTTPBase {
		t.Fatalf("member 2: %d moves, now on %s; want one move to edge A %s", m2.Moves(), m2.Base(), a.HTTPBase)
	}
	if m2.SessionID() != sid2 || m2.ShardID() != shard2 {
		t.Fatalf("member 2 moved as session %s on %s, want %s on %s", m2.SessionID(), m2.ShardID(), sid2, shard2)
	}
	awaitHearing(t, ctx, m1, m2, "on edge A")

	// A dies.
	if err := syscall.Kill(a.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-m1.RealtimeDone()
	<-m2.RealtimeDone()
	// Member 1 resumes on B, member 2 on C; each re-joins voice. Until
	// A's liveness lapses, the room table still names A: a redirect to a
	// dead edge fails to connect, and the member retries where it is.
	rejoin := func(m *bench.VoiceMember, to *bench.Target) {
		t.Helper()
		if err := m.Connect(ctx, to.HTTPBase); err != nil {
			t.Fatalf("resume on %s: %v", to.HTTPBase, err)
		}
		for {
			err := m.JoinVoice(ctx)
			switch {
			case err == nil:
				return
			case !errors.Is(err, bench.ErrRoomEdgeUnreachable):
				t.Fatalf("re-join: %v", err) // anything but "the room's edge is dead" is a failure
			case ctx.Err() != nil:
				t.Fatalf("re-join never succeeded: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	rejoin(m1, b)
	rejoin(m2, c)
	if m1.Base() != m2.Base() || m1.Base() == a.HTTPBase {
		t.Fatalf("after the move: member 1 on %s, member 2 on %s; want one surviving edge", m1.Base(), m2.Base())
	}
	if m1.SessionID() == "" || m2.SessionID() != sid2 {
		t.Fatalf("member 2 lost its session: %s, want %s", m2.SessionID(), sid2)
	}
	awaitHearing(t, ctx, m1, m2, "after the room moved")
	t.Logf("edge A killed; the room moved to %s and both members hear each other %v later", m1.Base(), time.Since(killed).Round(time.Millisecond))
}

// awaitHearing waits until each member receives fresh packets from the
// other.
func awaitHearing(t *testing.T, ctx context.Context, m1, m2 *bench.VoiceMember, when string) {
	t.Helper()
	h12, h21 := m2.Heard(m1.ID), m1.Heard(m2.ID)
	for m2.Heard(m1.ID) < h12+10 || m1.Heard(m2.ID) < h21+10 {
		if ctx.Err() != nil {
			t.Fatalf("%s: member 2 heard %d new packets of member 1, member 1 heard %d of member 2 (want 10 each)",
				when, m2.Heard(m1.ID)-h12, m1.Heard(m2.ID)-h21)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
