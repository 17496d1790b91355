package signalling

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/internal/wsframe"
)

// clientFrame is a masked client frame (fin: the message's last).
func clientFrame(op byte, fin bool, payload []byte) []byte {
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	b := wsframe.AppendHeader(nil, op, len(payload))
	if !fin {
		b[0] &^= wsframe.Fin
	}
	b[1] |= wsframe.MaskBit
	b = append(b, key[:]...)
	start := len(b)
	b = append(b, payload...)
	wsframe.Unmask(key, 0, b[start:])
	return b
}

// rawWrite writes client frames on c's socket in one write (c's gorilla
// writer must be idle).
func (c *client) rawWrite(frames ...[]byte) {
	c.t.Helper()
	if _, err := c.ws.NetConn().Write(bytes.Join(frames, nil)); err != nil {
		c.t.Fatalf("%s: raw write: %v", c.name, err)
	}
}

// subscribedPair is streamer A with player P0 subscribed (Player0).
func subscribedPair(h *harness) (s, p *client) {
	h.t.Helper()
	s = h.streamerUp("S1", "/", "A")
	p = h.playerUp("P0", "/")
	p.send(`{"type":"subscribe","streamerId":"A"}`)
	s.expect("playerConnected")
	return s, p
}

// rawPlayer is a player with no reader goroutine of its own, subscribed
// to A (the streamer s).
func rawPlayer(h *harness, s *client) *websocket.Conn {
	h.t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(wsURL(h.player, "/"), nil)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { ws.Close() })
	_ = ws.SetReadDeadline(time.Now().Add(failsafe))
	if _, b, err := ws.ReadMessage(); err != nil || !bytes.Contains(b, []byte(`"config"`)) {
		h.t.Fatalf("config: %s %v", b, err)
	}
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"subscribe","streamerId":"A"}`)); err != nil {
		h.t.Fatal(err)
	}
	s.expect("playerConnected")
	return ws
}

// readText reads the next text message of a raw client.
func readText(t testing.TB, ws *websocket.Conn) string {
	t.Helper()
	_, b, err := ws.ReadMessage()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}

// TestBurstLeavesInOneWrite: a streamer's offer and its candidates read in
// one batch reach the player in one socket write, built from the
// streamer's bytes (playerId removed), in order.
func TestBurstLeavesInOneWrite(t *testing.T) {
	h := newHarness(t, Default(), Deps{})
	s, p := subscribedPair(h)
	s.sync()
	p.sync()
	writes := func() float64 { return testutil.ToFloat64(h.srv.met.writes) }
	frames := func() float64 { return testutil.ToFloat64(h.srv.met.frames) }
	w0, f0 := writes(), frames()
	offer := `{"type":"offer","playerId":"Player0","sdp":"` + strings.Repeat(`a=x\r\n`, 600) + `"}`
	burst := [][]byte{clientFrame(wsframe.OpText, true, []byte(offer))}
	var want []string
	for i := range 4 {
		c := fmt.Sprintf(`{"type":"iceCandidate","candidate":{"candidate":"candidate:%d 1 udp 1 10.0.0.1 5000 typ host","sdpMid":"0"},"playerId":"Player0"}`, i)
		burst = append(burst, clientFrame(wsframe.OpText, true, []byte(c)))
		want = append(want, strings.Replace(c, `,"playerId":"Player0"`, "", 1))
	}
	s.rawWrite(burst...)
	p.expectRaw(`{"type":"offer","sdp":"` + strings.Repeat(`a=x\r\n`, 600) + `"}`)
	for _, w := range want {
		p.expectRaw(w)
	}
	if got := writes() - w0; got != 1 {
		t.Fatalf("the burst took %v writes, want 1", got)
	}
	if got := frames() - f0; got != 5 {
		t.Fatalf("%v frames written, want 5", got)
	}
}

// TestIdleSocketsHaveOneGoroutine: a connected, silent socket costs the
// broker one goroutine (its reader); no writer waits on it.
func TestIdleSocketsHaveOneGoroutine(t *testing.T) {
	h := newHarness(t, Default(), Deps{})
	h.streamerUp("S1", "/", "A")
	const n = 40
	base := brokerGoroutines()
	var conns []*websocket.Conn
	for range n {
		// gorilla clients without a reader goroutine of their own.
		ws, _, err := websocket.DefaultDialer.Dial(wsURL(h.player, "/"), nil)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, ws)
		if _, b, err := ws.ReadMessage(); err != nil || !bytes.Contains(b, []byte(`"config"`)) {
			t.Fatalf("config: %s %v", b, err)
		}
	}
	defer func() {
		for _, ws := range conns {
			ws.Close()
		}
	}()
	testwait.For(t, "one goroutine per idle socket", func() bool { return brokerGoroutines()-base == n })
	// A burst to each of them and back to idle: still one each.
	for _, ws := range conns {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping","time":3}`)); err != nil {
			t.Fatal(err)
		}
		if _, b, err := ws.ReadMessage(); err != nil || string(b) != `{"type":"pong","time":3}` {
			t.Fatalf("pong: %s %v", b, err)
		}
	}
	testwait.For(t, "one goroutine per idle socket after traffic", func() bool { return brokerGoroutines()-base == n })
}

// brokerGoroutines counts the goroutines running the broker's code (a
// frame in this package's non-test files, none in its tests): other tests'
// goroutines still winding down are not counted.
func brokerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "_test.go:") {
			continue
		}
		for _, line := range strings.Split(g, "\n") {
			line = strings.TrimSpace(line)
			if strings.Contains(line, "/signalling/") && strings.Contains(line, ".go:") && !strings.Contains(line, "/signalling/matchmaker/") {
				count++
				break
			}
		}
	}
	return count
}

// TestBacklogWriterKeepsOrder: frames for a player whose kernel buffers
// are full wait for the writer goroutine and all arrive, in order, once it
// reads; the streamer is never held up meanwhile.
func TestBacklogWriterKeepsOrder(t *testing.T) {
	h := newHarness(t, Default(), Deps{})
	s := h.streamerUp("S1", "/", "A")
	p := rawPlayer(h, s)
	const n = 40
	big := strings.Repeat("c", 512<<10) // 40 x 512 KiB: far past the socket buffers
	for i := range n {
		s.sendQuiet(websocket.TextMessage, []byte(fmt.Sprintf(`{"type":"iceCandidate","playerId":"Player0","n":%d,"c":"%s"}`, i, big)))
	}
	// The streamer's own traffic is answered while the player reads nothing.
	s.sync()
	for i := range n {
		if got, want := readText(t, p), fmt.Sprintf(`{"type":"iceCandidate","n":%d,"c":"%s"}`, i, big); got != want {
			t.Fatalf("frame %d: %.60q", i, got)
		}
	}
	if err := p.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping","time":1}`)); err != nil {
		t.Fatal(err)
	}
	if got := readText(t, p); got != `{"type":"pong","time":1}` {
		t.Fatalf("after the burst: %.60q", got)
	}
	if got := testutil.ToFloat64(h.srv.met.dropped.WithLabelValues(dropSlowConsumer)); got != 0 {
		t.Fatalf("slow_consumer drops %v", got)
	}
}

// TestRawFraming: what the broker reads is the client's WebSocket as RFC
// 6455 has it: fragments are joined (a ping between them answered first),
// binary frames are counted and dropped, pongs ignored; a protocol error
// closes that socket with its code and nobody else's.
func TestRawFraming(t *testing.T) {
	h := newHarness(t, Default(), Deps{})
	s := h.streamerUp("S1", "/", "A")
	p := rawPlayer(h, s)
	pongs := make(chan string, 4)
	p.SetPongHandler(func(d string) error { pongs <- d; return nil })
	raw := [][]byte{
		clientFrame(wsframe.OpText, false, []byte(`{"type":"answer",`)),
		clientFrame(wsframe.OpPing, true, []byte("mid")),
		clientFrame(wsframe.OpContinuation, false, []byte(`"sdp":"v=0`)),
		clientFrame(wsframe.OpContinuation, true, []byte(`\r\n"}`)),
		clientFrame(wsframe.OpBinary, true, []byte{1, 2, 3}),
		clientFrame(wsframe.OpPong, true, nil),
	}
	if _, err := p.NetConn().Write(bytes.Join(raw, nil)); err != nil {
		t.Fatal(err)
	}
	s.expectRaw(`{"type":"answer","sdp":"v=0\r\n","playerId":"Player0"}`)
	if err := p.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping","time":2}`)); err != nil {
		t.Fatal(err)
	}
	if got := readText(t, p); got != `{"type":"pong","time":2}` {
		t.Fatalf("got %q", got)
	}
	select { // the pong frame came before that message
	case got := <-pongs:
		if got != "mid" {
			t.Fatalf("pong %q", got)
		}
	default:
		t.Fatal("no pong")
	}
	if got := testutil.ToFloat64(h.srv.met.dropped.WithLabelValues(dropBinary)); got != 1 {
		t.Fatalf("binary drops %v", got)
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		code  int
	}{
		{"unmasked", []byte{wsframe.Fin | wsframe.OpText, 2, '{', '}'}, wsframe.CloseProtocol},
		{"continuation first", clientFrame(wsframe.OpContinuation, true, []byte("x")), wsframe.CloseProtocol},
		{"close reason not UTF-8", clientFrame(wsframe.OpClose, true, []byte{0x03, 0xE8, 0xff}), wsframe.CloseInvalidUTF8},
	} {
		c := h.playerUp("bad "+tc.name, "/")
		c.rawWrite(tc.frame)
		c.expectClose(tc.code, "protocol error")
	}
	s.sync()
}

// TestCloseEchoed: a client's close is answered with its code, then the
// connection ends; the streamer hears the player left.
func TestCloseEchoed(t *testing.T) {
	h := newHarness(t, Default(), Deps{})
	s, p := subscribedPair(h)
	if err := p.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4321, "bye"), time.Now().Add(failsafe)); err != nil {
		t.Fatal(err)
	}
	p.expectClose(4321, "")
	s.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
	// After the echo the broker closes TCP: the client reads EOF.
	_ = p.ws.NetConn().SetReadDeadline(time.Now().Add(failsafe))
	if _, err := p.ws.NetConn().Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after the close: %v", err)
	}
}

// TestTLSPlayer: a player over TLS (the edge's main listener serves
// wss://), whose socket has no raw descriptor: frames go through the
// writer goroutine, same bytes, same order.
func TestTLSPlayer(t *testing.T) {
	h := newHarness(t, Default(), Deps{})
	s := h.streamerUp("S1", "/", "A")
	ts := httptest.NewTLSServer(h.srv.PlayerHandler())
	defer ts.Close()
	d := websocket.Dialer{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, HandshakeTimeout: failsafe}
	ws, _, err := d.Dial("wss"+strings.TrimPrefix(ts.URL, "https")+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &client{t: t, name: "P0", ws: ws, tr: h.tr, in: make(chan frame, 1024), done: make(chan struct{})}
	go p.readLoop()
	t.Cleanup(p.shut)
	p.expect("config")
	p.send(`{"type":"subscribe","streamerId":"A"}`)
	s.expect("playerConnected")
	s.send(`{"type":"offer","playerId":"Player0","sdp":"v=0\r\n"}`)
	for i := range 3 {
		s.send(fmt.Sprintf(`{"type":"iceCandidate","playerId":"Player0","candidate":%d}`, i))
	}
	p.expectRaw(`{"type":"offer","sdp":"v=0\r\n"}`)
	for i := range 3 {
		p.expectRaw(fmt.Sprintf(`{"type":"iceCandidate","candidate":%d}`, i))
	}
	p.send(`{"type":"answer","sdp":"v=0\r\n"}`)
	s.expectRaw(`{"type":"answer","sdp":"v=0\r\n","playerId":"Player0"}`)
	p.sync()
	p.hangUp()
	s.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
}

// FuzzSocketRead: any bytes a player sends after the upgrade are handled
// as frames or end that socket with a close; nothing panics, the socket is
// released, and the server still answers the next player.
func FuzzSocketRead(f *testing.F) {
	f.Add(clientFrame(wsframe.OpText, true, []byte(`{"type":"listStreamers"}`)))
	f.Add(append(clientFrame(wsframe.OpText, false, []byte(`{"type":`)), clientFrame(wsframe.OpContinuation, true, []byte(`"ping"}`))...))
	f.Add(clientFrame(wsframe.OpPing, true, []byte("p")))
	f.Add(clientFrame(wsframe.OpClose, true, []byte{0x03, 0xE8}))
	f.Add(clientFrame(wsframe.OpText, true, []byte(`{"type":"answer","sdp":"v=0"}`))[:9])
	f.Add([]byte{wsframe.Fin | wsframe.OpText, wsframe.MaskBit | 127, 0, 0, 0, 0, 0x10, 0, 0, 0, 1, 2, 3, 4})
	cfg := Default()
	cfg.CloseGrace = 50 * time.Millisecond
	h := newHarness(f, cfg, Deps{})
	f.Fuzz(func(t *testing.T, in []byte) {
		ws, _, err := websocket.DefaultDialer.Dial(wsURL(h.player, "/"), nil)
		if err != nil {
			t.Fatal(err)
		}
		nc := ws.NetConn()
		_, _ = nc.Write(in)
		_ = nc.(*net.TCPConn).CloseWrite()
		_ = nc.SetReadDeadline(time.Now().Add(failsafe))
		_, _ = io.Copy(io.Discard, nc) // until the broker closes
		nc.Close()
		testwait.For(t, "the socket released", func() bool {
			h.srv.mu.Lock()
			defer h.srv.mu.Unlock()
			return len(h.srv.conns) == 0
		})
	})
	p := h.playerUp("P", "/")
	p.sync()
}
