package sfu

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/report"
	"github.com/pion/rtp"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/iceport"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// testSessions is a map-backed Sessions.
type testSessions struct {
	mu sync.Mutex
	m  map[string]SessionInfo
}

func (t *testSessions) VoiceSession(id string) (SessionInfo, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	si, ok := t.m[id]
	return si, ok
}

// testNotifier records voice events.
type testNotifier struct {
	mu  sync.Mutex
	evs map[string][]*codec.VoiceEvent
}

func (n *testNotifier) SendVoiceEvent(id string, ev *codec.VoiceEvent) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.evs[id] = append(n.evs[id], ev)
	return true
}

func (n *testNotifier) last(id string) *codec.VoiceEvent {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e := n.evs[id]; len(e) > 0 {
		return e[len(e)-1]
	}
	return nil
}

type testEnv struct {
	t        testing.TB
	sfu      *SFU
	signer   *auth.Signer
	sessions *testSessions
	notes    *testNotifier
	reg      *prometheus.Registry
	srv      *httptest.Server
	port     *iceport.Port
}

func newEnv(t testing.TB, mod func(*Config)) *testEnv {
	t.Helper()
	return newEnvDeps(t, mod, nil)
}

// newEnvDeps is newEnv with a hook on the SFU's Deps.
func newEnvDeps(t testing.TB, mod func(*Config), deps func(*Deps)) *testEnv {
	t.Helper()
	cfg := Default()
	cfg.StatsInterval = 500 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	port, err := iceport.Listen(iceport.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	signer, err := auth.New([]byte("0123456789abcdef0123456789abcdef"), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{t: t, signer: signer, port: port, reg: prometheus.NewRegistry(),
		sessions: &testSessions{m: map[string]SessionInfo{}},
		notes:    &testNotifier{evs: map[string][]*codec.VoiceEvent{}}}
	d := Deps{Port: port, Signer: signer, Sessions: e.sessions, Notifier: e.notes, Registerer: e.reg}
	if deps != nil {
		deps(&d)
	}
	e.sfu, err = New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.sfu.Run(ctx) }()
	e.srv = httptest.NewServer(e.sfu.Handler())
	t.Cleanup(func() {
		e.srv.Close()
		cancel()
		<-done
		_ = e.sfu.Close()
		_ = port.Close()
	})
	return e
}

// session registers a realtime session and returns an access token for it.
func (e *testEnv) session(id, subject, room string, entity uint32, acc auth.Access) string {
	e.t.Helper()
	e.sessions.mu.Lock()
	e.sessions.m[id] = SessionInfo{Subject: subject, InstanceID: room, EntityID: entity, Region: "eu"}
	e.sessions.mu.Unlock()
	acc.Subject = subject
	tok, err := e.signer.IssueAccess(acc, time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

func (e *testEnv) post(tok string, body any) (*http.Response, []byte) {
	e.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/v6/voice/session", bytes.NewReader(b))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp, buf.Bytes()
}

// recv is what a client received from one slot track.
type recvPkt struct {
	seq     uint16
	ts      uint32
	speaker byte
	marker  bool
}

// client is a Go pion voice client: a microphone track (payload byte 0 =
// its speaker id) and K recvonly slots.
type client struct {
	t        testing.TB
	id       byte
	pc       *webrtc.PeerConnection
	mic      *rawTrack
	peerID   string
	stopRead atomic.Bool
	level    atomic.Int32 // RFC 6464 level sent (0 loudest .. 127 silent)

	mu     sync.Mutex
	counts map[byte]int         // packets received per speaker
	bytes  map[byte]int         // payload bytes received per speaker
	tracks map[uint32][]recvPkt // per slot SSRC

	stop chan struct{}
	wg   sync.WaitGroup
}

// rawTrack is a TrackLocal that writes raw headers (any SSRC).
type rawTrack struct {
	id    string
	bound atomic.Pointer[binding]
	extID atomic.Uint32
}

func (t *rawTrack) Bind(ctx webrtc.TrackLocalContext) (webrtc.RTPCodecParameters, error) {
	for _, h := range ctx.HeaderExtensions() {
		if h.URI == sdp.AudioLevelURI {
			t.extID.Store(uint32(h.ID))
		}
	}
	c := ctx.CodecParameters()[0]
	t.bound.Store(&binding{w: ctx.WriteStream(), ssrc: uint32(ctx.SSRC()), pt: uint8(c.PayloadType)})
	return c, nil
}
func (t *rawTrack) Unbind(webrtc.TrackLocalContext) error { return nil }
func (t *rawTrack) ID() string                            { return t.id }
func (t *rawTrack) RID() string                           { return "" }
func (t *rawTrack) StreamID() string                      { return "mic-" + t.id }
func (t *rawTrack) Kind() webrtc.RTPCodecType             { return webrtc.RTPCodecTypeAudio }

// browserLike makes clientAPI's clients send RTCP and ICE consent checks
// at a browser's intervals rather than pion's defaults (set in the
// benchmark receiver process, browserEnv).
var browserLike bool

// quietClients: clients send no RTCP and rare consent checks (quietEnv).
var quietClients bool

func clientAPI(t testing.TB, opus bool) *webrtc.API {
	me := &webrtc.MediaEngine{}
	c := webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}
	pt := webrtc.PayloadType(111)
	if !opus {
		c = webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1}
		pt = 0
	}
	if err := me.RegisterCodec(webrtc.RTPCodecParameters{RTPCodecCapability: c, PayloadType: pt}, webrtc.RTPCodecTypeAudio); err != nil {
		t.Fatal(err)
	}
	if err := me.RegisterHeaderExtension(webrtc.RTPHeaderExtensionCapability{URI: sdp.AudioLevelURI}, webrtc.RTPCodecTypeAudio); err != nil {
		t.Fatal(err)
	}
	ir := &interceptor.Registry{}
	var se webrtc.SettingEngine
	if quietClients {
		// No RTCP, and a consent check every 10 s (the edge's ICE
		// marks a client disconnected after 12 s without a packet): the
		// allocation test's measuring process sees as little background
		// as a real client allows.
		se.SetICETimeouts(30*time.Second, 30*time.Second, 10*time.Second)
	} else if browserLike {
		// What Chrome sends: RTCP on audio every 5 s, a consent check
		// on the selected pair every 2.5 s.
		rr, err := report.NewReceiverInterceptor(report.ReceiverInterval(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		sr, err := report.NewSenderInterceptor(report.SenderInterval(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ir.Add(rr)
		ir.Add(sr)
		se.SetICETimeouts(5*time.Second, 25*time.Second, 2500*time.Millisecond)
	} else if err := webrtc.ConfigureRTCPReports(ir); err != nil { // receiver reports -> SFU RTT
		t.Fatal(err)
	}
	se.SetIncludeLoopbackCandidate(true)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetInterfaceFilter(func(name string) bool { return name == "lo" })
	return webrtc.NewAPI(webrtc.WithMediaEngine(me), webrtc.WithSettingEngine(se), webrtc.WithInterceptorRegistry(ir))
}

// offer builds a client PeerConnection and its complete offer.
func newClient(t testing.TB, id byte, slots int, opus bool) (*client, string) {
	t.Helper()
	return newClientAPI(t, id, slots, clientAPI(t, opus))
}

// newClientAPI is newClient on a given pion API.
func newClientAPI(t testing.TB, id byte, slots int, api *webrtc.API) (*client, string) {
	t.Helper()
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, id: id, pc: pc, mic: &rawTrack{id: fmt.Sprint("mic", id)},
		counts: map[byte]int{}, bytes: map[byte]int{}, tracks: map[uint32][]recvPkt{}, stop: make(chan struct{})}
	c.level.Store(30)
	if _, err := pc.AddTransceiverFromTrack(c.mic, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendrecv}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < slots; i++ {
		if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeAudio, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
			t.Fatal(err)
		}
	}
	pc.OnTrack(func(tr *webrtc.TrackRemote, rc *webrtc.RTPReceiver) {
		c.wg.Add(2)
		defer c.wg.Done()
		go func() { // RTCP in: sender reports, so receiver reports carry LSR/DLSR
			defer c.wg.Done()
			buf := make([]byte, 1500)
			for {
				if _, _, err := rc.Read(buf); err != nil {
					return
				}
			}
		}()
		for {
			if c.stopRead.Load() {
				<-c.stop // a stalled listener: stops reading for good
				return
			}
			p, _, err := tr.ReadRTP()
			if err != nil {
				return
			}
			if len(p.Payload) == 0 {
				continue
			}
			c.mu.Lock()
			c.counts[p.Payload[0]]++
			c.bytes[p.Payload[0]] += len(p.Payload)
			c.tracks[p.SSRC] = append(c.tracks[p.SSRC], recvPkt{p.SequenceNumber, p.Timestamp, p.Payload[0], p.Marker})
			c.mu.Unlock()
		}
	})
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	g := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		t.Fatal(err)
	}
	<-g
	t.Cleanup(c.close)
	return c, pc.LocalDescription().SDP
}

func (c *client) close() {
	select {
	case <-c.stop:
		return
	default:
	}
	close(c.stop)
	_ = c.pc.Close()
	c.wg.Wait()
}

// join creates a client, joins voice and starts sending 20 ms frames.
func (e *testEnv) join(tok, sessionID string, id byte, slots int) *client {
	e.t.Helper()
	c, offer := newClient(e.t, id, slots, true)
	e.joinClient(tok, sessionID, c, offer)
	return c
}

// joinClient joins c with its offer and starts its microphone; it
// returns the answer.
func (e *testEnv) joinClient(tok, sessionID string, c *client, offer string) string {
	e.t.Helper()
	resp, body := e.post(tok, JoinRequest{SessionID: sessionID, SDP: offer})
	if resp.StatusCode != http.StatusCreated {
		e.t.Fatalf("join %s: %d %s", sessionID, resp.StatusCode, body)
	}
	var jr JoinResponse
	if err := json.Unmarshal(body, &jr); err != nil {
		e.t.Fatal(err)
	}
	c.peerID = jr.VoicePeerID
	if err := c.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: jr.SDP}); err != nil {
		e.t.Fatal(err)
	}
	c.wg.Add(1)
	go c.send(0)
	return jr.SDP
}

// send writes one Opus-sized frame every 20 ms until stopped. bogusSSRC,
// when set, is used on every other packet (payload byte 0xEE).
func (c *client) send(bogusSSRC uint32) {
	defer c.wg.Done()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var seq uint16 = 1000 * uint16(c.id)
	ts := uint32(c.id) * 1_000_000
	payload := make([]byte, 60)
	bogus := make([]byte, 60)
	bogus[0] = 0xEE
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		b := c.mic.bound.Load()
		if b == nil {
			continue
		}
		seq++
		ts += opusFrame
		payload[0] = c.id
		h := rtp.Header{Version: 2, PayloadType: b.pt, SequenceNumber: seq, Timestamp: ts, SSRC: b.ssrc}
		if id := c.mic.extID.Load(); id != 0 {
			_ = h.SetExtension(uint8(id), []byte{0x80 | byte(c.level.Load())})
		}
		_, _ = b.w.WriteRTP(&h, payload)
		if bogusSSRC != 0 {
			h.SSRC = bogusSSRC
			_, _ = b.w.WriteRTP(&h, bogus)
		}
	}
}

func (c *client) snapshot() map[byte]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[byte]int, len(c.counts))
	for k, v := range c.counts {
		m[k] = v
	}
	return m
}

func (c *client) reset() {
	c.mu.Lock()
	clear(c.counts)
	clear(c.bytes)
	c.mu.Unlock()
}

// received returns packets and payload bytes received from speakers
// other than the given ids.
func (c *client) receivedExcept(ids ...byte) (pkts, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.counts {
		if !slices.Contains(ids, k) {
			pkts += n
			bytes += c.bytes[k]
		}
	}
	return pkts, bytes
}

// expectHearing resets counts, waits until every expected (listener,
// speaker) pair has received n packets, then asserts that no listener
// received from any speaker outside its expected set in that window.
func expectHearing(t *testing.T, clients []*client, want map[*client][]byte) {
	t.Helper()
	const n = 10
	// Two rounds: the first lets packets sent before the change drain.
	for _, c := range clients {
		c.reset()
	}
	defer func() {
		if t.Failed() {
			for _, c := range clients {
				t.Logf("listener %d got %v", c.id, c.snapshot())
			}
		}
	}()
	testwait.Within(t, 10*time.Second, "expected speakers to start", func() bool {
		for l, sps := range want {
			got := l.snapshot()
			for _, sp := range sps {
				if got[sp] < 3 {
					return false
				}
			}
		}
		return true
	})
	for _, c := range clients {
		c.reset()
	}
	testwait.Within(t, 10*time.Second, "expected speakers to arrive", func() bool {
		for l, sps := range want {
			got := l.snapshot()
			for _, sp := range sps {
				if got[sp] < n {
					return false
				}
			}
		}
		return true
	})
	for _, l := range clients {
		got := l.snapshot()
		allowed := map[byte]bool{}
		for _, sp := range want[l] {
			allowed[sp] = true
		}
		for sp, cnt := range got {
			if !allowed[sp] && cnt > 0 {
				t.Errorf("listener %d received %d packets from speaker %d; want only %v", l.id, cnt, sp, want[l])
			}
		}
	}
}

// newEnvB is newEnv without periodic stats sampling (sampling allocates).
func newEnvB(b *testing.B) *testEnv {
	return newEnv(b, func(c *Config) { c.StatsInterval = time.Hour })
}

func mustJSON(tb testing.TB, body []byte, v any) {
	tb.Helper()
	if err := json.Unmarshal(body, v); err != nil {
		tb.Fatal(err)
	}
}

// benchClient is a listen-only pion client (one sendrecv m-line = one
// slot) counting received packets.
func benchClient(tb testing.TB, got, mine *atomic.Int64) (*webrtc.PeerConnection, string) {
	pc, err := clientAPI(tb, true).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeAudio, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
		tb.Fatal(err)
	}
	countTracks(pc, got, mine)
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		tb.Fatal(err)
	}
	g := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		tb.Fatal(err)
	}
	<-g
	tb.Cleanup(func() { _ = pc.Close() })
	return pc, pc.LocalDescription().SDP
}
