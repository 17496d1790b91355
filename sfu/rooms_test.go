package sfu

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/state"
)

// TestRoomElsewhere: a join for a room another live edge holds is refused
// with 409 voice_room_elsewhere naming that edge; once the room is free
// (released by its holder) the join succeeds here, and when the last peer
// leaves, the room is released for the next edge.
func TestRoomElsewhere(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	table := state.NewMemoryVoiceRooms(func() time.Time { return now }, state.VoiceRoomTimes{})
	other := table.For("edge-a", "https://a.example:8443")
	e := newEnvDeps(t, nil, func(d *Deps) { d.Rooms = table.For("edge-b", "https://b.example:8443") })
	ctx := context.Background()
	if _, mine, err := other.Claim(ctx, "grove"); err != nil || !mine {
		t.Fatalf("edge-a claim: mine=%v err=%v", mine, err)
	}

	tok := e.session("sess-1", "player-1", "grove", 11, auth.Access{})
	_, offer := newClient(t, 1, 1, true)
	resp, body := e.post(tok, JoinRequest{SessionID: "sess-1", SDP: offer})
	var eb ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil {
		t.Fatalf("%d %s: %v", resp.StatusCode, body, err)
	}
	if resp.StatusCode != http.StatusConflict || eb.Code != CodeRoomElsewhere || eb.EdgeID != "edge-a" || eb.EdgeURL != "https://a.example:8443" {
		t.Fatalf("join for a room on edge-a: %d %+v, want 409 voice_room_elsewhere naming edge-a", resp.StatusCode, eb)
	}

	// The holder lets go: the room comes here.
	if err := other.Release(ctx, "grove"); err != nil {
		t.Fatal(err)
	}
	c := e.join(tok, "sess-1", 1, 1)
	if h, mine, _ := other.Claim(ctx, "grove"); mine || h.EdgeID != "edge-b" {
		t.Fatalf("while edge-b has a peer in grove, edge-a's claim gave %+v mine=%v", h, mine)
	}
	// The last peer leaves: the room is released (asynchronously).
	req, _ := http.NewRequest(http.MethodDelete, e.srv.URL+"/v6/voice/session/"+c.peerID, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("leave: %v %v", resp, err)
	}
	c.close()
	testwait.Within(t, 5*time.Second, "room released after the last peer left", func() bool {
		_, mine, _ := other.Claim(ctx, "grove")
		if mine {
			_ = other.Release(ctx, "grove")
		}
		return mine
	})
}

// failingRooms is a room table that cannot be reached.
type failingRooms struct{}

func (failingRooms) Claim(context.Context, string) (state.RoomHolder, bool, error) {
	return state.RoomHolder{}, false, state.ErrUnavailable
}
func (failingRooms) Heartbeat(context.Context, []string) ([]string, error) {
	return nil, state.ErrUnavailable
}
func (failingRooms) Release(context.Context, string) error { return state.ErrUnavailable }

// TestRoomTableDown: without the room table, joins get a typed 503.
func TestRoomTableDown(t *testing.T) {
	e := newEnvDeps(t, nil, func(d *Deps) { d.Rooms = failingRooms{} })
	tok := e.session("sess-1", "player-1", "grove", 11, auth.Access{})
	_, offer := newClient(t, 1, 1, true)
	resp, body := e.post(tok, JoinRequest{SessionID: "sess-1", SDP: offer})
	var eb ErrorBody
	_ = json.Unmarshal(body, &eb)
	if resp.StatusCode != http.StatusServiceUnavailable || eb.Code != CodeStateDown {
		t.Fatalf("join with the room table down: %d %s, want 503 state_unavailable", resp.StatusCode, body)
	}
	if !errors.Is(&RoomElsewhereError{}, ErrRoomElsewhere) {
		t.Fatal("RoomElsewhereError does not unwrap to ErrRoomElsewhere")
	}
}

// stealingRooms is a room table where, once steal is set, another edge
// has taken every room this edge heartbeats (as after a partition longer
// than the liveness window).
type stealingRooms struct {
	state.VoiceRooms
	steal atomic.Bool
}

func (r *stealingRooms) Heartbeat(ctx context.Context, rooms []string) ([]string, error) {
	if r.steal.Load() {
		return rooms, nil
	}
	return r.VoiceRooms.Heartbeat(ctx, rooms)
}

// TestRoomLostEndsPeers: when a heartbeat finds the room taken by another
// edge, the room's peers here are ended so that their clients re-join on
// the room's edge: a room never stays split.
func TestRoomLostEndsPeers(t *testing.T) {
	table := state.NewMemoryVoiceRooms(nil, state.VoiceRoomTimes{})
	rooms := &stealingRooms{VoiceRooms: table.For("edge-b", "https://b.example:8443")}
	e := newEnvDeps(t, func(c *Config) { c.RoomHeartbeat = 50 * time.Millisecond }, func(d *Deps) { d.Rooms = rooms })
	tok := e.session("sess-1", "player-1", "grove", 11, auth.Access{})
	e.join(tok, "sess-1", 1, 1)
	tok2 := e.session("sess-2", "player-2", "shore", 12, auth.Access{})
	e.join(tok2, "sess-2", 2, 1)
	if n := e.peerCount(); n != 2 {
		t.Fatalf("%d peers after two joins", n)
	}
	rooms.steal.Store(true)
	testwait.Within(t, 5*time.Second, "peers of the taken rooms ended", func() bool { return e.peerCount() == 0 })
}

func (e *testEnv) peerCount() int {
	e.sfu.mu.Lock()
	defer e.sfu.mu.Unlock()
	return len(e.sfu.peers)
}
