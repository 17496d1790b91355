package edge

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// startEdgeTimeouts is startEdge with the servers' timeouts shortened, so a
// test sees them act in well under a second.
func startEdgeTimeouts(t *testing.T, public, admin httpTimeouts) *testEdge {
	t.Helper()
	e, err := New(testConfig(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	e.publicTimeouts, e.adminTimeouts = public, admin
	ctx, cancel := context.WithCancel(context.Background())
	te := &testEdge{Edge: e, addrs: e.Addrs(), cancel: cancel, done: make(chan error, 1)}
	go func() { te.done <- e.Run(ctx) }()
	t.Cleanup(func() { te.stop(t) })
	testwait.Within(t, 20*time.Second, "edge ready", func() bool {
		resp, err := http.Get(te.adminURL("/readyz"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return te
}

// closedWithin reports whether the server closes conn (EOF or reset) before
// within passes, reading and discarding anything it sends first.
func closedWithin(conn net.Conn, within time.Duration) bool {
	_ = conn.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, conn)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// An HTTP/1.1 keep-alive connection that sends one request and then
// nothing is closed by the server on every port, not kept forever.
func TestServersCloseIdleKeepAlive(t *testing.T) {
	short := httpTimeouts{readHeader: 2 * time.Second, read: 2 * time.Second, idle: 200 * time.Millisecond}
	te := startEdgeTimeouts(t, short, httpTimeouts{readHeader: 2 * time.Second, idle: 200 * time.Millisecond})
	for _, tc := range []struct {
		name, addr, path string
		tls              bool
	}{
		{"http", te.addrs.HTTP, "/v6/realtime/cert-hash", false},
		{"https", te.addrs.HTTPS, "/v6/realtime/cert-hash", true},
		{"admin", te.addrs.Admin, "/healthz", false},
		{"streamer", te.addrs.StreamerWS, "/", false},
		{"player", te.addrs.PlayerWS, "/", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if tc.tls {
				// The dev certificate is pinned by hash, not by a CA.
				tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
				if err := tc.Handshake(); err != nil {
					t.Fatal(err)
				}
				conn = tc
			}
			if _, err := io.WriteString(conn, "GET "+tc.path+" HTTP/1.1\r\nHost: edge\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.Close {
				t.Fatalf("the server closed after the response (status %d): nothing kept alive to test", resp.StatusCode)
			}
			if !closedWithin(conn, 10*time.Second) {
				t.Fatal("an idle keep-alive connection was still open 10 s after its response")
			}
		})
	}
}

// A request whose body stalls is cut by the public servers' read bound
// instead of holding its connection and goroutine forever.
func TestServersBoundStalledBody(t *testing.T) {
	te := startEdgeTimeouts(t, httpTimeouts{readHeader: 2 * time.Second, read: 300 * time.Millisecond, idle: time.Minute}, defaultAdminTimeouts())
	conn, err := net.Dial("tcp", te.addrs.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// One byte of a 100-byte body, then nothing.
	req := "POST /v6/dev/token HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(conn, 10*time.Second) {
		t.Fatal("a request with a stalled body was still open 10 s later")
	}
}

// The public servers' whole-request read bound does not cut a realtime
// WebSocket: the upgrade takes the connection over and clears it.
func TestReadTimeoutSparesWebSocket(t *testing.T) {
	const read = 200 * time.Millisecond
	te := startEdgeTimeouts(t, httpTimeouts{readHeader: time.Second, read: read, idle: read}, defaultAdminTimeouts())
	c := te.dial(t, "websocket", false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Hello(ctx, helloFor(te.devToken(t, "long-lived"))); err != nil {
		t.Fatal(err)
	}
	// Round trips until the session has lived several read bounds.
	start := time.Now()
	for i := 1; time.Since(start) < 5*read; i++ {
		if err := c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: uint64(i)}}}, false); err != nil {
			t.Fatal(err)
		}
		for {
			env, err := c.Recv(ctx)
			if err != nil {
				t.Fatalf("after %s: %v", time.Since(start), err)
			}
			if p := env.GetPong(); p != nil && p.GetClientTimeMs() == uint64(i) {
				break
			}
		}
	}
}
