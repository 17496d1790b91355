package pxsfu

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oshun/egbe-edge/internal/iceport"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/signalling/streamer"
)

// script is a scripted signalling server: the test plays Epic's server
// (and through it a streamer and players) towards the SFU, message by
// message, to send it what a real server would only relay from a
// misbehaving peer.
type script struct {
	t    *testing.T
	srv  *httptest.Server
	conn chan *websocket.Conn
	ws   *websocket.Conn
	in   chan map[string]any
}

func newScript(t *testing.T) *script {
	sc := &script{t: t, conn: make(chan *websocket.Conn, 4), in: make(chan map[string]any, 256)}
	up := websocket.Upgrader{}
	sc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err == nil {
			sc.conn <- ws
		}
	}))
	t.Cleanup(sc.srv.Close)
	return sc
}

// accept takes the SFU's connection and identifies it as Epic's server does.
func (sc *script) accept() {
	sc.t.Helper()
	select {
	case sc.ws = <-sc.conn:
	case <-time.After(failsafe):
		sc.t.Fatal("the SFU did not connect")
	}
	ws, in := sc.ws, sc.in
	go func() {
		for {
			var m map[string]any
			if ws.ReadJSON(&m) != nil {
				return
			}
			in <- m
		}
	}()
	sc.send(`{"type":"identify"}`)
	sc.send(`{"type":"config","peerConnectionOptions":{},"protocolVersion":"1.3.0"}`)
	sc.expect("endpointId")
	sc.expect("listStreamers")
	sc.send(`{"type":"endpointIdConfirm","committedId":"SFU"}`)
}

func (sc *script) send(raw string) {
	sc.t.Helper()
	if err := sc.ws.WriteMessage(websocket.TextMessage, []byte(raw)); err != nil {
		sc.t.Fatal(err)
	}
}

func (sc *script) sendJSON(v any) {
	sc.t.Helper()
	b, _ := json.Marshal(v)
	sc.send(string(b))
}

// expect returns the SFU's next message, which must be of type typ.
func (sc *script) expect(typ string) map[string]any {
	sc.t.Helper()
	select {
	case m := <-sc.in:
		if m["type"] != typ {
			sc.t.Fatalf("want %s from the SFU, got %v", typ, m)
		}
		return m
	case <-time.After(failsafe):
		sc.t.Fatalf("no %s from the SFU", typ)
	}
	return nil
}

// quiet checks the SFU sends nothing for d.
func (sc *script) quiet(d time.Duration) {
	sc.t.Helper()
	select {
	case m := <-sc.in:
		sc.t.Fatalf("unexpected message from the SFU: %v", m)
	case <-time.After(d):
	}
}

// pionStreamer is a streamer the test drives: one H.264 video track (the
// synthetic pattern, every frame a key frame), one Opus track and a data
// channel, offered without trickle.
type pionStreamer struct {
	pc    *webrtc.PeerConnection
	video *webrtc.TrackLocalStaticSample
	audio *webrtc.TrackLocalStaticRTP
	stop  context.CancelFunc
	done  chan struct{}
}

func newPionStreamer(t *testing.T) (*pionStreamer, string) {
	t.Helper()
	var se webrtc.SettingEngine
	se.SetIncludeLoopbackCandidate(true)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	api := webrtc.NewAPI(webrtc.WithSettingEngine(se))
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	ps := &pionStreamer{pc: pc, done: make(chan struct{})}
	ps.video, _ = webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
		SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"}, "video", "ue")
	ps.audio, _ = webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "audio", "ue")
	for _, tr := range []webrtc.TrackLocal{ps.video, ps.audio} {
		if _, err := pc.AddTransceiverFromTrack(tr, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pc.CreateDataChannel("datachannel", nil); err != nil {
		t.Fatal(err)
	}
	offer, _ := pc.CreateOffer(nil)
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		t.Fatal(err)
	}
	<-gathered
	ctx, cancel := context.WithCancel(context.Background())
	ps.stop = cancel
	go ps.pump(ctx)
	t.Cleanup(func() { cancel(); <-ps.done; _ = pc.Close() })
	return ps, pc.LocalDescription().SDP
}

func (ps *pionStreamer) pump(ctx context.Context) {
	defer close(ps.done)
	pattern, _ := streamer.NewPatternH264(64, 32)
	tick := time.NewTicker(40 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		_ = ps.video.WriteSample(media.Sample{Data: pattern.Frame(n), Duration: 40 * time.Millisecond})
		_ = ps.audio.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(n), Timestamp: uint32(n) * 1920},
			Payload: []byte{0xf8, 0xff, 0xfe}})
	}
}

// scriptPlayer is a pion player the test answers for.
type scriptPlayer struct {
	pc           *webrtc.PeerConnection
	video, audio atomic.Int64
}

func newScriptPlayer(t *testing.T, offer string) (*scriptPlayer, string) {
	t.Helper()
	pc, err := webrtc.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	p := &scriptPlayer{pc: pc}
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		n := &p.video
		if tr.Kind() == webrtc.RTPCodecTypeAudio {
			n = &p.audio
		}
		buf := make([]byte, 1500)
		for {
			if _, _, err := tr.Read(buf); err != nil {
				return
			}
			n.Add(1)
		}
	})
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: offer}); err != nil {
		t.Fatal(err)
	}
	answer, _ := pc.CreateAnswer(nil)
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(answer); err != nil {
		t.Fatal(err)
	}
	<-gathered
	return p, pc.LocalDescription().SDP
}

// TestBadInput: a malformed simulcast offer, a second streamer offer,
// messages about unknown players, garbage, and a player that never
// answers are each refused (typed, counted); the SFU keeps serving its
// streamer's audio and video to the player that did answer.
func TestBadInput(t *testing.T) {
	sc := newScript(t)
	port, err := iceport.Listen(iceport.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	prom := prometheus.NewRegistry()
	cfg := Default()
	cfg.URL = "ws" + strings.TrimPrefix(sc.srv.URL, "http")
	cfg.RetrySubscribe = 100 * time.Millisecond
	cfg.AnswerTimeout = time.Second
	f, err := New(cfg, Deps{Port: port, Registerer: prom})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	refusals := func(r string) float64 { return testutil.ToFloat64(f.met.refusals.WithLabelValues(r)) }

	sc.accept()
	sc.send(`{"type":"streamerList","ids":["SFU","DefaultStreamer"]}`)
	sc.expect("subscribe")
	ps, offer := newPionStreamer(t)

	// A malformed simulcast description: refused, not answered; the SFU
	// lists streamers again and subscribes anew.
	bad := strings.Replace(offer, "a=sendonly", "a=sendonly\r\na=simulcast:send hi;lo", 1)
	sc.sendJSON(map[string]any{"type": "offer", "sdp": bad})
	sc.expect("listStreamers")
	if refusals(refuseBadOffer) != 1 {
		t.Fatalf("bad offer refusals %v", refusals(refuseBadOffer))
	}
	sc.send(`{"type":"streamerList","ids":["DefaultStreamer"]}`)
	sc.expect("subscribe")
	// Not SDP at all, and an SSRC group naming an SSRC with no a=ssrc line.
	for _, sdp := range []string{"not sdp", strings.Replace(offer, "a=sendonly", "a=sendonly\r\na=ssrc-group:SIM 1 2", 1)} {
		sc.sendJSON(map[string]any{"type": "offer", "sdp": sdp})
		sc.expect("listStreamers")
		sc.send(`{"type":"streamerList","ids":["DefaultStreamer"]}`)
		sc.expect("subscribe")
	}
	if refusals(refuseBadOffer) != 3 {
		t.Fatalf("bad offer refusals %v", refusals(refuseBadOffer))
	}

	// The real offer is answered without trickle (ICE-lite candidates in
	// the SDP); startStreaming follows once the streamer's ICE is up.
	sc.sendJSON(map[string]any{"type": "offer", "sdp": offer})
	ans := sc.expect("answer")
	if sdp, _ := ans["sdp"].(string); !strings.Contains(sdp, "a=ice-lite") || !strings.Contains(sdp, "a=candidate:") {
		t.Fatalf("answer: %v", ans)
	}
	if err := ps.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: ans["sdp"].(string)}); err != nil {
		t.Fatal(err)
	}
	sc.expect("startStreaming")
	// A second offer: refused, the first streamer stays.
	sc.sendJSON(map[string]any{"type": "offer", "sdp": offer})

	// A player; its playerId arrives as a number, as UE may send it.
	sc.send(`{"type":"playerConnected","playerId":7,"dataChannel":true,"sfu":false}`)
	po := sc.expect("offer")
	if po["playerId"] != "7" || po["sfu"] != true || po["scalabilityMode"] != "L1T1" {
		t.Fatalf("player offer %v", po)
	}
	psdp := po["sdp"].(string)
	if !strings.Contains(psdp, "m=audio") || !strings.Contains(psdp, "m=video") || !strings.Contains(psdp, "m=application") ||
		strings.Contains(psdp, "probator") || !strings.Contains(psdp, "a=sendonly") {
		t.Fatalf("player offer SDP:\n%s", psdp)
	}
	player, answer := newScriptPlayer(t, psdp)
	sc.sendJSON(map[string]any{"type": "answer", "playerId": "7", "sdp": answer})

	// Garbage and messages about players the SFU does not have.
	for _, raw := range []string{`{"type":`, `null`, `[1,2]`, `{"type":"nonsense"}`,
		`{"type":"layerPreference","playerId":"Player404","spatialLayer":1,"temporalLayer":0}`,
		`{"type":"answer","playerId":"Player404","sdp":"v=0"}`,
		`{"type":"dataChannelRequest","playerId":"Player404"}`,
		`{"type":"peerDataChannelsReady","playerId":"Player404"}`,
		`{"type":"playerDisconnected","playerId":"Player404"}`,
		`{"type":"layerPreference","playerId":"7","spatialLayer":-5,"temporalLayer":9}`,
		`{"type":"layerPreference","playerId":"7","spatialLayer":99}`,
	} {
		sc.send(raw)
	}
	// A player that never answers is dropped after AnswerTimeout.
	sc.send(`{"type":"playerConnected","playerId":"Player8","dataChannel":true,"sfu":false}`)
	sc.expect("offer")
	testwait.Within(t, failsafe, "answer timeout", func() bool { return refusals(refuseAnswerTimeout) == 1 })
	if got := f.Players(); len(got) != 1 || got[0] != "7" {
		t.Fatalf("players %v", got)
	}
	// Its late answer is a refusal, not a crash.
	sc.send(`{"type":"answer","playerId":"Player8","sdp":"v=0"}`)

	// The answering player gets audio and video all along.
	v, a := player.video.Load(), player.audio.Load()
	testwait.Within(t, failsafe, "player 7's media", func() bool { return player.video.Load() > v+5 && player.audio.Load() > a+5 })
	if refusals(refuseSecondOffer) != 1 || refusals(refuseUnknownPlayer) < 5 || refusals(refuseBadMessage) < 2 {
		t.Fatalf("refusals: second offer %v, unknown player %v, bad message %v", refusals(refuseSecondOffer),
			refusals(refuseUnknownPlayer), refusals(refuseBadMessage))
	}

	// The streamer leaves: the SFU drops everything, sends stopStreaming,
	// and lists streamers again after RetrySubscribe.
	sc.send(`{"type":"streamerDisconnected"}`)
	sc.expect("stopStreaming")
	sc.expect("listStreamers")
	testwait.Within(t, failsafe, "players dropped", func() bool { return len(f.Players()) == 0 })
	// A late playerDisconnected for a player it already dropped (Epic's
	// SFU throws here).
	sc.send(`{"type":"playerDisconnected","playerId":"7"}`)
	sc.send(`{"type":"streamerList","ids":["DefaultStreamer"]}`)
	sc.expect("subscribe")

	// The signalling socket drops: the SFU reconnects and identifies again.
	_ = sc.ws.Close()
	sc.accept()
}
