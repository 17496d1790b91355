package streamer

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/pion/webrtc/v4"
	"go.uber.org/goleak"

	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/signalling"
	"github.com/oshun/egbe-edge/signalling/matchmaker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const failsafe = 20 * time.Second

func TestPatternH264(t *testing.T) {
	p, err := NewPatternH264(64, 32)
	if err != nil {
		t.Fatal(err)
	}
	f := p.Frame(3)
	nals := bytes.Split(f, []byte{0, 0, 0, 1})
	if len(nals) != 4 || len(nals[0]) != 0 {
		t.Fatalf("%d NAL units", len(nals)-1)
	}
	if nals[1][0] != nalSPS || nals[2][0] != nalPPS || nals[3][0] != nalIDR {
		t.Fatalf("NAL headers %#x %#x %#x", nals[1][0], nals[2][0], nals[3][0])
	}
	// SPS: profile 66, constraint 0xe0, level 31 = profile-level-id 42e01f.
	if !bytes.Equal(nals[1][1:4], []byte{0x42, 0xe0, 0x1f}) {
		t.Fatalf("SPS profile bytes % x", nals[1][1:4])
	}
	for i, n := range nals[1:] {
		// No start-code emulation inside a NAL unit (7.4.1).
		for j := 0; j+2 < len(n); j++ {
			if n[j] == 0 && n[j+1] == 0 && n[j+2] <= 2 {
				t.Fatalf("NAL %d: emulated start code at %d", i, j)
			}
		}
	}
	// 8 macroblocks of I_PCM: at least 8*384 sample bytes.
	if len(nals[3]) < 8*384 {
		t.Fatalf("IDR %d bytes", len(nals[3]))
	}
	if bytes.Equal(p.Frame(0), p.Frame(1)) {
		t.Fatal("pattern does not move")
	}
	if _, err := NewPatternH264(100, 16); err == nil {
		t.Fatal("accepted a width that is not a multiple of 16")
	}
}

func TestBitWriterExpGolomb(t *testing.T) {
	for _, tc := range []struct {
		v    int
		se   bool
		want string
	}{
		{0, false, "1"}, {1, false, "010"}, {2, false, "011"}, {3, false, "00100"}, {25, false, "000011010"},
		{0, true, "1"}, {1, true, "010"}, {-1, true, "011"}, {2, true, "00100"},
	} {
		var w bitWriter
		if tc.se {
			w.se(tc.v)
		} else {
			w.ue(tc.v)
		}
		var got strings.Builder
		for _, b := range w.buf {
			for i := 7; i >= 0; i-- {
				got.WriteByte('0' + (b>>i)&1)
			}
		}
		for i := uint(0); i < w.nbit; i++ {
			got.WriteByte('0' + (w.cur>>(7-i))&1)
		}
		if got.String() != tc.want {
			t.Errorf("v=%d se=%v: %s, want %s", tc.v, tc.se, got.String(), tc.want)
		}
	}
}

func testConfig(url, id string) Config {
	cfg := Default()
	cfg.URL, cfg.ID, cfg.POP = url, id, "us-east-1"
	cfg.IncludeLoopback = true
	cfg.MinBackoff, cfg.MaxBackoff = 20*time.Millisecond, 100*time.Millisecond
	cfg.FPS = 20
	return cfg
}

// TestStreamerPlaysToPionPlayer runs the real broker, the synthetic
// streamer and a pion player speaking Epic's player protocol, and checks
// H.264 frames arrive.
func TestStreamerPlaysToPionPlayer(t *testing.T) {
	srv, err := signalling.New(signalling.Default(), signalling.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	st := httptest.NewServer(srv.StreamerHandler())
	pl := httptest.NewServer(srv.PlayerHandler())
	defer func() { srv.Close(); st.Close(); pl.Close() }()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, testConfig("ws"+strings.TrimPrefix(st.URL, "http"), "Synth")) }()
	defer func() { cancel(); <-done }()
	testwait.For(t, "streamer registered", func() bool {
		s, ok := srv.Registry().Get("Synth")
		return ok && s.POP == "us-east-1" && len(s.Codecs) == 1 && s.Codecs[0] == "H264"
	})

	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(pl.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var wmu sync.Mutex
	send := func(v any) {
		wmu.Lock()
		defer wmu.Unlock()
		if err := ws.WriteJSON(v); err != nil {
			t.Error(err)
		}
	}
	var se webrtc.SettingEngine
	se.SetIncludeLoopbackCandidate(true)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	var me webrtc.MediaEngine
	if err := me.RegisterDefaultCodecs(); err != nil {
		t.Fatal(err)
	}
	pc, err := webrtc.NewAPI(webrtc.WithSettingEngine(se), webrtc.WithMediaEngine(&me)).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var frames atomic.Int64
	var dcOpen atomic.Bool
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		if !strings.EqualFold(tr.Codec().MimeType, webrtc.MimeTypeH264) {
			t.Errorf("track codec %s", tr.Codec().MimeType)
			return
		}
		for {
			p, _, err := tr.ReadRTP()
			if err != nil {
				return
			}
			if p.Marker {
				frames.Add(1)
			}
		}
	})
	pc.OnDataChannel(func(dc *webrtc.DataChannel) { dc.OnOpen(func() { dcOpen.Store(true) }) })
	pc.OnICECandidate(func(c *webrtc.ICECandidate) {
		if c != nil {
			send(map[string]any{"type": "iceCandidate", "candidate": c.ToJSON()})
		}
	})

	send(map[string]any{"type": "listStreamers"})
	send(map[string]any{"type": "subscribe", "streamerId": "Synth"})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		var offerSeen bool
		for {
			_, b, err := ws.ReadMessage()
			if err != nil {
				return
			}
			var m struct {
				Type      string                  `json:"type"`
				SDP       string                  `json:"sdp"`
				Candidate webrtc.ICECandidateInit `json:"candidate"`
				PlayerID  *string                 `json:"playerId"`
			}
			if err := json.Unmarshal(b, &m); err != nil {
				t.Error(err)
				return
			}
			switch m.Type {
			case "offer":
				offerSeen = true
				if m.PlayerID != nil {
					t.Error("offer reached the player with playerId")
				}
				if err := matchmaker.CheckOffer("H264", m.SDP); err != nil {
					t.Errorf("offer codec: %v", err)
				}
				if !strings.Contains(m.SDP, "a=sendonly") || !strings.Contains(m.SDP, "webrtc-datachannel") {
					t.Errorf("offer lacks sendonly video or data channel:\n%s", m.SDP)
				}
				if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: m.SDP}); err != nil {
					t.Error(err)
					return
				}
				ans, err := pc.CreateAnswer(nil)
				if err == nil {
					err = pc.SetLocalDescription(ans)
				}
				if err != nil {
					t.Error(err)
					return
				}
				send(map[string]any{"type": "answer", "sdp": ans.SDP})
			case "iceCandidate":
				if !offerSeen {
					t.Error("iceCandidate before offer")
				}
				if err := pc.AddICECandidate(m.Candidate); err != nil {
					t.Error(err)
				}
			}
		}
	}()
	testwait.For(t, "3 H.264 frames and an open data channel", func() bool { return frames.Load() >= 3 && dcOpen.Load() })
	ws.Close()
	<-readDone
}

// TestStreamerProtocolAndReconnect uses a scripted server: the first
// connection is dropped right after endpointId; the streamer must redial
// with the same registration query and identify again.
func TestStreamerProtocolAndReconnect(t *testing.T) {
	type hello struct {
		query string
		msg   map[string]any
	}
	got := make(chan hello, 4)
	var conns atomic.Int32
	up := websocket.Upgrader{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		n := conns.Add(1)
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"identify"}`))
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"config","peerConnectionOptions":{"iceServers":[{"urls":["stun:127.0.0.1:1"]}]},"protocolVersion":"1.3.0"}`))
		var m map[string]any
		if err := ws.ReadJSON(&m); err != nil {
			return
		}
		got <- hello{r.URL.RawQuery, m}
		if n == 1 {
			return // drop the first connection
		}
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"endpointIdConfirm","committedId":"Synth1"}`))
		// A player offer round: playerConnected with a numeric id.
		_ = ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"playerConnected","playerId":7,"dataChannel":true,"sfu":false}`))
		for {
			m = nil // a fresh map: the last one was handed to the test
			if err := ws.ReadJSON(&m); err != nil {
				return
			}
			if m["type"] == "offer" {
				got <- hello{"offer", m}
				break
			}
		}
		for { // hold until the streamer leaves
			if _, _, err := ws.ReadMessage(); err != nil {
				return
			}
		}
	}))
	defer ts.Close()

	identified := make(chan string, 2)
	cfg := testConfig("ws"+strings.TrimPrefix(ts.URL, "http")+"/streamer?x=1", "Synth")
	cfg.Codecs = []string{"H264", "AV1"}
	cfg.OnIdentified = func(id string) { identified <- id }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	defer func() { cancel(); <-done }()

	timeout := time.After(failsafe)
	for i := range 3 {
		var h hello
		select {
		case h = <-got:
		case <-timeout:
			t.Fatalf("step %d timed out", i)
		}
		if i < 2 {
			if h.query != "codecs=H264%2CAV1&pop=us-east-1&x=1" {
				t.Errorf("query %q", h.query)
			}
			if h.msg["type"] != "endpointId" || h.msg["id"] != "Synth" || h.msg["protocolVersion"] != ProtocolVersion {
				t.Errorf("hello %v", h.msg)
			}
			continue
		}
		if h.query != "offer" || h.msg["playerId"] != 7.0 || !strings.Contains(h.msg["sdp"].(string), "H264/90000") {
			t.Errorf("offer %v", h.msg)
		}
	}
	if id := <-identified; id != "Synth1" {
		t.Errorf("identified as %q", id)
	}
	if conns.Load() != 2 {
		t.Errorf("%d connections", conns.Load())
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"http url", func(c *Config) { c.URL = "http://x" }},
		{"no host", func(c *Config) { c.URL = "ws://" }},
		{"odd size", func(c *Config) { c.Width = 100 }},
		{"fps", func(c *Config) { c.FPS = 0 }},
		{"backoff", func(c *Config) { c.MaxBackoff = time.Millisecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mod(&c)
			if c.Validate() == nil {
				t.Fatal("accepted")
			}
		})
	}
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}
