package state

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
)

// voiceRoomsBackend hands out edges' views of one room table and moves
// its clock (memory: a fake clock; Redis: real time, short windows).
type voiceRoomsBackend struct {
	name    string
	forEdge func(id, url string) VoiceRooms
	advance func(time.Duration)
	times   VoiceRoomTimes
}

func voiceRoomsBackends(t *testing.T) []voiceRoomsBackend {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	memTimes := VoiceRoomTimes{AliveTTL: 3 * time.Second, RoomTTL: time.Minute}
	mem := NewMemoryVoiceRooms(clock, memTimes)

	srv := redistest.StartServer(t)
	r := testRedis(t, &redis.Options{Addr: srv.Addr})
	redisTimes := VoiceRoomTimes{AliveTTL: 400 * time.Millisecond, RoomTTL: 2 * time.Second}
	return []voiceRoomsBackend{
		{
			name:    "memory",
			forEdge: mem.For,
			advance: func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() },
			times:   memTimes,
		},
		{
			name:    "redis",
			forEdge: func(id, url string) VoiceRooms {
				m, err := NewRedisMembers(r, Member{ID: id, URL: url}, redisTimes.AliveTTL)
				if err != nil {
					t.Fatal(err)
				}
				return NewRedisVoiceRooms(m, redisTimes.RoomTTL)
			},
			advance: time.Sleep,
			times:   redisTimes,
		},
	}
}

func TestVoiceRoomsContract(t *testing.T) {
	ctx := context.Background()
	for _, b := range voiceRoomsBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			a := b.forEdge("edge-a", "https://a.example:8443")
			c := b.forEdge("edge-b", "https://b.example:8443")
			claim := func(v VoiceRooms, room string) RoomHolder {
				t.Helper()
				h, mine, err := v.Claim(ctx, room)
				if err != nil {
					t.Fatal(err)
				}
				if mine != (h.EdgeID == map[VoiceRooms]string{a: "edge-a", c: "edge-b"}[v]) {
					t.Fatalf("claim of %s: mine=%v but holder %+v", room, mine, h)
				}
				return h
			}
			// First claim wins; the other edge is told where the room is.
			if h := claim(a, "grove"); h.EdgeID != "edge-a" {
				t.Fatalf("first claim: holder %+v, want edge-a", h)
			}
			if h := claim(c, "grove"); h != (RoomHolder{"edge-a", "https://a.example:8443"}) {
				t.Fatalf("second edge: holder %+v, want edge-a with its url", h)
			}
			if h := claim(a, "grove"); h.EdgeID != "edge-a" {
				t.Fatalf("re-claim by holder: %+v", h)
			}
			// Rooms are independent.
			if h := claim(c, "shore"); h.EdgeID != "edge-b" {
				t.Fatalf("other room: %+v", h)
			}

			// A live holder keeps its room past AliveTTL by heartbeating.
			for range 4 {
				b.advance(b.times.AliveTTL / 3)
				lost, err := a.Heartbeat(ctx, []string{"grove"})
				if err != nil || len(lost) != 0 {
					t.Fatalf("heartbeat: lost %v err %v", lost, err)
				}
				if _, err := c.Heartbeat(ctx, []string{"shore"}); err != nil {
					t.Fatal(err)
				}
			}
			if h := claim(c, "grove"); h.EdgeID != "edge-a" {
				t.Fatalf("live holder lost its room: %+v", h)
			}

			// Release hands the room to the next claimer; a release by a
			// non-holder changes nothing.
			if err := c.Release(ctx, "grove"); err != nil {
				t.Fatal(err)
			}
			if h := claim(c, "grove"); h.EdgeID != "edge-a" {
				t.Fatalf("release by non-holder moved the room: %+v", h)
			}
			if err := a.Release(ctx, "grove"); err != nil {
				t.Fatal(err)
			}
			if h := claim(c, "grove"); h.EdgeID != "edge-b" {
				t.Fatalf("released room not claimable: %+v", h)
			}

			// The holder dies (no heartbeat for AliveTTL): the room moves to
			// the next claimer, and the old holder learns it lost the room.
			b.advance(b.times.AliveTTL + b.times.AliveTTL/2)
			if h := claim(a, "grove"); h.EdgeID != "edge-a" {
				t.Fatalf("dead holder kept its room: %+v", h)
			}
			lost, err := c.Heartbeat(ctx, []string{"grove", "shore"})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(lost, []string{"grove"}) {
				t.Fatalf("old holder's heartbeat: lost %v, want [grove]", lost)
			}
		})
	}
}

// TestVoiceRoomsRedisLostKeys: a Redis that comes back empty loses the
// room keys; the holder's next heartbeat claims its rooms again.
func TestVoiceRoomsRedisLostKeys(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartServer(t)
	r := testRedis(t, &redis.Options{Addr: srv.Addr})
	rdb := r.Client()
	a := NewRedisVoiceRooms(mustMembers(t, r, Member{ID: "edge-a", URL: "http://a"}), 0)
	b := NewRedisVoiceRooms(mustMembers(t, r, Member{ID: "edge-b", URL: "http://b"}), 0)
	if _, _, err := a.Claim(ctx, "grove"); err != nil {
		t.Fatal(err)
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if lost, err := a.Heartbeat(ctx, []string{"grove"}); err != nil || len(lost) != 0 {
		t.Fatalf("heartbeat after flush: lost %v err %v", lost, err)
	}
	if h, mine, err := b.Claim(ctx, "grove"); err != nil || h.EdgeID != "edge-a" || mine {
		t.Fatalf("after flush and heartbeat: holder %+v err %v, want edge-a", h, err)
	}

	// Redis down: typed unavailability.
	srv.Kill()
	if _, _, err := b.Claim(ctx, "grove"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("claim with Redis down: %v, want ErrUnavailable", err)
	}
	if _, err := a.Heartbeat(ctx, []string{"grove"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("heartbeat with Redis down: %v, want ErrUnavailable", err)
	}
}

func TestCheckRoomHolderURL(t *testing.T) {
	if err := CheckRoomHolderURL("https://edge-3.example.net:8443"); err != nil {
		t.Fatal(err)
	}
	if err := CheckRoomHolderURL("https://a b"); err == nil {
		t.Fatal("a url with a space was accepted")
	}
}
