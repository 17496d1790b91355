package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/pion/webrtc/v4"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/internal/wsframe"
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

// countingListener counts the write and read calls made on its accepted
// connections: on TCP each is one syscall, so writes per burst is what
// batching saves.
type countingListener struct {
	net.Listener
	writes, reads *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{TCPConn: c.(*net.TCPConn), writes: l.writes, reads: l.reads}, nil
}

type countingConn struct {
	*net.TCPConn
	writes, reads *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) { c.writes.Add(1); return c.TCPConn.Write(p) }
func (c *countingConn) Read(p []byte) (int, error)  { c.reads.Add(1); return c.TCPConn.Read(p) }

// countingServer serves h on a counting listener.
func countingServer(b *testing.B, h http.Handler) (url string, writes, reads *atomic.Int64) {
	writes, reads = new(atomic.Int64), new(atomic.Int64)
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = countingListener{Listener: srv.Listener, writes: writes, reads: reads}
	srv.Start()
	b.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http"), writes, reads
}

// bareGorilla is the baseline: a gorilla echo-style server with the edge's
// buffer settings, one goroutine per connection. serve gets each message.
func bareGorilla(serve func(c *websocket.Conn, mt int, p []byte) error) http.Handler {
	cfg := DefaultWebSocketConfig()
	up := websocket.Upgrader{ReadBufferSize: cfg.ReadBufferSize, WriteBufferSize: cfg.WriteBufferSize, WriteBufferPool: &bufPool{}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
			if serve(c, mt, p) != nil {
				return
			}
		}
	})
}

// rawWS is a benchmark client that reads and writes frames on the raw
// connection, allocating nothing, so allocs/op are the server's.
type rawWS struct {
	ws  *websocket.Conn
	br  *bufio.Reader
	nc  net.Conn
	hdr [10]byte
	buf []byte
}

func dialRaw(b *testing.B, url string) *rawWS {
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ws.Close() })
	return &rawWS{ws: ws, nc: ws.NetConn(), br: bufio.NewReaderSize(ws.NetConn(), 64<<10), buf: make([]byte, 64<<10)}
}

// next reads one server frame (unmasked, unfragmented) and returns its
// payload, valid until the next call.
func (r *rawWS) next() []byte {
	hdr := r.hdr[:]
	if _, err := io.ReadFull(r.br, hdr[:2]); err != nil {
		panic(err)
	}
	n := int(hdr[1] & 0x7F)
	switch n {
	case 126:
		_, _ = io.ReadFull(r.br, hdr[2:4])
		n = int(binary.BigEndian.Uint16(hdr[2:4]))
	case 127:
		_, _ = io.ReadFull(r.br, hdr[2:10])
		n = int(binary.BigEndian.Uint64(hdr[2:10]))
	}
	if _, err := io.ReadFull(r.br, r.buf[:n]); err != nil {
		panic(err)
	}
	return r.buf[:n]
}

// BenchmarkWebSocketBurst: per op the server sends a burst of n 200-byte
// messages and the client reads them. The edge writes them with n
// WriteReliable calls and one Flush; bare gorilla with n WriteMessage
// calls. writes/burst counts the server's socket writes (one syscall
// each), cpu-ns/msg is process CPU (client included) per message.
func BenchmarkWebSocketBurst(b *testing.B) {
	payload := make([]byte, 200)
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("edge/%d", n), func(b *testing.B) {
			ws, err := NewWebSocket(DefaultWebSocketConfig(), func(ctx context.Context, c Conn) {
				for {
					m, err := c.Read(ctx)
					if err != nil {
						return
					}
					for range int(m.Data[0]) {
						if c.WriteReliable(ctx, payload) != nil {
							return
						}
					}
					if c.Flush(ctx) != nil {
						return
					}
				}
			}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer ws.Shutdown(context.Background())
			url, writes, _ := countingServer(b, ws)
			benchBurst(b, url, n, writes)
		})
		b.Run(fmt.Sprintf("bare/%d", n), func(b *testing.B) {
			url, writes, _ := countingServer(b, bareGorilla(func(c *websocket.Conn, _ int, p []byte) error {
				for range int(p[0]) {
					if err := c.WriteMessage(websocket.BinaryMessage, payload); err != nil {
						return err
					}
				}
				return nil
			}))
			benchBurst(b, url, n, writes)
		})
	}
}

func benchBurst(b *testing.B, url string, n int, writes *atomic.Int64) {
	c := dialRaw(b, url)
	trigger := clientFrame(wsframe.OpBinary, []byte{byte(n)})
	b.ReportAllocs()
	w0, cpu0 := writes.Load(), processCPU()
	for b.Loop() {
		if _, err := c.nc.Write(trigger); err != nil {
			b.Fatal(err)
		}
		for range n {
			c.next()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(writes.Load()-w0)/float64(b.N), "writes/burst")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N*n), "cpu-ns/msg")
}

// BenchmarkWebSocketIngest: per op the client sends n 40-byte messages (a
// presence or an ack is about that) in one write and the server reads
// them, answering one small message after the n-th. reads/msg counts the
// server's socket reads; cpu-ns/msg is process CPU per message.
func BenchmarkWebSocketIngest(b *testing.B) {
	msg := make([]byte, 40)
	for _, n := range []int{1, 16} {
		burst := bytes.Repeat(clientFrame(wsframe.OpBinary, msg), n)
		b.Run(fmt.Sprintf("edge/%d", n), func(b *testing.B) {
			ws, err := NewWebSocket(DefaultWebSocketConfig(), func(ctx context.Context, c Conn) {
				for i := 1; ; i++ {
					if _, err := c.Read(ctx); err != nil {
						return
					}
					if i%n == 0 && (c.WriteReliable(ctx, msg[:1]) != nil || c.Flush(ctx) != nil) {
						return
					}
				}
			}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer ws.Shutdown(context.Background())
			url, _, reads := countingServer(b, ws)
			benchIngest(b, url, n, burst, reads)
		})
		b.Run(fmt.Sprintf("bare/%d", n), func(b *testing.B) {
			i := 0
			url, _, reads := countingServer(b, bareGorilla(func(c *websocket.Conn, _ int, _ []byte) error {
				if i++; i%n == 0 {
					return c.WriteMessage(websocket.BinaryMessage, msg[:1])
				}
				return nil
			}))
			benchIngest(b, url, n, burst, reads)
		})
	}
}

func benchIngest(b *testing.B, url string, n int, burst []byte, reads *atomic.Int64) {
	c := dialRaw(b, url)
	b.ReportAllocs()
	r0, cpu0 := reads.Load(), processCPU()
	for b.Loop() {
		if _, err := c.nc.Write(burst); err != nil {
			b.Fatal(err)
		}
		c.next()
	}
	b.StopTimer()
	b.ReportMetric(float64(reads.Load()-r0)/float64(b.N*n), "reads/msg")
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N*n), "cpu-ns/msg")
}

// BenchmarkWebTransportEcho is one reliable round trip through this
// package's WebTransport (Conn + echo Handler, write + Flush) against a
// bare webtransport-go server echoing its stream's bytes, both in this
// process with the client.
func BenchmarkWebTransportEcho(b *testing.B) {
	msg := codec.AppendFrame(nil, make([]byte, 64))
	b.Run("edge", func(b *testing.B) {
		_, _, base, clientTLS := startWT(b, func(ctx context.Context, c Conn) {
			for {
				m, err := c.Read(ctx)
				if err != nil || c.WriteReliable(ctx, m.Data) != nil || c.Flush(ctx) != nil {
					return
				}
			}
		})
		benchWTEcho(b, dialWT(b, base, clientTLS), msg)
	})
	b.Run("bare", func(b *testing.B) {
		serverTLS, clientTLS, _ := testTLS(b)
		pconn, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		h3 := &http3.Server{TLSConfig: http3.ConfigureTLSConfig(serverTLS),
			QUICConfig: &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true}}
		srv := &webtransport.Server{H3: h3, CheckOrigin: func(*http.Request) bool { return true }}
		h3.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sess, err := srv.Upgrade(w, r)
			if err != nil {
				return
			}
			str, err := sess.AcceptStream(r.Context())
			if err != nil {
				return
			}
			_, _ = io.Copy(str, str)
		})
		webtransport.ConfigureHTTP3Server(h3)
		go func() { _ = srv.Serve(pconn) }()
		b.Cleanup(func() { srv.Close(); pconn.Close() })
		benchWTEcho(b, dialWT(b, "https://"+pconn.LocalAddr().String(), clientTLS), msg)
	})
}

func benchWTEcho(b *testing.B, sess *webtransport.Session, frame []byte) {
	str, err := sess.OpenStreamSync(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, len(frame))
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		if _, err := str.Write(frame); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(str, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkWebRTCEcho is one round trip on the reliable data channel
// through this package's WebRTC (detached channels, no interceptors)
// against a bare pion peer built the default way (OnMessage callbacks,
// default interceptors), both in this process with the client.
func BenchmarkWebRTCEcho(b *testing.B) {
	msg := make([]byte, 64)
	b.Run("edge", func(b *testing.B) {
		_, _, url := startRTC(b, DefaultWebRTCConfig(), echo)
		c := newRTCClient(b)
		c.connect(b, url, "application/sdp")
		benchRTCEcho(b, c, msg)
	})
	b.Run("bare", func(b *testing.B) {
		srv, err := webrtc.NewPeerConnection(webrtc.Configuration{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { srv.Close() })
		srv.OnDataChannel(func(dc *webrtc.DataChannel) {
			dc.OnMessage(func(m webrtc.DataChannelMessage) { _ = dc.Send(m.Data) })
		})
		c := newRTCClient(b)
		offer := c.offer(b)
		if err := srv.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: offer}); err != nil {
			b.Fatal(err)
		}
		ans, err := srv.CreateAnswer(nil)
		if err != nil {
			b.Fatal(err)
		}
		gathered := webrtc.GatheringCompletePromise(srv)
		if err := srv.SetLocalDescription(ans); err != nil {
			b.Fatal(err)
		}
		<-gathered
		if err := c.pc.SetRemoteDescription(*srv.LocalDescription()); err != nil {
			b.Fatal(err)
		}
		<-c.relUp
		benchRTCEcho(b, c, msg)
	})
}

func benchRTCEcho(b *testing.B, c *rtcClient, msg []byte) {
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		if err := c.rel.Send(msg); err != nil {
			b.Fatal(err)
		}
		<-c.relIn
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// BenchmarkIdleConnection holds b.N idle connections from clients in a
// child process (each has said hello and heard its echo) and reports
// what each costs the server: heap-B/conn (heap plus goroutine stacks) and
// goroutines/conn. The Handler is a plain echo loop, one goroutine, like
// the bare gorilla baseline's. Run with -benchtime=Nx.
func BenchmarkIdleConnection(b *testing.B) {
	for _, kind := range []Kind{KindWebSocket, KindWebTransport, KindWebRTC, "bare-gorilla"} {
		b.Run(string(kind), func(b *testing.B) {
			var url string
			var cert []byte
			var active func() int
			if kind == "bare-gorilla" {
				var n atomic.Int64
				h := bareGorilla(func(c *websocket.Conn, mt int, p []byte) error { return c.WriteMessage(mt, p) })
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					n.Add(1)
					defer n.Add(-1)
					h.ServeHTTP(w, r)
				}))
				b.Cleanup(srv.Close)
				url, active = "ws"+strings.TrimPrefix(srv.URL, "http"), func() int { return int(n.Load()) }
				kind = KindWebSocket
			} else {
				url, cert, active = startForClients(b, kind, echo)
			}
			before, g0 := serverMemory()
			b.ResetTimer()
			stop := runClients(b, kind, url, cert, b.N)
			testwait.For(b, "every connection up", func() bool { return active() == b.N })
			b.StopTimer()
			after, g1 := serverMemory()
			b.ReportMetric(float64(after-before)/float64(b.N), "heap-B/conn")
			b.ReportMetric(float64(g1-g0)/float64(b.N), "goroutines/conn")
			stop()
			// The next measurement starts once these connections and
			// their goroutines are gone.
			deadline := time.Now().Add(time.Minute)
			for active() != 0 || runtime.NumGoroutine() > g0 {
				if time.Now().After(deadline) {
					b.Fatalf("%d connections, %d goroutines (%d before) a minute after the clients left", active(), runtime.NumGoroutine(), g0)
				}
				time.Sleep(50 * time.Millisecond) // poll interval
			}
		})
	}
}

// serverMemory is heap in use plus goroutine stacks, after a GC, and the
// goroutine count.
func serverMemory() (int64, int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc + ms.StackInuse), runtime.NumGoroutine()
}
