package transport

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
)

func startWS(t testing.TB, cfg WebSocketConfig, h Handler) (*WebSocket, *Metrics, string) {
	t.Helper()
	m, _ := testMetrics()
	ws, err := NewWebSocket(cfg, h, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(PathWebSocket, ws)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		if err := ws.Shutdown(shutdownCtx(t)); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.Close()
	})
	return ws, m, "ws" + strings.TrimPrefix(srv.URL, "http") + PathWebSocket
}

func TestWebSocketEcho(t *testing.T) {
	leakCheck(t)
	tests := []struct {
		name     string
		offer    []string
		wantProt string
		msgType  int
		msg      string
	}{
		{"no subprotocol defaults to egbe.v1", nil, "", websocket.BinaryMessage, "\x0a\x03abc"},
		{"egbe.v1", []string{SubprotocolProto}, SubprotocolProto, websocket.BinaryMessage, "\x0a\x03abc"},
		{"egbe.v1.json", []string{SubprotocolJSON}, SubprotocolJSON, websocket.TextMessage, `{"hello":{}}`},
	}
	encs := make(chan Encoding, len(tests))
	_, m, url := startWS(t, DefaultWebSocketConfig(), func(ctx context.Context, c Conn) {
		encs <- c.Encoding()
		if c.HasUnreliable() || !errors.Is(c.WriteUnreliable([]byte("x")), ErrNoUnreliableLane) {
			t.Error("websocket claims an unreliable lane")
		}
		echo(ctx, c)
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := websocket.Dialer{Subprotocols: tt.offer}
			conn, resp, err := d.Dial(url, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != tt.wantProt {
				t.Errorf("subprotocol = %q, want %q", got, tt.wantProt)
			}
			wantEnc := EncodingProto
			if tt.wantProt == SubprotocolJSON {
				wantEnc = EncodingJSON
			}
			if got := <-encs; got != wantEnc {
				t.Errorf("Encoding() = %v, want %v", got, wantEnc)
			}
			for i := 0; i < 3; i++ {
				if err := conn.WriteMessage(tt.msgType, []byte(tt.msg)); err != nil {
					t.Fatal(err)
				}
				mt, got, err := conn.ReadMessage()
				if err != nil {
					t.Fatal(err)
				}
				if mt != tt.msgType || string(got) != tt.msg {
					t.Fatalf("echo = %d %q, want %d %q", mt, got, tt.msgType, tt.msg)
				}
			}
		})
	}
	if got := counter(m, "accepted", "websocket"); got != 3 {
		t.Errorf("accepted = %v, want 3", got)
	}
	if got := counter(m, "messages", "websocket", "reliable", "in"); got != 9 {
		t.Errorf("messages in = %v, want 9", got)
	}
}

func TestWebSocketOversize(t *testing.T) {
	leakCheck(t)
	errs := make(chan error, 1)
	_, _, url := startWS(t, DefaultWebSocketConfig(), recordingEcho(errs))
	conn, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// At the limit is fine.
	ok := bytes.Repeat([]byte{1}, codec.MaxMessageSize)
	if err := conn.WriteMessage(websocket.BinaryMessage, ok); err != nil {
		t.Fatal(err)
	}
	if _, got, err := conn.ReadMessage(); err != nil || len(got) != len(ok) {
		t.Fatalf("max-size echo: %d bytes, %v", len(got), err)
	}
	if err := conn.WriteMessage(websocket.BinaryMessage, append(ok, 1)); err != nil {
		t.Fatal(err)
	}
	_, _, err = conn.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != int(codec.CodeFrameTooLarge.CloseCode()) {
		t.Fatalf("client read = %v, want close %d", err, codec.CodeFrameTooLarge.CloseCode())
	}
	if err := <-errs; !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("server Read = %v, want ErrMessageTooLarge", err)
	}
}

func TestWebSocketCloseCode(t *testing.T) {
	leakCheck(t)
	_, m, url := startWS(t, DefaultWebSocketConfig(), func(ctx context.Context, c Conn) {
		_ = c.Close(codec.CodeTokenInvalid.CloseCode(), "bad token")
		<-c.Done()
	})
	conn, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _, err = conn.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4010 || ce.Text != "bad token" {
		t.Fatalf("client read = %v, want close 4010 bad token", err)
	}
	conn.Close() // as a browser does after the close handshake
	testwait.For(t, "active connections to reach 0", func() bool { return counter(m, "active", "websocket") == 0 })
}

func TestWebSocketOrigin(t *testing.T) {
	leakCheck(t)
	cfg := DefaultWebSocketConfig()
	cfg.AllowedOrigins = []string{"http://localhost:8080"}
	_, m, url := startWS(t, cfg, echo)
	tests := []struct {
		origin string
		ok     bool
	}{
		{"http://localhost:8080", true},
		{"HTTP://LOCALHOST:8080", true},
		{"", true}, // non-browser clients send none
		{"http://evil.example", false},
	}
	for _, tt := range tests {
		t.Run(tt.origin, func(t *testing.T) {
			h := http.Header{}
			if tt.origin != "" {
				h.Set("Origin", tt.origin)
			}
			conn, resp, err := websocket.DefaultDialer.Dial(url, h)
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				conn.Close()
				return
			}
			if err == nil {
				conn.Close()
				t.Fatal("dial succeeded")
			}
			if resp == nil || resp.StatusCode != http.StatusForbidden {
				t.Fatalf("resp = %v, want 403", resp)
			}
		})
	}
	if got := counter(m, "handshake", "websocket", hsOrigin); got != 1 {
		t.Errorf("origin failures = %v, want 1", got)
	}
}

func TestWebSocketShutdownClosesSessions(t *testing.T) {
	leakCheck(t)
	m, _ := testMetrics()
	started := make(chan struct{})
	ws, err := NewWebSocket(DefaultWebSocketConfig(), func(ctx context.Context, c Conn) {
		close(started)
		echo(ctx, c) // Read fails once Shutdown cancels ctx
	}, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ws)
	defer srv.Close()
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	<-started
	readErr := make(chan error, 1)
	go func() {
		_, _, err := conn.ReadMessage()
		conn.Close()
		readErr <- err
	}()
	if err := ws.Shutdown(shutdownCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-readErr; !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("client read after shutdown = %v, want close 1000", err)
	}
	// New connections are refused with a typed 503.
	_, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("dial after shutdown: %v %v", resp, err)
	}
}

func TestWebSocketUnsupportedSubprotocol(t *testing.T) {
	leakCheck(t)
	_, m, url := startWS(t, DefaultWebSocketConfig(), echo)
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}}
	_, resp, err := d.Dial(url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("dial: %v %v, want 400", resp, err)
	}
	if got := counter(m, "handshake", "websocket", hsSubprotocol); got != 1 {
		t.Errorf("subprotocol failures = %v", got)
	}
}

// A client that stops answering pings is dropped.
func TestWebSocketKeepaliveDropsSilentPeer(t *testing.T) {
	leakCheck(t)
	cfg := DefaultWebSocketConfig()
	cfg.PingInterval = 20 * time.Millisecond
	cfg.PongWait = 20 * time.Millisecond
	errs := make(chan error, 1)
	_, m, url := startWS(t, cfg, recordingEcho(errs))
	// gorilla answers pings only while the application reads; this client
	// never reads, so it never pongs.
	conn, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := <-errs; !errors.Is(err, ErrClosed) {
		t.Fatalf("Read = %v, want ErrClosed", err)
	}
	testwait.For(t, "the session to end", func() bool { return counter(m, "active", "websocket") == 0 })
}

// TestWebSocketReadAfterShortLivedCtx: a session reads its first message
// under a short-lived handshake context, cancels it, and keeps reading under
// its own context. The cancelled context must not poison later reads.
func TestWebSocketReadAfterShortLivedCtx(t *testing.T) {
	leakCheck(t)
	got := make(chan string, 2)
	_, _, url := startWS(t, DefaultWebSocketConfig(), func(ctx context.Context, c Conn) {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, err := c.Read(hctx)
		cancel()
		if err != nil {
			got <- "first: " + err.Error()
			return
		}
		got <- string(m.Data)
		m, err = c.Read(ctx)
		if err != nil {
			got <- "second: " + err.Error()
			return
		}
		got <- string(m.Data)
	})
	conn, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, msg := range []string{"hello", "next"} {
		if err := conn.WriteMessage(websocket.BinaryMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if r := <-got; r != msg {
			t.Fatalf("server read %q, want %q", r, msg)
		}
	}
}
