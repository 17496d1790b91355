package transport

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/wsframe"
)

// The framing after the upgrade is this package's: each case writes raw
// client frames and reads the server's answer with gorilla's client.
func TestWebSocketFraming(t *testing.T) {
	leakCheck(t)
	type result struct {
		data []byte
		err  error
	}
	conns := make(chan chan result, 1)
	_, _, url := startWS(t, DefaultWebSocketConfig(), func(ctx context.Context, c Conn) {
		reads := make(chan result, 16)
		conns <- reads
		for {
			m, err := c.Read(ctx)
			reads <- result{bytes.Clone(m.Data), err}
			if err != nil {
				return
			}
			if err := c.WriteReliable(ctx, m.Data); err != nil {
				return
			}
			if err := c.Flush(ctx); err != nil {
				return
			}
		}
	})
	// dial returns the client, its raw connection, and what the server's
	// Reads return on it.
	dial := func(t *testing.T) (*websocket.Conn, net.Conn, chan result) {
		ws, _, err := websocket.DefaultDialer.Dial(url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.Close() })
		return ws, ws.NetConn(), <-conns
	}
	closeCode := func(t *testing.T, ws *websocket.Conn) int {
		t.Helper()
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		for {
			_, _, err := ws.ReadMessage()
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code
			}
			if err != nil {
				t.Fatalf("read: %v, want a close frame", err)
			}
		}
	}

	t.Run("ping gets its pong", func(t *testing.T) {
		ws, nc, reads := dial(t)
		pong := make(chan string, 1)
		ws.SetPongHandler(func(s string) error { pong <- s; return nil })
		if _, err := nc.Write(clientFrame(wsframe.OpPing, []byte("are you there"))); err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(clientFrame(wsframe.OpBinary, []byte("after"))); err != nil {
			t.Fatal(err)
		}
		if _, b, err := ws.ReadMessage(); err != nil || string(b) != "after" {
			t.Fatalf("echo %q %v", b, err)
		}
		if p := <-pong; p != "are you there" {
			t.Fatalf("pong %q", p)
		}
		<-reads
	})
	t.Run("fragments with a ping between", func(t *testing.T) {
		ws, nc, reads := dial(t)
		first := clientFrame(wsframe.OpBinary, []byte("frag"))
		first[0] &^= wsframe.Fin
		var b []byte
		b = append(b, first...)
		b = append(b, clientFrame(wsframe.OpPing, nil)...)
		mid := clientFrame(wsframe.OpContinuation, []byte("men"))
		mid[0] &^= wsframe.Fin
		b = append(b, mid...)
		b = append(b, clientFrame(wsframe.OpContinuation, bytes.Repeat([]byte("t"), 2000))...)
		if _, err := nc.Write(b); err != nil {
			t.Fatal(err)
		}
		want := "fragmen" + string(bytes.Repeat([]byte("t"), 2000))
		if _, got, err := ws.ReadMessage(); err != nil || string(got) != want {
			t.Fatalf("echo %d bytes %v", len(got), err)
		}
		<-reads
	})
	for _, tc := range []struct {
		name  string
		frame []byte
		code  int
	}{
		{"unmasked frame", []byte{wsframe.Fin | wsframe.OpBinary, 2, 'h', 'i'}, wsframe.CloseProtocol},
		{"reserved bit", append([]byte{0x40 | wsframe.Fin | wsframe.OpBinary}, clientFrame(wsframe.OpBinary, []byte("x"))[1:]...), wsframe.CloseProtocol},
		{"continuation first", clientFrame(wsframe.OpContinuation, []byte("x")), wsframe.CloseProtocol},
		{"unknown opcode", clientFrame(0x3, []byte("x")), wsframe.CloseProtocol},
		{"fragmented ping", func() []byte { f := clientFrame(wsframe.OpPing, nil); f[0] &^= wsframe.Fin; return f }(), wsframe.CloseProtocol},
		{"close reason not UTF-8", clientFrame(wsframe.OpClose, []byte{0x03, 0xE8, 0xff, 0xfe}), wsframe.CloseInvalidUTF8},
		{"close code out of range", clientFrame(wsframe.OpClose, []byte{0x00, 0x10}), wsframe.CloseProtocol},
		{"declared 2^62 bytes", func() []byte {
			b := []byte{wsframe.Fin | wsframe.OpBinary, wsframe.MaskBit | 127}
			b = binary.BigEndian.AppendUint64(b, 1<<62)
			return append(b, 1, 2, 3, 4)
		}(), int(codec.CodeFrameTooLarge.CloseCode())},
		{"declared 2^63 bytes", func() []byte {
			b := []byte{wsframe.Fin | wsframe.OpBinary, wsframe.MaskBit | 127}
			b = binary.BigEndian.AppendUint64(b, 1<<63)
			return append(b, 1, 2, 3, 4)
		}(), wsframe.CloseProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, nc, reads := dial(t)
			if _, err := nc.Write(tc.frame); err != nil {
				t.Fatal(err)
			}
			if got := closeCode(t, ws); got != tc.code {
				t.Fatalf("close %d, want %d", got, tc.code)
			}
			if r := <-reads; !errors.Is(r.err, ErrClosed) && !errors.Is(r.err, ErrMessageTooLarge) {
				t.Fatalf("server Read = %v", r.err)
			}
		})
	}
	t.Run("client close is answered with its code", func(t *testing.T) {
		ws, _, reads := dial(t)
		if err := ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(4321, "bye")); err != nil {
			t.Fatal(err)
		}
		if got := closeCode(t, ws); got != 4321 {
			t.Fatalf("close reply %d, want 4321", got)
		}
		if r := <-reads; !errors.Is(r.err, ErrClosed) {
			t.Fatalf("server Read = %v", r.err)
		}
	})
}

// FuzzWebSocketRead feeds arbitrary client bytes to a connection's reader:
// it returns whole messages within MaxMessageSize or a typed error, never
// panics, and never reads past the connection's end.
func FuzzWebSocketRead(f *testing.F) {
	f.Add(clientFrame(wsframe.OpBinary, []byte("\x0a\x03abc")))
	f.Add(clientFrame(wsframe.OpText, []byte(`{"hello":{}}`)))
	f.Add(append(clientFrame(wsframe.OpPing, []byte("p")), clientFrame(wsframe.OpBinary, bytes.Repeat([]byte{7}, 3000))...))
	frag := clientFrame(wsframe.OpBinary, []byte("ab"))
	frag[0] &^= wsframe.Fin
	f.Add(append(frag, clientFrame(wsframe.OpContinuation, []byte("cd"))...))
	f.Add(clientFrame(wsframe.OpClose, []byte{0x03, 0xE8}))
	f.Add([]byte{wsframe.Fin | wsframe.OpBinary, wsframe.MaskBit | 127, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4})
	s, err := NewWebSocket(DefaultWebSocketConfig(), func(context.Context, Conn) {}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer ln.Close()
	f.Fuzz(func(t *testing.T, in []byte) {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer server.Close()
		// The client sends in, then its FIN, and drains the replies.
		go func() {
			_, _ = client.Write(in)
			_ = client.(*net.TCPConn).CloseWrite()
			_, _ = io.Copy(io.Discard, client)
		}()
		c := newWSConn(s, server, "")
		ctx := context.Background()
		for {
			m, err := c.Read(ctx)
			if err != nil {
				if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrMessageTooLarge) {
					t.Fatalf("untyped error %v", err)
				}
				return
			}
			if len(m.Data) > codec.MaxMessageSize {
				t.Fatalf("%d-byte message", len(m.Data))
			}
		}
	})
}
