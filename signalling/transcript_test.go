package signalling

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// Each scenario scripts streamers (S*) and players (P*) against a fresh
// server; the transcript of what they sent and received is compared with
// testdata/transcript_<name>.golden. The scripts also assert each step, so a
// golden diff is a review aid, not the only check.

type scenario struct {
	name string
	cfg  func(*Config)
	run  func(h *harness)
}

func TestTranscripts(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			cfg := Default()
			cfg.PeerConnectionOptions = json.RawMessage(`{"iceServers":[{"urls":["stun:stun.l.google.com:19302"]}]}`)
			if sc.cfg != nil {
				sc.cfg(&cfg)
			}
			h := newHarness(t, cfg, Deps{})
			sc.run(h)
			checkGolden(t, "transcript_"+sc.name, h.tr.String())
		})
	}
}

const (
	shortOffer = `{"type":"offer","playerId":"Player0","sdp":"v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n","multiplex":true,"sfu":false,"x-unknown":{"kept":[1,2.50,"x"]}}`
)

var scenarios = []scenario{
	{name: "handshake", run: func(h *harness) {
		// Streamer: identify then config; endpointId -> endpointIdConfirm.
		s := h.dialStreamer("S1", "/any/path?x=1")
		s.expectRaw(`{"type":"identify"}`)
		s.expectRaw(`{"type":"config","peerConnectionOptions":{"iceServers":[{"urls":["stun:stun.l.google.com:19302"]}]},"protocolVersion":"1.3.0"}`)
		s.send(`{"type":"endpointId","id":"DefaultStreamer","protocolVersion":"1.1.0"}`)
		s.expectRaw(`{"type":"endpointIdConfirm","committedId":"DefaultStreamer"}`)
		// Player: config first, before it sends anything.
		p := h.dialPlayer("P0", "/")
		p.expectRaw(`{"type":"config","peerConnectionOptions":{"iceServers":[{"urls":["stun:stun.l.google.com:19302"]}]},"protocolVersion":"1.3.0"}`)
		p.send(`{"type":"listStreamers"}`)
		p.expectRaw(`{"type":"streamerList","ids":["DefaultStreamer"]}`)
		p.send(`{"type":"subscribe","streamerId":"DefaultStreamer"}`)
		s.expectRaw(`{"type":"playerConnected","playerId":"Player0","dataChannel":true,"sfu":false}`)
		// Offer then ICE, in order, playerId removed, unknown fields kept.
		s.send(shortOffer)
		s.send(`{"type":"iceCandidate","playerId":"Player0","candidate":{"candidate":"candidate:1 1 udp 2122260223 10.0.0.5 50000 typ host","sdpMid":"0","sdpMLineIndex":0}}`)
		s.send(`{"type":"iceCandidate","candidate":{"candidate":"candidate:2 1 udp 1686052607 203.0.113.7 50000 typ srflx raddr 10.0.0.5 rport 50000","sdpMid":"0","sdpMLineIndex":0,"usernameFragment":"Xq3b"},"playerId":"Player0"}`)
		p.expectRaw(`{"type":"offer","sdp":"v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n","multiplex":true,"sfu":false,"x-unknown":{"kept":[1,2.50,"x"]}}`)
		p.expectRaw(`{"type":"iceCandidate","candidate":{"candidate":"candidate:1 1 udp 2122260223 10.0.0.5 50000 typ host","sdpMid":"0","sdpMLineIndex":0}}`)
		p.expectRaw(`{"type":"iceCandidate","candidate":{"candidate":"candidate:2 1 udp 1686052607 203.0.113.7 50000 typ srflx raddr 10.0.0.5 rport 50000","sdpMid":"0","sdpMLineIndex":0,"usernameFragment":"Xq3b"}}`)
		// Answer and ICE back, playerId set to the sender.
		p.send(`{"type":"answer","sdp":"v=0\r\na=fmtp:96 x-google-start-bitrate=10000\r\n","minBitrateBps":0,"maxBitrateBps":0}`)
		p.send(`{"type":"iceCandidate","candidate":{"candidate":"candidate:3 1 udp 2122260223 192.168.1.9 61000 typ host","sdpMid":"0","sdpMLineIndex":0,"usernameFragment":"abcd"}}`)
		s.expectRaw(`{"type":"answer","sdp":"v=0\r\na=fmtp:96 x-google-start-bitrate=10000\r\n","minBitrateBps":0,"maxBitrateBps":0,"playerId":"Player0"}`)
		s.expectRaw(`{"type":"iceCandidate","candidate":{"candidate":"candidate:3 1 udp 2122260223 192.168.1.9 61000 typ host","sdpMid":"0","sdpMLineIndex":0,"usernameFragment":"abcd"},"playerId":"Player0"}`)
		// A player that lies about its playerId is corrected.
		p.send(`{"type":"iceCandidate","playerId":"Player9","candidate":{"candidate":"","sdpMid":"0","sdpMLineIndex":0}}`)
		s.expectRaw(`{"type":"iceCandidate","playerId":"Player0","candidate":{"candidate":"","sdpMid":"0","sdpMLineIndex":0}}`)
		// Pass-through messages.
		p.send(`{"type":"layerPreference","spatialLayer":1,"temporalLayer":2}`)
		p.send(`{"type":"dataChannelRequest"}`)
		p.send(`{"type":"peerDataChannelsReady"}`)
		s.expectRaw(`{"type":"layerPreference","spatialLayer":1,"temporalLayer":2,"playerId":"Player0"}`)
		s.expectRaw(`{"type":"dataChannelRequest","playerId":"Player0"}`)
		s.expectRaw(`{"type":"peerDataChannelsReady","playerId":"Player0"}`)
		// A player's offer (rare) reaches its streamer.
		p.send(`{"type":"offer","sdp":"v=0\r\n"}`)
		s.expectRaw(`{"type":"offer","sdp":"v=0\r\n","playerId":"Player0"}`)
		// ping/pong: UE seconds as a double, browser ms, missing time.
		s.send(`{"type":"ping","time":1733150000.125}`)
		s.expectRaw(`{"type":"pong","time":1733150000.125}`)
		p.send(`{"type":"ping","time":1733150000125}`)
		p.expectRaw(`{"type":"pong","time":1733150000125}`)
		p.send(`{"type":"ping"}`)
		p.expectRaw(`{"type":"pong","time":0}`)
		// Player closes: the streamer hears of it on the close frame.
		p.hangUp()
		s.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
		s.sync()
	}},

	{name: "ids_and_suffixes", run: func(h *harness) {
		s1 := h.streamerUp("S1", "/", "DefaultStreamer")
		s2 := h.streamerUp("S2", "/", "DefaultStreamer")
		s3 := h.streamerUp("S3", "/", "Free")
		s4 := h.streamerUp("S4", "/", "Free1")
		s5 := h.streamerUp("S5", "/", "Free")
		s6 := h.streamerUp("S6", "/", "")
		s7 := h.dialStreamer("S7", "/")
		s7.expect("identify")
		s7.expect("config")
		s7.send(`{"type":"endpointId","id":""}`)
		s7.expectRaw(`{"type":"endpointIdConfirm","committedId":"UnknownStreamer2"}`)
		// Unidentified streamers are not listed.
		s8 := h.dialStreamer("S8", "/")
		s8.expect("identify")
		s8.expect("config")
		p := h.playerUp("P0", "/")
		p.send(`{"type":"listStreamers"}`)
		p.expectRaw(`{"type":"streamerList","ids":["DefaultStreamer","DefaultStreamer1","Free","Free1","Free2","UnknownStreamer1","UnknownStreamer2"]}`)
		// Re-sending one's own id renames: the own id counts as taken.
		s1.send(`{"type":"endpointId","id":"DefaultStreamer"}`)
		s1.expectRaw(`{"type":"endpointIdConfirm","committedId":"DefaultStreamer2"}`)
		s5.send(`{"type":"endpointId","id":"Free2"}`)
		s5.expectRaw(`{"type":"endpointIdConfirm","committedId":"Free3"}`)
		p.send(`{"type":"listStreamers"}`)
		p.expectRaw(`{"type":"streamerList","ids":["DefaultStreamer2","DefaultStreamer1","Free","Free1","Free3","UnknownStreamer1","UnknownStreamer2"]}`)
		for _, c := range []*client{s1, s2, s3, s4, s5, s6, s7, s8, p} {
			c.sync()
		}
	}},

	{name: "rename_with_players", run: func(h *harness) {
		s := h.streamerUp("S1", "/", "A")
		p := h.playerUp("P0", "/")
		p.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expect("playerConnected")
		s.send(`{"type":"endpointId","id":"B"}`)
		p.expectRaw(`{"type":"streamerIdChanged","newID":"B"}`)
		s.expectRaw(`{"type":"endpointIdConfirm","committedId":"B"}`)
		p.send(`{"type":"listStreamers"}`)
		p.expectRaw(`{"type":"streamerList","ids":["B"]}`)
		s.send(`{"type":"offer","playerId":"Player0","sdp":"v=0\r\n"}`)
		p.expectRaw(`{"type":"offer","sdp":"v=0\r\n"}`)
		p.sync()
		s.sync()
	}},

	{name: "two_streamers", run: func(h *harness) {
		a := h.streamerUp("S1", "/", "A")
		b := h.streamerUp("S2", "/", "B")
		p0 := h.playerUp("P0", "/")
		p1 := h.playerUp("P1", "/")
		p0.send(`{"type":"subscribe","streamerId":"A"}`)
		a.expectRaw(`{"type":"playerConnected","playerId":"Player0","dataChannel":true,"sfu":false}`)
		p1.send(`{"type":"subscribe","streamerId":"B"}`)
		b.expectRaw(`{"type":"playerConnected","playerId":"Player1","dataChannel":true,"sfu":false}`)
		a.send(`{"type":"offer","playerId":"Player0","sdp":"A"}`)
		b.send(`{"type":"offer","playerId":"Player1","sdp":"B"}`)
		p0.expectRaw(`{"type":"offer","sdp":"A"}`)
		p1.expectRaw(`{"type":"offer","sdp":"B"}`)
		// A streamer cannot reach another streamer's player.
		a.send(`{"type":"offer","playerId":"Player1","sdp":"A"}`)
		a.send(`{"type":"disconnectPlayer","playerId":"Player1","reason":"not yours"}`)
		a.sync()
		p1.sync()
		// Subscribing again first unsubscribes.
		p0.send(`{"type":"subscribe","streamerId":"B"}`)
		a.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
		b.expectRaw(`{"type":"playerConnected","playerId":"Player0","dataChannel":true,"sfu":false}`)
		p0.send(`{"type":"unsubscribe"}`)
		b.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
		// An unsubscribed player's messages go to the first streamer.
		p0.send(`{"type":"iceCandidate","candidate":{"candidate":"","sdpMid":"0","sdpMLineIndex":0}}`)
		a.expectRaw(`{"type":"playerConnected","playerId":"Player0","dataChannel":true,"sfu":false}`)
		a.expectRaw(`{"type":"iceCandidate","candidate":{"candidate":"","sdpMid":"0","sdpMLineIndex":0},"playerId":"Player0"}`)
		for _, c := range []*client{a, b, p0, p1} {
			c.sync()
		}
	}},

	{name: "full_streamer", cfg: func(c *Config) { c.MaxPlayers = 1 }, run: func(h *harness) {
		s := h.streamerUp("S1", "/", "A")
		p0 := h.playerUp("P0", "/")
		p1 := h.playerUp("P1", "/")
		p0.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expect("playerConnected")
		p1.send(`{"type":"subscribe","streamerId":"A"}`)
		p1.expectRaw(`{"type":"subscribeFailed","message":"Streamer A is full. Max players = 1."}`)
		// Epic's server crashes here; we answer subscribeFailed.
		p1.send(`{"type":"answer","sdp":"v=0\r\n","minBitrateBps":0,"maxBitrateBps":0}`)
		p1.expectRaw(`{"type":"subscribeFailed","message":"Streamer A is full. Max players = 1."}`)
		p1.send(`{"type":"subscribe","streamerId":"nope"}`)
		p1.expectRaw(`{"type":"subscribeFailed","message":"Streamer nope does not exist."}`)
		// Everyone else keeps working.
		s.send(`{"type":"offer","playerId":"Player0","sdp":"v=0\r\n"}`)
		p0.expectRaw(`{"type":"offer","sdp":"v=0\r\n"}`)
		// A freed seat can be taken.
		p0.send(`{"type":"unsubscribe"}`)
		s.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
		p1.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expectRaw(`{"type":"playerConnected","playerId":"Player1","dataChannel":true,"sfu":false}`)
		for _, c := range []*client{s, p0, p1} {
			c.sync()
		}
	}},

	{name: "streamer_leaves", run: func(h *harness) {
		s := h.streamerUp("S1", "/", "A")
		other := h.streamerUp("S2", "/", "B")
		p0 := h.playerUp("P0", "/")
		p1 := h.playerUp("P1", "/")
		p2 := h.playerUp("P2", "/")
		p0.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expect("playerConnected")
		p1.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expect("playerConnected")
		p2.send(`{"type":"subscribe","streamerId":"B"}`)
		other.expect("playerConnected")
		s.send(`{"type":"offer","playerId":"Player0","sdp":"v=0\r\n"}`)
		p0.expectRaw(`{"type":"offer","sdp":"v=0\r\n"}`)
		s.hangUp()
		// No message first; a close frame without a status code.
		p0.expectClose(websocket.CloseNoStatusReceived, "")
		p1.expectClose(websocket.CloseNoStatusReceived, "")
		p3 := h.playerUp("P3", "/")
		p3.send(`{"type":"listStreamers"}`)
		p3.expectRaw(`{"type":"streamerList","ids":["B"]}`)
		other.sync()
		p2.sync()
	}},

	{name: "disconnect_player", run: func(h *harness) {
		s := h.streamerUp("S1", "/", "A")
		p0 := h.playerUp("P0", "/")
		p1 := h.playerUp("P1", "/")
		p0.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expect("playerConnected")
		p1.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expect("playerConnected")
		s.send(`{"type":"disconnectPlayer","playerId":"Player0","reason":"kicked by streamer"}`)
		p0.expectClose(websocket.CloseInternalServerErr, "kicked by streamer")
		s.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
		s.send(`{"type":"disconnectPlayer","playerId":"Player1"}`)
		p1.expectClose(websocket.CloseInternalServerErr, "")
		s.expectRaw(`{"type":"playerDisconnected","playerId":"Player1"}`)
		s.sync()
	}},

	{name: "numeric_player_id", run: func(h *harness) {
		s := h.streamerUp("S1", "/", "A")
		p := h.playerUp("P0", "/")
		p.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expect("playerConnected")
		s.send(`{"type":"offer","playerId":0,"sdp":"v=0\r\n"}`)
		p.expectRaw(`{"type":"offer","sdp":"v=0\r\n"}`)
		s.send(`{"type":"iceCandidate","playerId":0,"candidate":{"candidate":"","sdpMid":"0","sdpMLineIndex":0}}`)
		p.expectRaw(`{"type":"iceCandidate","candidate":{"candidate":"","sdpMid":"0","sdpMLineIndex":0}}`)
		s.send(`{"type":"disconnectPlayer","playerId":0,"reason":"bye"}`)
		p.expectClose(websocket.CloseInternalServerErr, "bye")
		s.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
		s.sync()
	}},

	{name: "no_streamer_closes_player", run: func(h *harness) {
		p := h.playerUp("P0", "/")
		p.send(`{"type":"listStreamers"}`)
		p.expectRaw(`{"type":"streamerList","ids":[]}`)
		p.send(`{"type":"answer","sdp":"v=0\r\n"}`)
		p.expectClose(websocket.CloseNoStatusReceived, "")
	}},

	{name: "bad_input", run: func(h *harness) {
		s := h.dialStreamer("S1", "/")
		s.expect("identify")
		s.expect("config")
		// Before endpointId: relays are dropped, ping is answered.
		s.send(`{"type":"offer","playerId":"Player0","sdp":"v=0\r\n"}`)
		s.send(`{"type":"ping","time":1}`)
		s.expectRaw(`{"type":"pong","time":1}`)
		// An id over MaxIDBytes is ignored: still unidentified.
		s.send(`{"type":"endpointId","id":"` + strings.Repeat("x", MaxIDBytes+1) + `"}`)
		s.send(`{"type":"endpointId","id":"A"}`)
		s.expectRaw(`{"type":"endpointIdConfirm","committedId":"A"}`)
		p := h.playerUp("P0", "/")
		p.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expect("playerConnected")
		for _, bad := range []string{`{"type":`, `null`, `[]`, `"offer"`, `42`, `{}`, `{"type":5}`, `{"type":null}`,
			`{"type":"stats","data":{}}`, `{"type":"playerCount"}`, `{"type":"subscribe"`, `{"type":"offer",}`} {
			s.send(bad)
			p.send(bad)
		}
		// Offer for an unknown player; disconnectPlayer for nobody.
		s.send(`{"type":"offer","playerId":"Player77","sdp":"v=0\r\n"}`)
		s.send(`{"type":"disconnectPlayer","playerId":"Player77"}`)
		s.send(`{"type":"offer","sdp":"v=0\r\n"}`)
		// Player-only and streamer-only types sent the wrong way are ignored.
		s.send(`{"type":"listStreamers"}`)
		p.send(`{"type":"disconnectPlayer","playerId":"Player0"}`)
		p.send(`{"type":"endpointId","id":"evil"}`)
		s.sync()
		p.sync()
		// Binary frames are ignored too.
		p.sendQuiet(websocket.BinaryMessage, []byte{1, 2, 3})
		p.sync()
		// Everything still works.
		s.send(`{"type":"offer","playerId":"Player0","sdp":"v=0\r\n"}`)
		p.expectRaw(`{"type":"offer","sdp":"v=0\r\n"}`)
	}},
}

// TestUEOfferUntouched relays a real-looking 4 KiB UE offer and a 200 KiB
// one byte for byte (less playerId).
func TestUEOfferUntouched(t *testing.T) {
	sdp, err := os.ReadFile("testdata/ue_offer.sdp")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Default(), Deps{})
	s := h.streamerUp("S1", "/", "A")
	p := h.playerUp("P0", "/")
	p.send(`{"type":"subscribe","streamerId":"A"}`)
	s.expect("playerConnected")
	for _, size := range []int{1, 50} {
		big := make([]byte, 0, len(sdp)*size)
		for range size {
			big = append(big, sdp...)
		}
		q, _ := json.Marshal(string(big))
		s.sendQuiet(websocket.TextMessage, []byte(`{"type":"offer","playerId":"Player0","sdp":`+string(q)+`,"multiplex":true}`))
		f := p.next()
		want := `{"type":"offer","sdp":` + string(q) + `,"multiplex":true}`
		if string(f.data) != want {
			t.Fatalf("size x%d: offer changed in transit (%d bytes, want %d)", size, len(f.data), len(want))
		}
	}
}
