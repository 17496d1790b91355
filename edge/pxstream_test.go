package edge

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/internal/testwait"
)

// TestPxstreamThroughTheEdge: a dev streamer registers on the streamer
// port, the matchmaker leases it, and a player using the signalling URL
// from the match (token mode) gets config, subscribes, and receives the
// streamer's offer — all through the edge's own listeners.
func TestPxstreamThroughTheEdge(t *testing.T) {
	te := startEdge(t, func(c *Config) { c.DevStreamers = 1; c.PxstreamAuth = "token" })
	var match struct {
		SessionID     string `json:"session_id"`
		POP           string `json:"pop_id"`
		StreamerID    string `json:"streamer_id"`
		Codec         string `json:"codec"`
		SignallingURL string `json:"signalling_url"`
		FirstFrame    int    `json:"first_frame_budget_ms"`
	}
	testwait.Within(t, 20*time.Second, "a match", func() bool {
		resp, body := postJSON(t, te.httpURL("/api/v6/pxstream/match"), map[string]any{"client_region": "us-east", "codecs": []string{"H264"}, "entitlement": "paid"})
		if resp.StatusCode != http.StatusOK {
			return false
		}
		if err := json.Unmarshal(body, &match); err != nil {
			t.Fatal(err)
		}
		return true
	})
	if match.POP != devStreamerPOP || match.Codec != "H264" || match.FirstFrame != 8000 || !strings.Contains(match.SignallingURL, "token=") {
		t.Fatalf("match %+v", match)
	}
	ws, _, err := websocket.DefaultDialer.Dial(match.SignallingURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	read := func() map[string]any {
		t.Helper()
		_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
		var m map[string]any
		if err := ws.ReadJSON(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := read(); m["type"] != "config" {
		t.Fatalf("first message %v, want config", m)
	}
	if err := ws.WriteJSON(map[string]any{"type": "subscribe", "streamerId": match.StreamerID}); err != nil {
		t.Fatal(err)
	}
	for {
		m := read()
		if m["type"] == "subscribeFailed" {
			t.Fatalf("subscribe failed: %v", m)
		}
		if m["type"] == "offer" {
			if _, has := m["playerId"]; has {
				t.Fatalf("offer towards a player must not carry playerId: %v", m)
			}
			if !strings.Contains(m["sdp"].(string), "H264/90000") {
				t.Fatalf("offer without H264")
			}
			return
		}
	}
}
