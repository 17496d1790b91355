package edge

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/internal/opsboard"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// TestFleetPxstream: two edges share one Redis. The only streamer registers
// on edge B; the matchmaker on edge A leases it, and a player connected to
// edge A signals with it across the fleet. A user's third concurrent match
// is refused whichever edge it comes through.
func TestFleetPxstream(t *testing.T) {
	rds := redistest.StartServer(t)
	secret := strings.Repeat("px-fleet-secret-", 3)
	fleet := func(streamers int) func(*Config) {
		return func(c *Config) {
			c.RedisURL = "redis://" + rds.Addr + "/0"
			c.JWTSecret = secret
			c.DevStreamers = streamers
		}
	}
	b := startEdge(t, fleet(3))
	a := startEdge(t, fleet(0))

	tok := a.devToken(t, "fleet-fan")
	match := func(te *testEdge) (int, []byte) { return te.match(t, tok) }
	var m struct {
		StreamerID    string `json:"streamer_id"`
		SignallingURL string `json:"signalling_url"`
	}
	testwait.Within(t, 30*time.Second, "edge A to lease a streamer registered on edge B", func() bool {
		code, body := match(a)
		if code != http.StatusOK {
			return false
		}
		return json.Unmarshal(body, &m) == nil
	})
	// Drop-in signalling on A with B's streamer.
	ws, _, err := websocket.DefaultDialer.Dial(strings.Replace(a.httpURL("/v6/pxstream/signalling"), "http", "ws", 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	read := func() map[string]any {
		t.Helper()
		_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
		var msg map[string]any
		if err := ws.ReadJSON(&msg); err != nil {
			t.Fatal(err)
		}
		return msg
	}
	if msg := read(); msg["type"] != "config" {
		t.Fatalf("first message %v", msg)
	}
	_ = ws.WriteJSON(map[string]any{"type": "listStreamers"})
	if msg := read(); msg["type"] != "streamerList" || !strings.Contains(toJSON(msg["ids"]), m.StreamerID) {
		t.Fatalf("edge A's list %v does not show %s from edge B", msg, m.StreamerID)
	}
	_ = ws.WriteJSON(map[string]any{"type": "subscribe", "streamerId": m.StreamerID})
	for {
		msg := read()
		if msg["type"] == "subscribeFailed" {
			t.Fatalf("subscribe across edges: %v", msg)
		}
		if msg["type"] == "offer" {
			break
		}
	}
	// Global caps: the user holds one match (through A); a second through
	// B is fine, a third through either edge is refused.
	if code, body := match(b); code != http.StatusOK {
		t.Fatalf("second match via B: %d %s", code, body)
	}
	if code, body := match(a); code != http.StatusConflict {
		t.Fatalf("third match via A: %d %s, want 409", code, body)
	}
	if code, body := match(b); code != http.StatusConflict {
		t.Fatalf("third match via B: %d %s, want 409", code, body)
	}

	// The operator page on A shows the fleet: both edges, and a realtime
	// session held on B.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := b.dial(t, "websocket", false)
	if _, err := c.Hello(ctx, helloFor(b.devToken(t, "seen-from-a"))); err != nil {
		t.Fatal(err)
	}
	testwait.Within(t, 15*time.Second, "edge A's fleet view to count both edges and B's session", func() bool {
		resp, err := http.Get(a.adminURL("/ops/metrics.json"))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var snap opsboard.Snapshot
		if json.NewDecoder(resp.Body).Decode(&snap) != nil || snap.Fleet == nil || snap.Fleet.Edges != 2 {
			return false
		}
		var sessions float64
		for _, smp := range snap.Families["egbe_shard_sessions"] {
			sessions += smp.Value
		}
		return sessions >= 1
	})
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
