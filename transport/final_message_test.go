package transport

import (
	"bufio"
	"context"
	"errors"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/quic-go/webtransport-go"

	"github.com/oshun/egbe-edge/codec"
)

// The last message a server writes before closing (the Error saying why)
// must reach the client ahead of the close, on every transport, even when
// the session's reader has already given up (its context was cancelled).

func TestWebSocketFinalMessageAfterReaderGaveUp(t *testing.T) {
	leakCheck(t)
	_, _, url := startWS(t, DefaultWebSocketConfig(), func(ctx context.Context, c Conn) {
		rctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := c.Read(rctx); !errors.Is(err, ErrClosed) {
			t.Errorf("read with a cancelled context: %v, want ErrClosed", err)
		}
		if err := c.WriteReliable(ctx, []byte("final")); err != nil {
			t.Errorf("write after the reader gave up: %v", err)
		}
		_ = c.Close(codec.CodeResumeRevoked.CloseCode(), "revoked")
		<-c.Done()
	})
	conn, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, b, err := conn.ReadMessage(); err != nil || string(b) != "final" {
		t.Fatalf("first read: %q %v, want the final message", b, err)
	}
	_, _, err = conn.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || uint32(ce.Code) != codec.CodeResumeRevoked.CloseCode() {
		t.Fatalf("then: %v, want close %d", err, codec.CodeResumeRevoked.CloseCode())
	}
}

func TestWebTransportFinalMessageBeforeClose(t *testing.T) {
	leakCheck(t)
	_, _, base, clientTLS := startWT(t, func(ctx context.Context, c Conn) {
		if _, err := c.Read(ctx); err != nil {
			return
		}
		if err := c.WriteReliable(ctx, []byte("final")); err != nil {
			t.Errorf("write: %v", err)
		}
		_ = c.Close(codec.CodeResumeRevoked.CloseCode(), "revoked")
	})
	sess := dialWT(t, base, clientTLS)
	str, err := sess.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := str.Write(codec.AppendFrame(nil, []byte("hi"))); err != nil {
		t.Fatal(err)
	}
	b, err := codec.ReadFrame(bufio.NewReader(str), nil, codec.MaxMessageSize)
	if err != nil || string(b) != "final" {
		t.Fatalf("read: %q %v, want the final message", b, err)
	}
	var se *webtransport.SessionError
	if err := sessionErr(sess); !errors.As(err, &se) || uint32(se.ErrorCode) != codec.CodeResumeRevoked.CloseCode() {
		t.Fatalf("session ended with %v, want close %d", err, codec.CodeResumeRevoked.CloseCode())
	}
}
