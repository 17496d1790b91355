package transport

import (
	"context"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/internal/testwait"
)

// TestWebSocketIdleMemory opens many idle sessions (each blocked in Read,
// as a session reader is) and checks the heap plus goroutine stacks they
// add stays within the 20 KiB per session budget. The figure includes the
// in-process clients, so the edge's own share is lower.
func TestWebSocketIdleMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens hundreds of sockets")
	}
	leakCheck(t)
	const n = 400
	ws, err := NewWebSocket(DefaultWebSocketConfig(), func(ctx context.Context, c Conn) {
		_, _ = c.Read(ctx)
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(ws)
	defer srv.Close()
	defer ws.Shutdown(shutdownCtx(t))
	url := "ws" + strings.TrimPrefix(srv.URL, "http")
	d := websocket.Dialer{ReadBufferSize: 256, WriteBufferSize: 256, WriteBufferPool: &bufPool{}}

	before := memInUse()
	conns := make([]*websocket.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, _, err := d.Dial(url, nil)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	testwait.For(t, "sessions to be registered", func() bool {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		return len(ws.conns) == n
	})
	perSession := (memInUse() - before) / n
	t.Logf("idle WebSocket session: %d bytes (heap + stacks, client included)", perSession)
	if perSession > 20<<10 {
		t.Errorf("idle session costs %d bytes, budget 20 KiB", perSession)
	}
}

func memInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc + ms.StackInuse)
}
