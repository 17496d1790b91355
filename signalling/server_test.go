package signalling

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"default", func(*Config) {}, true},
		{"token", func(c *Config) { c.Auth = AuthToken }, true},
		{"ice servers", func(c *Config) {
			c.PeerConnectionOptions = json.RawMessage(`{"iceServers":[{"urls":["turn:t:3478"],"username":"u","credential":"p"}]}`)
		}, true},
		{"unset options", func(c *Config) { c.PeerConnectionOptions = nil }, true},
		{"options not object", func(c *Config) { c.PeerConnectionOptions = json.RawMessage(`[]`) }, false},
		{"options null", func(c *Config) { c.PeerConnectionOptions = json.RawMessage(`null`) }, false},
		{"bad auth", func(c *Config) { c.Auth = "jwt" }, false},
		{"negative max", func(c *Config) { c.MaxPlayers = -1 }, false},
		{"tiny read limit", func(c *Config) { c.ReadLimit = 1024 }, false},
		{"no queue", func(c *Config) { c.SendQueue = 0 }, false},
		{"no pop", func(c *Config) { c.DefaultPOP = "" }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mod(&c)
			err := c.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadConfig)) {
				t.Fatalf("Validate = %v, want ok=%v", err, tc.ok)
			}
		})
	}
	c := Default()
	c.Auth = AuthToken
	if _, err := New(c, Deps{}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("token mode without signer: %v", err)
	}
}

func TestUnsetOptionsSendEmptyObject(t *testing.T) {
	c := Default()
	c.PeerConnectionOptions = nil
	h := newHarness(t, c, Deps{})
	h.dialPlayer("P0", "/").expectRaw(`{"type":"config","peerConnectionOptions":{},"protocolVersion":"1.3.0"}`)
}

func TestSubprotocolEcho(t *testing.T) {
	h := newHarness(t, Default(), Deps{})
	p := h.dial("P0", h.player, "/some/path?q=1", "first-proto", "second")
	if got := p.resp.Header.Get("Sec-Websocket-Protocol"); got != "first-proto" {
		t.Fatalf("subprotocol %q", got)
	}
	p.expect("config")
	s := h.dial("S0", h.streamer, "/")
	if got := s.resp.Header.Get("Sec-Websocket-Protocol"); got != "" {
		t.Fatalf("subprotocol %q with none offered", got)
	}
	// Any Origin is accepted.
	d := websocket.Dialer{}
	ws, _, err := d.Dial(wsURL(h.player, "/"), http.Header{"Origin": {"https://evil.example"}})
	if err != nil {
		t.Fatalf("origin refused: %v", err)
	}
	ws.Close()
	// A plain HTTP request is refused without harm.
	resp, err := http.Get(h.player.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("plain GET: %d", resp.StatusCode)
	}
}

// TestOversizedFrame: a frame over ReadLimit closes that socket (1009) and
// nobody else's.
func TestOversizedFrame(t *testing.T) {
	cfg := Default()
	cfg.ReadLimit = 64 << 10
	h := newHarness(t, cfg, Deps{})
	s := h.streamerUp("S1", "/", "A")
	p := h.playerUp("P0", "/")
	p.send(`{"type":"subscribe","streamerId":"A"}`)
	s.expect("playerConnected")
	big := `{"type":"answer","sdp":"` + strings.Repeat("a", 64<<10) + `"}`
	p.sendQuiet(websocket.TextMessage, []byte(big))
	p.expectClose(websocket.CloseMessageTooBig, "")
	s.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
	// A frame just under the limit is fine.
	p1 := h.playerUp("P1", "/")
	p1.send(`{"type":"subscribe","streamerId":"A"}`)
	s.expect("playerConnected")
	ok := `{"type":"answer","sdp":"` + strings.Repeat("b", 60<<10) + `"}`
	p1.sendQuiet(websocket.TextMessage, []byte(ok))
	if f := s.next(); !bytes.Contains(f.data, []byte(`"playerId":"Player1"`)) {
		t.Fatalf("near-limit answer not relayed: %.80s", f.data)
	}
	s.sync()
	if got := testutil.ToFloat64(h.srv.met.dropped.WithLabelValues(dropTooLarge)); got != 1 {
		t.Fatalf("too_large drops %v", got)
	}
}

// TestSlowPlayerIsDropped: a player that stops reading is cut off when its
// queue fills; its streamer and other players never block.
func TestSlowPlayerIsDropped(t *testing.T) {
	cfg := Default()
	cfg.SendQueue = 4
	h := newHarness(t, cfg, Deps{})
	s := h.streamerUp("S1", "/", "A")
	// A raw client that never reads after subscribing.
	slow, _, err := websocket.DefaultDialer.Dial(wsURL(h.player, "/"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, b, err := slow.ReadMessage(); err != nil || !bytes.Contains(b, []byte(`"config"`)) {
		t.Fatalf("config: %s %v", b, err)
	}
	if err := slow.WriteMessage(websocket.TextMessage, []byte(`{"type":"subscribe","streamerId":"A"}`)); err != nil {
		t.Fatal(err)
	}
	s.expect("playerConnected")
	fast := h.playerUp("P1", "/")
	fast.send(`{"type":"subscribe","streamerId":"A"}`)
	s.expect("playerConnected")
	// Fill the socket buffers, then its queue.
	cand := `{"type":"iceCandidate","playerId":"Player0","candidate":{"candidate":"` + strings.Repeat("c", 900<<10) + `"}}`
	gone := false
	for !gone {
		s.sendQuiet(websocket.TextMessage, []byte(cand))
		s.sendQuiet(websocket.TextMessage, []byte(`{"type":"ping","time":1}`))
		for {
			f := s.next()
			if string(f.data) == `{"type":"pong","time":1}` {
				break
			}
			if string(f.data) != `{"type":"playerDisconnected","playerId":"Player0"}` {
				t.Fatalf("streamer got %q", f.data)
			}
			gone = true
		}
	}
	if got := testutil.ToFloat64(h.srv.met.dropped.WithLabelValues(dropSlowConsumer)); got != 1 {
		t.Fatalf("slow_consumer drops %v", got)
	}
	s.send(`{"type":"offer","playerId":"Player1","sdp":"v=0\r\n"}`)
	fast.expectRaw(`{"type":"offer","sdp":"v=0\r\n"}`)
}

func TestMetrics(t *testing.T) {
	h := newHarness(t, Default(), Deps{})
	s := h.streamerUp("S1", "/?pop=eu-west-1&codecs=h264,av1", "A")
	p := h.playerUp("P0", "/")
	p.send(`{"type":"subscribe","streamerId":"A"}`)
	s.expect("playerConnected")
	s.send(`{"type":"offer","playerId":"Player0","sdp":"v=0\r\n"}`)
	p.expect("offer")
	p.send(`null`)
	p.send(`{"type":"nonsense"}`)
	p.send(`{bad`)
	p.sync()
	info, _ := h.srv.Registry().Get("A")
	if info.POP != "eu-west-1" || strings.Join(info.Codecs, ",") != "H264,AV1" || info.State != StateStreaming || info.Players != 1 {
		t.Fatalf("registry %+v", info)
	}
	want := `
# HELP egbe_pxstream_messages_dropped_total Signalling messages ignored or dropped, and sockets dropped, by reason.
# TYPE egbe_pxstream_messages_dropped_total counter
egbe_pxstream_messages_dropped_total{reason="bad_json"} 1
egbe_pxstream_messages_dropped_total{reason="not_object"} 1
egbe_pxstream_messages_dropped_total{reason="unknown_type"} 1
# HELP egbe_pxstream_messages_relayed_total Signalling messages relayed between players and streamers, by type.
# TYPE egbe_pxstream_messages_relayed_total counter
egbe_pxstream_messages_relayed_total{type="offer"} 1
# HELP egbe_pxstream_players_connected Player WebSocket connections open.
# TYPE egbe_pxstream_players_connected gauge
egbe_pxstream_players_connected 1
# HELP egbe_pxstream_sfus_connected SFU WebSocket connections open on the SFU port.
# TYPE egbe_pxstream_sfus_connected gauge
egbe_pxstream_sfus_connected 0
# HELP egbe_pxstream_streamers Registered (identified) streamers by POP and state.
# TYPE egbe_pxstream_streamers gauge
egbe_pxstream_streamers{pop="eu-west-1",state="idle"} 0
egbe_pxstream_streamers{pop="eu-west-1",state="leased"} 0
egbe_pxstream_streamers{pop="eu-west-1",state="streaming"} 1
# HELP egbe_pxstream_streamers_connected Streamer WebSocket connections open (identified or not).
# TYPE egbe_pxstream_streamers_connected gauge
egbe_pxstream_streamers_connected 1
`
	// The write counters depend on how reads batch: TestBurstLeavesInOneWrite
	// checks them.
	names := []string{"egbe_pxstream_messages_dropped_total", "egbe_pxstream_messages_relayed_total",
		"egbe_pxstream_players_connected", "egbe_pxstream_sfus_connected", "egbe_pxstream_streamers",
		"egbe_pxstream_streamers_connected"}
	if err := testutil.GatherAndCompare(h.prom, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

// TestCloseWithOpenSockets: Close ends every socket with 1001 and returns
// with no goroutine left (goleak checks at exit).
func TestCloseWithOpenSockets(t *testing.T) {
	h := newHarness(t, Default(), Deps{})
	s := h.streamerUp("S1", "/", "A")
	p := h.playerUp("P0", "/")
	p.send(`{"type":"subscribe","streamerId":"A"}`)
	s.expect("playerConnected")
	h.srv.Close()
	p.expectClose(websocket.CloseGoingAway, "server closing")
	s.expectClose(websocket.CloseGoingAway, "server closing")
	// Refused after Close.
	d := websocket.Dialer{}
	ws, _, err := d.Dial(wsURL(h.player, "/"), nil)
	if err == nil {
		_, _, rerr := ws.ReadMessage()
		var ce *websocket.CloseError
		if !errors.As(rerr, &ce) || ce.Code != websocket.CloseGoingAway {
			t.Fatalf("after Close: %v", rerr)
		}
		ws.Close()
	}
	h.srv.Close() // idempotent
}

// TestRun: Run returns when its context ends, after closing every socket.
func TestRun(t *testing.T) {
	h := newHarness(t, Default(), Deps{})
	p := h.playerUp("P0", "/")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.srv.Run(ctx) }()
	cancel()
	p.expectClose(websocket.CloseGoingAway, "server closing")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
