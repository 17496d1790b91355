package transport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/gostacks"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// sessionLike is a Handler shaped like the shard gateway's session: this
// goroutine reads, one writer goroutine it owns writes what was read back
// (flushing once its queue is empty). Per connection that is the two
// goroutines the session owns.
func sessionLike(ctx context.Context, c Conn) {
	type msg struct {
		lane Lane
		data []byte
	}
	out := make(chan msg, 16)
	var wg sync.WaitGroup
	wg.Go(func() {
		for m := range out {
			if m.lane == Unreliable {
				_ = c.WriteUnreliable(m.data)
				continue
			}
			if err := c.WriteReliable(ctx, m.data); err != nil {
				continue
			}
			if len(out) == 0 {
				_ = c.Flush(ctx)
			}
		}
	})
	for {
		m, err := c.Read(ctx)
		if err != nil {
			break
		}
		out <- msg{m.Lane, bytes.Clone(m.Data)}
	}
	close(out)
	wg.Wait()
}

// goroutineCensus counts this process's goroutines by who owns them: the
// session (running sessionLike, or started by it), this package's own, or
// a library's (anything else), by each goroutine's entry function.
// Goroutines of the test harness itself are left out. interceptors counts
// pion interceptor goroutines among the library's.
type goroutineCensus struct {
	session, transport, library, interceptors int
	byEntry                                   map[string]int
}

func takeCensus() goroutineCensus {
	c := goroutineCensus{byEntry: map[string]int{}}
	for _, g := range gostacks.All() {
		entry := gostacks.Entry(g)
		switch {
		case strings.Contains(entry, "transport.runClients"), strings.HasPrefix(entry, "os/exec."),
			strings.Contains(g, "transport.TestGoroutinesPerConnection"), strings.Contains(g, "testing.tRunner"),
			strings.Contains(g, "BenchmarkIdleConnection"):
			continue // the test harness
		case strings.Contains(g, "transport.sessionLike"):
			c.session++
		case strings.HasPrefix(entry, "github.com/oshun/egbe-edge/transport."):
			c.transport++
		default:
			c.library++
			if strings.Contains(g, "pion/interceptor") {
				c.interceptors++
			}
		}
		c.byEntry[entry]++
	}
	return c
}

func (c goroutineCensus) minus(base goroutineCensus) goroutineCensus {
	d := goroutineCensus{session: c.session - base.session, transport: c.transport - base.transport,
		library: c.library - base.library, interceptors: c.interceptors - base.interceptors, byEntry: map[string]int{}}
	for k, v := range c.byEntry {
		if v -= base.byEntry[k]; v != 0 {
			d.byEntry[k] = v
		}
	}
	return d
}

// Goroutines per connection, edge side, for each transport: the clients
// run in a child process, so everything counted here is the edge's. The
// bounds are the ones documented in README.md.
func TestGoroutinesPerConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a client process per transport")
	}
	const n = 12
	for _, tc := range []struct {
		kind Kind
		// transport is this package's own goroutines per connection, the
		// session's two not counted; library bounds what quic-go or pion
		// run per connection.
		transport, library int
	}{
		{KindWebSocket, 0, 0},
		{KindWebTransport, 2, 10},
		{KindWebRTC, 1, 14},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			leakCheck(t)
			url, cert, active := startForClients(t, tc.kind, sessionLike)
			base := takeCensus()
			stop := runClients(t, tc.kind, url, cert, n)
			testwait.For(t, "every session to be up", func() bool { return active() == n })
			got := settledCensus(t).minus(base)
			stop()
			per := func(v int) float64 { return float64(v) / n }
			t.Logf("%s, per connection: session %.1f, transport %.1f, library %.1f (by entry: %v)",
				tc.kind, per(got.session), per(got.transport), per(got.library), got.byEntry)
			if got.session != 2*n {
				t.Errorf("session goroutines = %d, want 2 per connection (its reader and writer)", got.session)
			}
			if got.transport > tc.transport*n {
				t.Errorf("transport goroutines = %.1f per connection, bound %d", per(got.transport), tc.transport)
			}
			if got.library > tc.library*n {
				t.Errorf("library goroutines = %.1f per connection, bound %d", per(got.library), tc.library)
			}
			if got.interceptors != 0 {
				t.Errorf("%d pion interceptor goroutines: data channel peers need none", got.interceptors)
			}
		})
	}
}

// settledCensus polls until two censuses taken apart agree (timers and
// transient senders have finished) and returns it.
func settledCensus(t *testing.T) goroutineCensus {
	t.Helper()
	prev := takeCensus()
	var got goroutineCensus
	testwait.For(t, "goroutines to settle", func() bool {
		time.Sleep(100 * time.Millisecond) // poll interval
		got = takeCensus()
		same := got.session == prev.session && got.transport == prev.transport && got.library == prev.library
		prev = got
		return same
	})
	return got
}

// startForClients serves kind with h on loopback and returns the
// URL a client dials, the server certificate (DER, WebTransport only) and
// the active-connection gauge.
func startForClients(t testing.TB, kind Kind, h Handler) (string, []byte, func() int) {
	t.Helper()
	switch kind {
	case KindWebSocket:
		_, m, url := startWS(t, DefaultWebSocketConfig(), h)
		return url, nil, func() int { return int(counter(m, "active", "websocket")) }
	case KindWebTransport:
		serverTLS, _, _ := testTLS(t)
		m, _ := testMetrics()
		wt, err := NewWebTransport(DefaultWebTransportConfig(), h, nil, m)
		if err != nil {
			t.Fatal(err)
		}
		pconn, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- wt.Serve(ctx, pconn, serverTLS, nil) }()
		t.Cleanup(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
			pconn.Close()
		})
		return "https://" + pconn.LocalAddr().String() + PathWebTransport, serverTLS.Certificates[0].Leaf.Raw,
			func() int { return int(counter(m, "active", "webtransport")) }
	default:
		_, m, url := startRTC(t, DefaultWebRTCConfig(), h)
		return url, nil, func() int { return int(counter(m, "active", "webrtc")) }
	}
}

// runClients starts a child process (this test binary, running
// TestTransportClientProcess) holding n connections of kind, each of which
// has exchanged a message on every lane; it returns once they are up. stop
// ends the child.
func runClients(t testing.TB, kind Kind, url string, cert []byte, n int) (stop func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTransportClientProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EGBE_TRANSPORT_CLIENT="+string(kind), "EGBE_TRANSPORT_URL="+url,
		"EGBE_TRANSPORT_N="+strconv.Itoa(n), "EGBE_TRANSPORT_CERT="+hex.EncodeToString(cert))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("client process: %v\n%s", err, stderr.Bytes())
		}
	}
	t.Cleanup(stop)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if sc.Text() == "ready" {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return stop
		}
	}
	stop()
	t.Fatalf("client process never became ready\n%s", stderr.Bytes())
	return nil
}

// TestTransportClientProcess is the client side of
// TestGoroutinesPerConnection and BenchmarkIdleConnection, in a child
// process; run directly it does nothing.
func TestTransportClientProcess(t *testing.T) {
	kind := Kind(os.Getenv("EGBE_TRANSPORT_CLIENT"))
	if kind == "" {
		return
	}
	url := os.Getenv("EGBE_TRANSPORT_URL")
	n, _ := strconv.Atoi(os.Getenv("EGBE_TRANSPORT_N"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// closers end every connection cleanly once stdin closes, so the
	// server sees each one end now rather than after an idle timeout.
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for i := range n {
		msg := fmt.Appendf(nil, "hello %d", i)
		switch kind {
		case KindWebSocket:
			conn, _, err := websocket.DefaultDialer.DialContext(ctx, url, nil)
			if err != nil {
				t.Fatal(err)
			}
			closers = append(closers, func() {
				_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
				conn.Close()
			})
			if err := conn.WriteMessage(websocket.BinaryMessage, msg); err != nil {
				t.Fatal(err)
			}
			if _, got, err := conn.ReadMessage(); err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("echo %q %v", got, err)
			}
		case KindWebTransport:
			der, _ := hex.DecodeString(os.Getenv("EGBE_TRANSPORT_CERT"))
			cert, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatal(err)
			}
			pool := x509.NewCertPool()
			pool.AddCert(cert)
			d := &webtransport.Transport{TLSClientConfig: &tls.Config{RootCAs: pool},
				QUICConfig: &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true}}
			_, sess, err := d.Dial(ctx, url, nil)
			if err != nil {
				t.Fatal(err)
			}
			closers = append(closers, func() {
				_ = sess.CloseWithError(0, "")
				select {
				case <-sess.Context().Done():
				case <-time.After(5 * time.Second):
				}
				d.Close()
			})
			str, err := sess.OpenStreamSync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := str.Write(codec.AppendFrame(nil, msg)); err != nil {
				t.Fatal(err)
			}
			if got, err := codec.ReadFrame(bufio.NewReader(str), nil, codec.MaxMessageSize); err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("echo %q %v", got, err)
			}
			for {
				if err := sess.SendDatagram(msg); err != nil {
					t.Fatal(err)
				}
				rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
				_, err := sess.ReceiveDatagram(rctx)
				rcancel()
				if err == nil {
					break
				}
			}
		default:
			c := newRTCClient(t)
			c.connect(t, url, "application/sdp")
			closers = append(closers, func() { _ = c.pc.Close() })
			if err := c.rel.Send(msg); err != nil {
				t.Fatal(err)
			}
			if got := <-c.relIn; !bytes.Equal(got, msg) {
				t.Fatalf("echo %q", got)
			}
			for {
				if err := c.unrel.Send(msg); err != nil {
					t.Fatal(err)
				}
				select {
				case <-c.unrIn:
				case <-time.After(100 * time.Millisecond):
					continue
				}
				break
			}
		}
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}
