package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/iceport"
	"github.com/oshun/egbe-edge/internal/testwait"
)

func startRTC(t testing.TB, cfg WebRTCConfig, h Handler) (*WebRTC, *Metrics, string) {
	t.Helper()
	port, err := iceport.Listen(iceport.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := testMetrics()
	w, err := NewWebRTC(cfg, port, h, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w)
	t.Cleanup(func() {
		if err := w.Shutdown(shutdownCtx(t)); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.Close()
		port.Close()
	})
	return w, m, srv.URL
}

// rtcClient is a pion offerer like the browser client: two data channels,
// non-trickle offer POSTed to the edge.
type rtcClient struct {
	pc            *webrtc.PeerConnection
	rel, unrel    *webrtc.DataChannel
	relIn, unrIn  chan []byte
	relUp, unrlUp chan struct{}
}

func newRTCClient(t testing.TB) *rtcClient {
	t.Helper()
	var se webrtc.SettingEngine
	se.SetIncludeLoopbackCandidate(true)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	pc, err := webrtc.NewAPI(webrtc.WithSettingEngine(se)).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	c := &rtcClient{pc: pc, relIn: make(chan []byte, 16), unrIn: make(chan []byte, 16),
		relUp: make(chan struct{}), unrlUp: make(chan struct{})}
	ordered, zero := false, uint16(0)
	if c.rel, err = pc.CreateDataChannel(LabelReliable, nil); err != nil {
		t.Fatal(err)
	}
	if c.unrel, err = pc.CreateDataChannel(LabelUnreliable, &webrtc.DataChannelInit{Ordered: &ordered, MaxRetransmits: &zero}); err != nil {
		t.Fatal(err)
	}
	c.rel.OnOpen(func() { close(c.relUp) })
	c.unrel.OnOpen(func() { close(c.unrlUp) })
	c.rel.OnMessage(func(m webrtc.DataChannelMessage) { c.relIn <- m.Data })
	c.unrel.OnMessage(func(m webrtc.DataChannelMessage) {
		select {
		case c.unrIn <- m.Data:
		default:
		}
	})
	return c
}

// offer returns the complete (gathered) offer SDP.
func (c *rtcClient) offer(t testing.TB) string {
	t.Helper()
	o, err := c.pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	gathered := webrtc.GatheringCompletePromise(c.pc)
	if err := c.pc.SetLocalDescription(o); err != nil {
		t.Fatal(err)
	}
	<-gathered
	return c.pc.LocalDescription().SDP
}

func postOffer(t testing.TB, url, contentType, body string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Post(url+PathWebRTC, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (c *rtcClient) connect(t testing.TB, url, contentType string) {
	t.Helper()
	body := c.offer(t)
	if contentType == "application/json" {
		b, _ := json.Marshal(map[string]string{"type": "offer", "sdp": body})
		body = string(b)
	}
	resp, answer := postOffer(t, strings.TrimSuffix(url, PathWebRTC), contentType, body)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Content-Type") != "application/sdp" {
		t.Fatalf("POST offer: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), answer)
	}
	if err := c.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		t.Fatal(err)
	}
	wait := func(ch chan struct{}, what string) {
		select {
		case <-ch:
		case <-time.After(15 * time.Second):
			t.Fatalf("%s never opened", what)
		}
	}
	wait(c.relUp, "reliable channel")
	wait(c.unrlUp, "unreliable channel")
}

func TestWebRTCEcho(t *testing.T) {
	for _, ct := range []string{"application/sdp", "application/json"} {
		t.Run(ct, func(t *testing.T) {
			leakCheck(t)
			_, m, url := startRTC(t, DefaultWebRTCConfig(), func(ctx context.Context, c Conn) {
				if c.Kind() != KindWebRTC || c.RemoteAddr() == nil {
					t.Errorf("conn = %s %v", c.Kind(), c.RemoteAddr())
				}
				echo(ctx, c)
			})
			c := newRTCClient(t)
			c.connect(t, url, ct)
			for i := 0; i < 5; i++ {
				msg := fmt.Appendf(nil, "reliable %d", i)
				if err := c.rel.Send(msg); err != nil {
					t.Fatal(err)
				}
				if got := <-c.relIn; !bytes.Equal(got, msg) {
					t.Fatalf("echo %q, want %q", got, msg)
				}
			}
			// The unreliable lane may lose messages: resend until one returns.
			msg := []byte("unreliable")
			for i := 0; ; i++ {
				if i == 100 {
					t.Fatal("nothing echoed on the unreliable lane")
				}
				if err := c.unrel.Send(msg); err != nil {
					t.Fatal(err)
				}
				select {
				case got := <-c.unrIn:
					if !bytes.Equal(got, msg) {
						t.Fatalf("unreliable echo %q", got)
					}
				case <-time.After(100 * time.Millisecond):
					continue
				}
				break
			}
			if got := counter(m, "messages", "webrtc", "unreliable", "out"); got < 1 {
				t.Errorf("unreliable out = %v", got)
			}
			if got := counter(m, "accepted", "webrtc"); got != 1 {
				t.Errorf("accepted = %v", got)
			}
		})
	}
}

func TestWebRTCCloseEndsPeer(t *testing.T) {
	leakCheck(t)
	_, m, url := startRTC(t, DefaultWebRTCConfig(), func(ctx context.Context, c Conn) {
		if _, err := c.Read(ctx); err == nil {
			_ = c.Close(4040, "bye")
		}
	})
	c := newRTCClient(t)
	closed := make(chan struct{})
	c.rel.OnClose(func() { close(closed) })
	c.connect(t, url, "application/sdp")
	if err := c.rel.SendText("hi"); err != nil {
		t.Fatal(err)
	}
	<-closed
	testwait.For(t, "active to reach 0", func() bool { return counter(m, "active", "webrtc") == 0 })
}

func TestWebRTCConnectTimeout(t *testing.T) {
	leakCheck(t)
	cfg := DefaultWebRTCConfig()
	cfg.ConnectTimeout = 200 * time.Millisecond
	w, m, url := startRTC(t, cfg, func(ctx context.Context, c Conn) { t.Error("handler ran for a peer that never connected") })
	c := newRTCClient(t)
	resp, _ := postOffer(t, url, "application/sdp", c.offer(t))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The client never applies the answer: the edge must give up on it.
	testwait.For(t, "the peer to be torn down", func() bool {
		w.mu.Lock()
		n := len(w.peers)
		w.mu.Unlock()
		return n == 0 && counter(m, "handshake", "webrtc", hsTimeout) == 1
	})
}

func TestWebRTCBadOffer(t *testing.T) {
	leakCheck(t)
	cfg := DefaultWebRTCConfig()
	cfg.MaxOfferBytes = 4 << 10
	_, m, url := startRTC(t, cfg, echo)
	noFingerprint := "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=sctp-port:5000\r\n"
	tests := []struct {
		name, method, ctype, body string
		status                    int
		code                      string
	}{
		{"garbage", "POST", "application/sdp", "hello, world", 400, "bad_offer"},
		{"empty", "POST", "application/sdp", "", 400, "bad_offer"},
		{"broken sdp", "POST", "application/sdp", "v=0\r\no=broken\r\n", 400, "bad_offer"},
		{"audio only", "POST", "application/sdp", "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n", 400, "bad_offer"},
		{"no fingerprint", "POST", "application/sdp", noFingerprint, 400, "bad_offer"},
		{"json answer", "POST", "application/json", `{"type":"answer","sdp":"v=0"}`, 400, "bad_offer"},
		{"bad json", "POST", "application/json", `{"type":`, 400, "bad_offer"},
		{"wrong content type", "POST", "image/png", "v=0", 400, "bad_offer"},
		{"too large", "POST", "application/sdp", "v=0\r\n" + strings.Repeat("a=x\r\n", 2000), 413, "offer_too_large"},
		{"GET", "GET", "", "", 405, "method_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, url+PathWebRTC, strings.NewReader(tt.body))
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e httpError
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status || e.Code != tt.code {
				t.Fatalf("got %d %+v, want %d %s", resp.StatusCode, e, tt.status, tt.code)
			}
		})
	}
	if got := counter(m, "handshake", "webrtc", hsBadOffer); got < 8 {
		t.Errorf("bad offer failures = %v", got)
	}
}

func FuzzParseOffer(f *testing.F) {
	// Seeds: a real pion offer in both encodings, and near misses.
	var se webrtc.SettingEngine
	se.SetIncludeLoopbackCandidate(true)
	pc, err := webrtc.NewAPI(webrtc.WithSettingEngine(se)).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := pc.CreateDataChannel(LabelReliable, nil); err != nil {
		f.Fatal(err)
	}
	o, err := pc.CreateOffer(nil)
	if err != nil {
		f.Fatal(err)
	}
	pc.Close()
	js, _ := json.Marshal(map[string]string{"type": "offer", "sdp": o.SDP})
	f.Add("application/sdp", []byte(o.SDP))
	f.Add("application/json", js)
	f.Add("application/json; charset=utf-8", []byte(`{"type":"offer","sdp":"v=0\r\n"}`))
	f.Add("", []byte("v=0\r\nm=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n"))
	f.Add("text/plain", []byte("v=0\r\no=\r\n"))
	f.Fuzz(func(t *testing.T, ctype string, body []byte) {
		sdp, err := parseOffer(ctype, body)
		if err != nil {
			if !errors.Is(err, ErrBadOffer) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if !strings.HasPrefix(sdp, "v=0") {
			t.Fatalf("accepted %q", sdp)
		}
	})
}

func TestWebRTCShutdownEndsPeers(t *testing.T) {
	leakCheck(t)
	port, err := iceport.Listen(iceport.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	w, err := NewWebRTC(DefaultWebRTCConfig(), port, echo, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w)
	defer srv.Close()
	c := newRTCClient(t)
	closed := make(chan struct{})
	c.rel.OnClose(func() { close(closed) })
	c.connect(t, srv.URL, "application/sdp")
	if err := w.Shutdown(shutdownCtx(t)); err != nil {
		t.Fatal(err)
	}
	<-closed
	resp, _ := postOffer(t, srv.URL, "application/sdp", "v=0")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("offer after shutdown: %d, want 503", resp.StatusCode)
	}
}

func TestWebRTCMaxPending(t *testing.T) {
	leakCheck(t)
	cfg := DefaultWebRTCConfig()
	cfg.MaxPending = 1
	_, m, url := startRTC(t, cfg, echo)
	first := newRTCClient(t)
	if resp, body := postOffer(t, url, "application/sdp", first.offer(t)); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first offer: %d %s", resp.StatusCode, body)
	}
	// The first peer never applies its answer, so it holds the only slot.
	second := newRTCClient(t)
	resp, body := postOffer(t, url, "application/sdp", second.offer(t))
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"busy"`) {
		t.Fatalf("second offer: %d %s, want 503 busy", resp.StatusCode, body)
	}
	if got := counter(m, "handshake", "webrtc", hsBusy); got != 1 {
		t.Errorf("busy failures = %v", got)
	}
}

// startRTCServer is startRTC that also hands back the HTTP server, so a
// test can watch its connections.
func startRTCServer(t *testing.T, cfg WebRTCConfig, h Handler, connState func(net.Conn, http.ConnState)) (*WebRTC, *Metrics, string) {
	t.Helper()
	port, err := iceport.Listen(iceport.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := testMetrics()
	w, err := NewWebRTC(cfg, port, h, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(w)
	srv.Config.ConnState = connState
	srv.Start()
	t.Cleanup(func() {
		if err := w.Shutdown(shutdownCtx(t)); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.Close()
		port.Close()
	})
	return w, m, srv.URL
}

// stallOffers opens n connections that each send an offer's headers and
// one byte of an 8,000-byte body, then nothing, and waits until the
// server has read every request's headers.
func stallOffers(t *testing.T, addr string, n int, active *atomic.Int64) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		req := "POST " + PathWebRTC + " HTTP/1.1\r\nHost: edge\r\nContent-Type: application/sdp\r\nContent-Length: 8000\r\n\r\nv"
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, "every stalled request to reach its handler", func() bool { return active.Load() >= int64(n) })
	return conns
}

func countActive(active *atomic.Int64) func(net.Conn, http.ConnState) {
	return func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateActive:
			active.Add(1)
		case http.StateIdle, http.StateHijacked, http.StateClosed:
			// Only the stalled requests matter here; they never leave
			// StateActive while the test waits.
		}
	}
}

// 256 offers whose bodies stall hold no handshake slot: a real client
// still connects, and the stalled requests are answered 408 once
// OfferReadTimeout passes.
func TestWebRTCStalledBodiesHoldNoSlot(t *testing.T) {
	leakCheck(t)
	var active atomic.Int64
	_, _, url := startRTCServer(t, DefaultWebRTCConfig(), echo, countActive(&active))
	stallOffers(t, strings.TrimPrefix(url, "http://"), DefaultWebRTCConfig().MaxPending, &active)
	c := newRTCClient(t)
	c.connect(t, url, "application/sdp") // fails on 503 busy
	if err := c.rel.Send([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	if got := <-c.relIn; string(got) != "hi" {
		t.Fatalf("echo %q", got)
	}
}

func TestWebRTCOfferReadTimeout(t *testing.T) {
	leakCheck(t)
	cfg := DefaultWebRTCConfig()
	cfg.OfferReadTimeout = 200 * time.Millisecond
	var active atomic.Int64
	_, m, url := startRTCServer(t, cfg, echo, countActive(&active))
	conn := stallOffers(t, strings.TrimPrefix(url, "http://"), 1, &active)[0]
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e httpError
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestTimeout || e.Code != "offer_timeout" {
		t.Fatalf("stalled offer answered %d %+v, want 408 offer_timeout", resp.StatusCode, e)
	}
	if got := counter(m, "handshake", "webrtc", hsTimeout); got != 1 {
		t.Errorf("timeout failures = %v", got)
	}
}

// clientFrom is an HTTP client whose connections come from local address
// ip (any 127.0.0.0/8 address works on loopback), so a test can speak for
// another network.
func clientFrom(t *testing.T, ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// 260 quick, complete offers from one network that never connect take at
// most MaxPendingPerNetwork slots: a client from another network still
// connects at once.
func TestWebRTCOneNetworkCannotTakeEverySlot(t *testing.T) {
	leakCheck(t)
	w, m, url := startRTC(t, DefaultWebRTCConfig(), echo)
	offer := newRTCClient(t).offer(t)
	answered := 0
	for range 260 {
		resp, _ := postOffer(t, url, "application/sdp", offer)
		if resp.StatusCode == http.StatusCreated {
			answered++
		}
	}
	if answered > DefaultWebRTCConfig().MaxPendingPerNetwork {
		t.Errorf("%d offers from one network answered, want at most %d", answered, DefaultWebRTCConfig().MaxPendingPerNetwork)
	}
	if got := counter(m, "handshake", "webrtc", hsBusy); got == 0 {
		t.Error("no offer was refused busy")
	}

	// Another /24 on loopback.
	c := newRTCClient(t)
	body := c.offer(t)
	resp, err := clientFrom(t, "127.0.1.1").Post(url+PathWebRTC, "application/sdp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("offer from another network: %d %s", resp.StatusCode, answer)
	}
	if err := c.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: string(answer)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.relUp:
	case <-time.After(15 * time.Second):
		t.Fatal("reliable channel never opened")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.pendingNet[networkOf("127.0.0.1:1")]; n != answered {
		t.Errorf("pending for 127.0.0.0/24 = %d, want %d", n, answered)
	}
}

// A message over MaxMessageSize gets the typed frame_too_large Error on the
// reliable channel before the peer is closed, as the other transports'
// close code 4001 says it.
func TestWebRTCOversizeGetsTypedError(t *testing.T) {
	leakCheck(t)
	errs := make(chan error, 1)
	_, _, url := startRTC(t, DefaultWebRTCConfig(), recordingEcho(errs))
	c := newRTCClient(t)
	closed := make(chan struct{})
	c.rel.OnClose(func() { close(closed) })
	c.connect(t, url, "application/sdp")
	// At the limit is fine.
	ok := bytes.Repeat([]byte{1}, codec.MaxMessageSize)
	if err := c.rel.Send(ok); err != nil {
		t.Fatal(err)
	}
	if got := <-c.relIn; len(got) != len(ok) {
		t.Fatalf("max-size echo: %d bytes", len(got))
	}
	if err := c.rel.Send(append(ok, 1)); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-c.relIn:
		var env codec.ServerEnvelope
		if err := codec.DecodeServer(got, false, &env); err != nil {
			t.Fatalf("after the oversized message: %q does not decode: %v", got, err)
		}
		if e := env.GetError(); e.GetCode() != string(codec.CodeFrameTooLarge) {
			t.Fatalf("after the oversized message: %v, want a frame_too_large Error", &env)
		}
	case <-closed:
		t.Fatal("the channel closed without a frame_too_large Error")
	case <-time.After(10 * time.Second):
		t.Fatal("no answer to the oversized message")
	}
	if err := <-errs; !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("server Read = %v, want ErrMessageTooLarge", err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the channel stayed open after the Error")
	}
}
