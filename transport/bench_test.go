package transport

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gorilla/websocket"
)

// BenchmarkWebSocketEcho compares one round trip through the edge's
// WebSocket transport (Conn + echo Handler) with a bare gorilla echo server
// configured the same way; the ns/op ratio edge/bare is the transport's CPU
// overhead per message. Both sides run in this process, so the numbers
// include the client.
func BenchmarkWebSocketEcho(b *testing.B) {
	for _, size := range []int{64, 1024} {
		msg := make([]byte, size)
		b.Run("edge/"+sizeName(size), func(b *testing.B) {
			ws, err := NewWebSocket(DefaultWebSocketConfig(), echo, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(ws)
			defer srv.Close()
			defer ws.Shutdown(context.Background())
			benchEcho(b, srv.URL, msg)
		})
		b.Run("bare/"+sizeName(size), func(b *testing.B) {
			cfg := DefaultWebSocketConfig()
			up := websocket.Upgrader{ReadBufferSize: cfg.ReadBufferSize, WriteBufferSize: cfg.WriteBufferSize, WriteBufferPool: &bufPool{}}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, err := up.Upgrade(w, r, nil)
				if err != nil {
					return
				}
				defer c.Close()
				for {
					mt, p, err := c.ReadMessage()
					if err != nil {
						return
					}
					if err := c.WriteMessage(mt, p); err != nil {
						return
					}
				}
			}))
			defer srv.Close()
			benchEcho(b, srv.URL, msg)
		})
	}
}

func sizeName(n int) string {
	if n >= 1024 {
		return strconv.Itoa(n/1024) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

func benchEcho(b *testing.B, url string, msg []byte) {
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(url, "http"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	cpu0 := processCPU()
	for b.Loop() {
		if err := conn.WriteMessage(websocket.BinaryMessage, msg); err != nil {
			b.Fatal(err)
		}
		if _, _, err := conn.ReadMessage(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// Process CPU (user+system, client and server) per round trip: wall time
	// on a shared machine mostly measures scheduling, CPU is what scales.
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
}

// processCPU is this process's user+system CPU time in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
