package signalling

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oshun/egbe-edge/auth"
)

// The SFU role's transcripts (PIXEL_STREAMING_SFU.md sections 1, 2 and 6):
// scripted SFU (F*), streamer (S*) and player (P*) sockets against the
// edge's three ports; testdata/transcript_sfu_<name>.golden.

func TestSFUTranscripts(t *testing.T) {
	for _, sc := range sfuScenarios {
		t.Run(sc.name, func(t *testing.T) {
			cfg := Default()
			if sc.cfg != nil {
				sc.cfg(&cfg)
			}
			h := newHarness(t, cfg, Deps{})
			sc.run(h)
			checkGolden(t, "transcript_sfu_"+sc.name, h.tr.String())
		})
	}
}

// sfuUp connects an SFU as Epic's does: endpointId and listStreamers on
// identify.
func (h *harness) sfuUp(name, id string) *client {
	h.t.Helper()
	f := h.dialSFU(name, "/")
	f.expectRaw(`{"type":"identify"}`)
	f.expect("config")
	f.send(`{"type":"endpointId","id":"` + id + `"}`)
	f.send(`{"type":"listStreamers"}`)
	f.expectRaw(`{"type":"endpointIdConfirm","committedId":"` + id + `"}`)
	f.expect("streamerList")
	return f
}

// sfuSubscribed connects a streamer A and an SFU "SFU" subscribed to it;
// the SFU is Player0 (the first id of the shared counter).
func (h *harness) sfuSubscribed() (s, f *client) {
	h.t.Helper()
	s = h.streamerUp("S1", "/", "A")
	f = h.sfuUp("F", "SFU")
	f.send(`{"type":"subscribe","streamerId":"A"}`)
	s.expectRaw(`{"type":"playerConnected","playerId":"Player0","dataChannel":true,"sfu":true}`)
	return s, f
}

// sfuPlayer subscribes a new player to the SFU and returns it.
func (h *harness) sfuPlayer(name string, f *client, pid string) *client {
	h.t.Helper()
	p := h.playerUp(name, "/")
	p.send(`{"type":"subscribe","streamerId":"SFU"}`)
	f.expectRaw(`{"type":"playerConnected","playerId":"` + pid + `","dataChannel":true,"sfu":false}`)
	return p
}

var sfuScenarios = []scenario{
	{name: "session", run: func(h *harness) {
		// A streamer A, and one that never identifies (not registered).
		s := h.streamerUp("S1", "/", "A")
		s2 := h.dialStreamer("S2", "/")
		s2.expect("identify")
		s2.expect("config")
		p0 := h.playerUp("P0", "/")
		// SFU: identify then config, like a streamer.
		f := h.dialSFU("F", "/")
		f.expectRaw(`{"type":"identify"}`)
		f.expectRaw(`{"type":"config","peerConnectionOptions":{},"protocolVersion":"1.3.0"}`)
		// Before its endpointId the SFU holds "UnknownStreamer" and is not
		// listed to players.
		p0.send(`{"type":"listStreamers"}`)
		p0.expectRaw(`{"type":"streamerList","ids":["A"]}`)
		f.send(`{"type":"listStreamers"}`)
		f.expectRaw(`{"type":"streamerList","ids":["A","UnknownStreamer"]}`)
		f.send(`{"type":"endpointId","id":"SFU"}`)
		f.send(`{"type":"listStreamers"}`)
		f.expectRaw(`{"type":"endpointIdConfirm","committedId":"SFU"}`)
		// Unfiltered: itself included.
		f.expectRaw(`{"type":"streamerList","ids":["A","SFU"]}`)
		// Listed to players as soon as it is named, before any media.
		p0.send(`{"type":"listStreamers"}`)
		p0.expectRaw(`{"type":"streamerList","ids":["A","SFU"]}`)

		// The SFU subscribes as a player (id Player1 from the shared
		// counter) with sfu:true.
		f.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expectRaw(`{"type":"playerConnected","playerId":"Player1","dataChannel":true,"sfu":true}`)
		s.send(`{"type":"offer","playerId":"Player1","sdp":"v=0\r\nsim\r\n","multiplex":false,"scalabilityMode":"L1T1"}`)
		s.send(`{"type":"iceCandidate","playerId":"Player1","candidate":{"candidate":"candidate:1 1 udp 1 10.0.0.5 5000 typ host","sdpMid":"0","sdpMLineIndex":0}}`)
		f.expectRaw(`{"type":"offer","sdp":"v=0\r\nsim\r\n","multiplex":false,"scalabilityMode":"L1T1"}`)
		f.expectRaw(`{"type":"iceCandidate","candidate":{"candidate":"candidate:1 1 udp 1 10.0.0.5 5000 typ host","sdpMid":"0","sdpMLineIndex":0}}`)
		// No trickle from the SFU: its candidates are dropped.
		f.send(`{"type":"iceCandidate","candidate":{"candidate":"candidate:9 1 udp 1 10.0.0.6 40000 typ host","sdpMid":"0","sdpMLineIndex":0}}`)
		f.send(`{"type":"answer","sdp":"v=0\r\nlite\r\n"}`)
		s.expectRaw(`{"type":"answer","sdp":"v=0\r\nlite\r\n","playerId":"Player1"}`)
		f.send(`{"type":"startStreaming"}`)

		// A player subscribes to the SFU; the upstream streamer hears nothing.
		p0.send(`{"type":"subscribe","streamerId":"SFU"}`)
		f.expectRaw(`{"type":"playerConnected","playerId":"Player0","dataChannel":true,"sfu":false}`)
		f.send(`{"type":"offer","playerId":"Player0","sdp":"v=0\r\nsfu\r\n","sfu":true,"scalabilityMode":"L1T1"}`)
		p0.expectRaw(`{"type":"offer","sdp":"v=0\r\nsfu\r\n","sfu":true,"scalabilityMode":"L1T1"}`)
		// Epic's frontend: layerPreference before its answer, then
		// dataChannelRequest; its candidates trickle to the SFU.
		p0.send(`{"type":"layerPreference","spatialLayer":2,"temporalLayer":0,"playerId":""}`)
		p0.send(`{"type":"answer","sdp":"v=0\r\nbrowser\r\n","minBitrateBps":0,"maxBitrateBps":0}`)
		p0.send(`{"type":"dataChannelRequest"}`)
		p0.send(`{"type":"iceCandidate","candidate":{"candidate":"candidate:3 1 udp 1 192.168.1.9 61000 typ host","sdpMid":"0","sdpMLineIndex":0}}`)
		f.expectRaw(`{"type":"layerPreference","spatialLayer":2,"temporalLayer":0,"playerId":"Player0"}`)
		f.expectRaw(`{"type":"answer","sdp":"v=0\r\nbrowser\r\n","minBitrateBps":0,"maxBitrateBps":0,"playerId":"Player0"}`)
		f.expectRaw(`{"type":"dataChannelRequest","playerId":"Player0"}`)
		f.expectRaw(`{"type":"iceCandidate","candidate":{"candidate":"candidate:3 1 udp 1 192.168.1.9 61000 typ host","sdpMid":"0","sdpMLineIndex":0},"playerId":"Player0"}`)
		f.send(`{"type":"peerDataChannels","playerId":"Player0","sendStreamId":2,"recvStreamId":3}`)
		p0.expectRaw(`{"type":"peerDataChannels","sendStreamId":2,"recvStreamId":3}`)
		p0.send(`{"type":"peerDataChannelsReady"}`)
		f.expectRaw(`{"type":"peerDataChannelsReady","playerId":"Player0"}`)
		// Non-multiplexed: the streamer gets the player's channels, with
		// sfuId naming the SFU's player id.
		f.send(`{"type":"streamerDataChannels","playerId":"Player0","sendStreamId":4,"recvStreamId":5}`)
		s.expectRaw(`{"type":"streamerDataChannels","playerId":"Player0","sendStreamId":4,"recvStreamId":5,"sfuId":"Player1"}`)
		// A layerPreference sent by the streamer reaches the SFU unchanged.
		s.send(`{"type":"layerPreference","playerId":"Player0","spatialLayer":0,"temporalLayer":0}`)
		f.expectRaw(`{"type":"layerPreference","playerId":"Player0","spatialLayer":0,"temporalLayer":0}`)
		f.send(`{"type":"ping","time":5}`)
		f.expectRaw(`{"type":"pong","time":5}`)
		// The player leaves: the SFU hears of it, the streamer does not.
		p0.hangUp()
		f.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
		s.sync()
		f.sync()
		s2.sync()
	}},

	{name: "unsubscribe_and_resubscribe", run: func(h *harness) {
		s, f := h.sfuSubscribed()
		p := h.sfuPlayer("P1", f, "Player1")
		p.send(`{"type":"unsubscribe"}`)
		f.expectRaw(`{"type":"playerDisconnected","playerId":"Player1"}`)
		// The SFU unsubscribes and subscribes again.
		f.send(`{"type":"unsubscribe"}`)
		s.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
		f.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expectRaw(`{"type":"playerConnected","playerId":"Player0","dataChannel":true,"sfu":true}`)
		// Subscribing while subscribed leaves the old subscription first.
		f.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
		s.expectRaw(`{"type":"playerConnected","playerId":"Player0","dataChannel":true,"sfu":true}`)
		// An unknown id gets no reply, and the subscription stays.
		f.send(`{"type":"subscribe","streamerId":"nope"}`)
		f.send(`{"type":"subscribe","streamerId":"SFU"}`)
		f.sync()
		s.send(`{"type":"offer","playerId":"Player0","sdp":"v=0\r\n"}`)
		f.expectRaw(`{"type":"offer","sdp":"v=0\r\n"}`)
		for _, c := range []*client{s, f, p} {
			c.sync()
		}
	}},

	{name: "max_players", cfg: func(c *Config) { c.MaxPlayers = 1 }, run: func(h *harness) {
		// --max-players 1: the SFU does not take the streamer's one seat,
		// and does not count its own players against it.
		s, f := h.sfuSubscribed()
		direct := h.playerUp("P1", "/")
		direct.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expectRaw(`{"type":"playerConnected","playerId":"Player1","dataChannel":true,"sfu":false}`)
		full := h.playerUp("P2", "/")
		full.send(`{"type":"subscribe","streamerId":"A"}`)
		full.expectRaw(`{"type":"subscribeFailed","message":"Streamer A is full. Max players = 1."}`)
		p3 := h.sfuPlayer("P3", f, "Player3")
		p4 := h.sfuPlayer("P4", f, "Player4")
		p5 := h.sfuPlayer("P5", f, "Player5")
		for _, c := range []*client{s, f, direct, full, p3, p4, p5} {
			c.sync()
		}
	}},

	{name: "streamer_leaves", run: func(h *harness) {
		// Section 6: the upstream streamer leaves under an SFU with players.
		s, f := h.sfuSubscribed()
		other := h.streamerUp("S2", "/", "B")
		p1 := h.sfuPlayer("P1", f, "Player1")
		p2 := h.sfuPlayer("P2", f, "Player2")
		direct := h.playerUp("P3", "/")
		direct.send(`{"type":"subscribe","streamerId":"B"}`)
		other.expect("playerConnected")
		s.hangUp()
		// The SFU first hears streamerDisconnected, then playerDisconnected
		// for each of its players, whose sockets close with no message.
		f.expectRaw(`{"type":"streamerDisconnected"}`)
		f.expectRaw(`{"type":"playerDisconnected","playerId":"Player1"}`)
		f.expectRaw(`{"type":"playerDisconnected","playerId":"Player2"}`)
		p1.expectClose(websocket.CloseNoStatusReceived, "")
		p2.expectClose(websocket.CloseNoStatusReceived, "")
		// It is no longer listed to players; it still lists itself.
		direct.send(`{"type":"listStreamers"}`)
		direct.expectRaw(`{"type":"streamerList","ids":["B"]}`)
		// The SFU cleans up (stopStreaming: nobody left to drop) and
		// resubscribes, to another streamer this time.
		f.send(`{"type":"stopStreaming"}`)
		f.send(`{"type":"listStreamers"}`)
		f.expectRaw(`{"type":"streamerList","ids":["B","SFU"]}`)
		f.send(`{"type":"subscribe","streamerId":"B"}`)
		other.expectRaw(`{"type":"playerConnected","playerId":"Player0","dataChannel":true,"sfu":true}`)
		f.send(`{"type":"startStreaming"}`)
		f.sync()
		direct.send(`{"type":"listStreamers"}`)
		direct.expectRaw(`{"type":"streamerList","ids":["B","SFU"]}`)
		other.sync()
		direct.sync()
	}},

	{name: "sfu_leaves", run: func(h *harness) {
		// Section 6: the SFU leaves. The streamer hears playerDisconnected
		// for the SFU's player id; its players close with no message.
		s, f := h.sfuSubscribed()
		p1 := h.sfuPlayer("P1", f, "Player1")
		p2 := h.sfuPlayer("P2", f, "Player2")
		f.hangUp()
		s.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
		p1.expectClose(websocket.CloseNoStatusReceived, "")
		p2.expectClose(websocket.CloseNoStatusReceived, "")
		p3 := h.playerUp("P3", "/")
		p3.send(`{"type":"listStreamers"}`)
		p3.expectRaw(`{"type":"streamerList","ids":["A"]}`)
		p3.send(`{"type":"subscribe","streamerId":"SFU"}`)
		p3.expectRaw(`{"type":"subscribeFailed","message":"Streamer SFU does not exist."}`)
		// It reconnects (a new player id) and subscribes again.
		f2 := h.sfuUp("F2", "SFU")
		f2.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expectRaw(`{"type":"playerConnected","playerId":"Player4","dataChannel":true,"sfu":true}`)
		s.sync()
		f2.sync()
	}},

	{name: "stop_streaming", run: func(h *harness) {
		// stopStreaming drops the SFU's players (playerDisconnected for each
		// first) and unlists it; its upstream subscription stays.
		s, f := h.sfuSubscribed()
		p1 := h.sfuPlayer("P1", f, "Player1")
		p2 := h.sfuPlayer("P2", f, "Player2")
		f.send(`{"type":"stopStreaming"}`)
		f.expectRaw(`{"type":"playerDisconnected","playerId":"Player1"}`)
		f.expectRaw(`{"type":"playerDisconnected","playerId":"Player2"}`)
		p1.expectClose(websocket.CloseNoStatusReceived, "")
		p2.expectClose(websocket.CloseNoStatusReceived, "")
		p3 := h.playerUp("P3", "/")
		p3.send(`{"type":"listStreamers"}`)
		p3.expectRaw(`{"type":"streamerList","ids":["A"]}`)
		f.send(`{"type":"answer","sdp":"v=0\r\nstill subscribed\r\n"}`)
		s.expectRaw(`{"type":"answer","sdp":"v=0\r\nstill subscribed\r\n","playerId":"Player0"}`)
		f.send(`{"type":"startStreaming"}`)
		f.sync()
		p3.send(`{"type":"listStreamers"}`)
		p3.expectRaw(`{"type":"streamerList","ids":["A","SFU"]}`)
		s.sync()
	}},

	{name: "renames", run: func(h *harness) {
		s, f := h.sfuSubscribed()
		p := h.sfuPlayer("P1", f, "Player1")
		// The upstream streamer renames: the SFU (one of its players) hears it.
		s.send(`{"type":"endpointId","id":"A2"}`)
		f.expectRaw(`{"type":"streamerIdChanged","newID":"A2"}`)
		s.expectRaw(`{"type":"endpointIdConfirm","committedId":"A2"}`)
		// The SFU renames: its players hear it; a taken id is suffixed.
		f.send(`{"type":"endpointId","id":"A2"}`)
		p.expectRaw(`{"type":"streamerIdChanged","newID":"A3"}`)
		f.expectRaw(`{"type":"endpointIdConfirm","committedId":"A3"}`)
		p.send(`{"type":"listStreamers"}`)
		p.expectRaw(`{"type":"streamerList","ids":["A2","A3"]}`)
		// A streamer asking for an SFU's id is suffixed too.
		s2 := h.streamerUp("S2", "/", "A3")
		p.send(`{"type":"listStreamers"}`)
		p.expectRaw(`{"type":"streamerList","ids":["A2","A4","A3"]}`)
		for _, c := range []*client{s, f, p, s2} {
			c.sync()
		}
	}},

	{name: "bad_input", run: func(h *harness) {
		f := h.sfuUp("F", "SFU")
		// Unsubscribed: relays towards a streamer are dropped; ping works.
		f.send(`{"type":"answer","sdp":"v=0\r\n"}`)
		f.send(`{"type":"streamerDataChannels","playerId":"Player9","sendStreamId":1,"recvStreamId":2}`)
		f.send(`{"type":"unsubscribe"}`)
		// Relays for players it does not have.
		f.send(`{"type":"offer","playerId":"Player9","sdp":"v=0\r\n","sfu":true}`)
		f.send(`{"type":"peerDataChannels","playerId":"Player9","sendStreamId":1,"recvStreamId":2}`)
		f.send(`{"type":"offer","sdp":"v=0\r\n"}`)
		// Types the SFU may not send, and garbage.
		for _, bad := range []string{`{"type":"disconnectPlayer","playerId":"Player9"}`, `{"type":"iceCandidate","candidate":{}}`,
			`{"type":"dataChannelRequest"}`, `{"type":"layerPreference","spatialLayer":1}`, `{"type":`, `null`, `[]`, `{}`,
			`{"type":"subscribe"}`, `{"type":"subscribe","streamerId":7}`} {
			f.send(bad)
		}
		f.sync()
		s := h.streamerUp("S1", "/", "A")
		f.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expectRaw(`{"type":"playerConnected","playerId":"Player0","dataChannel":true,"sfu":true}`)
		// A player that is not the SFU's cannot be reached through it.
		p := h.playerUp("P1", "/")
		p.send(`{"type":"subscribe","streamerId":"A"}`)
		s.expect("playerConnected")
		f.send(`{"type":"offer","playerId":"Player1","sdp":"v=0\r\nhijack\r\n"}`)
		p.sync()
		// A layerPreference from a streamer with no SFU is dropped.
		s2 := h.streamerUp("S2", "/", "B")
		s2.send(`{"type":"layerPreference","playerId":"Player1","spatialLayer":0}`)
		for _, c := range []*client{s, s2, f, p} {
			c.sync()
		}
	}},
}

// TestSFUTokenMode: in token mode the SFU port takes only SFU tokens; the
// SFU can register only its token's id and subscribe only to its token's
// upstream, and a session naming the SFU subscribes without a lease.
func TestSFUTokenMode(t *testing.T) {
	h, signer, _ := tokenHarness(t, nil)
	sfuTok := func(id, upstream string) string {
		tok, err := signer.IssueSFU(auth.SFU{SFUID: id, Upstream: upstream}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return "/?token=" + url.QueryEscape(tok)
	}
	s := h.streamerUp("S1", streamerToken(t, signer, "A", "eu-west-1", "H264"), "A")
	h.streamerUp("S2", streamerToken(t, signer, "B", "eu-west-1", "H264"), "B")

	// A streamer token, or none, does not open the SFU port.
	for _, q := range []string{"/", streamerToken(t, signer, "SFU", "eu-west-1")} {
		bad := h.dialSFU("bad", q)
		bad.expectClose(websocket.ClosePolicyViolation, "invalid token")
	}
	// Another id than the token's is refused.
	f0 := h.dialSFU("F0", sfuTok("SFU", ""))
	f0.expect("identify")
	f0.expect("config")
	f0.send(`{"type":"endpointId","id":"Other"}`)
	f0.expectClose(websocket.ClosePolicyViolation, "sfu token is for SFU")

	f := h.dialSFU("F", sfuTok("SFU", "A"))
	f.expect("identify")
	f.expect("config")
	f.send(`{"type":"endpointId","id":"SFU"}`)
	f.expectRaw(`{"type":"endpointIdConfirm","committedId":"SFU"}`)
	// Only its token's upstream: B is ignored, A subscribes.
	f.send(`{"type":"subscribe","streamerId":"B"}`)
	f.sync()
	f.send(`{"type":"subscribe","streamerId":"A"}`)
	s.expect("playerConnected")

	// A session naming the SFU sees only it, and subscribes.
	p := h.dialPlayer("P", sessionToken(t, signer, "sess-1", "SFU"))
	p.expect("config")
	p.send(`{"type":"listStreamers"}`)
	p.expectRaw(`{"type":"streamerList","ids":["SFU"]}`)
	p.send(`{"type":"subscribe","streamerId":"SFU"}`)
	m := f.expect("playerConnected")
	if m["sfu"] != false {
		t.Fatalf("player of the SFU: %v", m)
	}
	// A session naming streamer A cannot subscribe to the SFU.
	q := h.dialPlayer("Q", sessionToken(t, signer, "sess-2", "A"))
	q.expect("config")
	q.send(`{"type":"subscribe","streamerId":"SFU"}`)
	q.expectRaw(`{"type":"subscribeFailed","message":"Streamer SFU is not leased to this session."}`)
	// The SFU is not in the matchmaker's registry; A counts as streaming.
	if _, ok := h.srv.Registry().Get("SFU"); ok {
		t.Fatal("SFU registered as a streamer")
	}
	if a, _ := h.srv.Registry().Get("A"); a.State != StateStreaming || a.Players != 1 {
		t.Fatalf("A: %+v", a)
	}
	if got := testutil.ToFloat64(h.srv.met.sfus); got != 1 {
		t.Fatalf("egbe_pxstream_sfus_connected = %v", got)
	}
}

// TestSFUSendQueue: an SFU's socket carries every one of its players'
// signalling, so it has its own, larger queue (SFUSendQueue): with a
// per-socket queue of 4, twenty players dropped at once reach the SFU as
// twenty playerDisconnected instead of closing it as a slow consumer.
func TestSFUSendQueue(t *testing.T) {
	cfg := Default()
	cfg.SendQueue = 4
	h := newHarness(t, cfg, Deps{})
	_, f := h.sfuSubscribed()
	var ps []*client
	for i := range 20 {
		ps = append(ps, h.sfuPlayer(fmt.Sprintf("P%d", i), f, fmt.Sprintf("Player%d", i+1)))
	}
	f.send(`{"type":"stopStreaming"}`)
	for i := range 20 {
		f.expectRaw(fmt.Sprintf(`{"type":"playerDisconnected","playerId":"Player%d"}`, i+1))
	}
	for _, p := range ps {
		p.expectClose(websocket.CloseNoStatusReceived, "")
	}
	f.sync()
}
