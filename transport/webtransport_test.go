package transport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
	"github.com/quic-go/webtransport-go"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// startWT serves WebTransport (and a /hello HTTP/3 route) on 127.0.0.1:0.
func startWT(t testing.TB, h Handler) (*WebTransport, *Metrics, string, *tls.Config) {
	t.Helper()
	return startWTConfig(t, DefaultWebTransportConfig(), h)
}

func startWTConfig(t testing.TB, cfg WebTransportConfig, h Handler) (*WebTransport, *Metrics, string, *tls.Config) {
	t.Helper()
	serverTLS, clientTLS, _ := testTLS(t)
	m, _ := testMetrics()
	wt, err := NewWebTransport(cfg, h, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	pconn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello over "+r.Proto) })
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- wt.Serve(ctx, pconn, serverTLS, mux) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			// Fail here, not at the package's timeout 25 minutes on.
			t.Errorf("Serve still running 30 s after its context ended: a Handler never returned")
		}
		pconn.Close()
	})
	return wt, m, "https://" + pconn.LocalAddr().String(), clientTLS
}

func dialWT(t testing.TB, base string, clientTLS *tls.Config) *webtransport.Session {
	t.Helper()
	tr := &webtransport.Transport{
		TLSClientConfig: clientTLS,
		QUICConfig:      &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true},
	}
	t.Cleanup(func() { tr.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, sess, err := tr.Dial(ctx, base+PathWebTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	t.Cleanup(func() { sess.CloseWithError(0, "") })
	return sess
}

func TestWebTransportEcho(t *testing.T) {
	leakCheck(t)
	_, m, base, clientTLS := startWT(t, func(ctx context.Context, c Conn) {
		if c.Kind() != KindWebTransport || !c.HasUnreliable() || c.Encoding() != EncodingProto {
			t.Errorf("conn = %s unreliable=%v enc=%v", c.Kind(), c.HasUnreliable(), c.Encoding())
		}
		echo(ctx, c)
	})

	// Ordinary HTTP/3 requests reach the mux.
	h3 := &http3.Transport{TLSClientConfig: clientTLS}
	defer h3.Close()
	resp, err := (&http.Client{Transport: h3}).Get(base + "/hello")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello over HTTP/3.0" {
		t.Errorf("mux body = %q", body)
	}

	sess := dialWT(t, base, clientTLS)
	str, err := sess.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(str)
	for i := 0; i < 5; i++ {
		msg := fmt.Appendf(nil, "reliable %d", i)
		if _, err := str.Write(codec.AppendFrame(nil, msg)); err != nil {
			t.Fatal(err)
		}
		got, err := codec.ReadFrame(br, nil, codec.MaxMessageSize)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(msg) {
			t.Fatalf("echo %q, want %q", got, msg)
		}
	}
	// Datagrams may be lost even on loopback: resend until one comes back.
	msg := []byte("unreliable")
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("no datagram echoed")
		}
		if err := sess.SendDatagram(msg); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		got, err := sess.ReceiveDatagram(ctx)
		cancel()
		if err == nil {
			if string(got) != string(msg) {
				t.Fatalf("datagram echo %q", got)
			}
			break
		}
	}
	if got := counter(m, "messages", "webtransport", "unreliable", "out"); got < 1 {
		t.Errorf("unreliable out = %v", got)
	}
	if got := counter(m, "accepted", "webtransport"); got != 1 {
		t.Errorf("accepted = %v", got)
	}
}

func TestWebTransportOversize(t *testing.T) {
	leakCheck(t)
	errs := make(chan error, 1)
	_, _, base, clientTLS := startWT(t, recordingEcho(errs))
	sess := dialWT(t, base, clientTLS)
	str, err := sess.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// A length prefix one over the limit: refused before the body is read.
	if _, err := str.Write(binary.AppendUvarint(nil, codec.MaxMessageSize+1)); err != nil {
		t.Fatal(err)
	}
	var se *webtransport.SessionError
	if err := sessionErr(sess); !errors.As(err, &se) || uint32(se.ErrorCode) != codec.CodeFrameTooLarge.CloseCode() {
		t.Fatalf("session ended with %v, want code %d", err, codec.CodeFrameTooLarge.CloseCode())
	}
	if err := <-errs; !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("server Read = %v, want ErrMessageTooLarge", err)
	}
}

func TestWebTransportCloseCode(t *testing.T) {
	leakCheck(t)
	_, m, base, clientTLS := startWT(t, func(ctx context.Context, c Conn) {
		if _, err := c.Read(ctx); err != nil {
			return
		}
		_ = c.Close(codec.CodeDraining.CloseCode(), "bye")
	})
	sess := dialWT(t, base, clientTLS)
	str, err := sess.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := str.Write(codec.AppendFrame(nil, []byte("hi"))); err != nil {
		t.Fatal(err)
	}
	var se *webtransport.SessionError
	if err := sessionErr(sess); !errors.As(err, &se) || uint32(se.ErrorCode) != 4040 || se.Message != "bye" {
		t.Fatalf("session ended with %v, want 4040 bye", err)
	}
	testwait.For(t, "active to reach 0", func() bool { return counter(m, "active", "webtransport") == 0 })
}

// sessionErr waits for sess to end and returns why.
func sessionErr(sess *webtransport.Session) error {
	<-sess.Context().Done()
	_, err := sess.AcceptStream(context.Background())
	return err
}

// WriteUnreliable never blocks: with the sender behind, a full queue drops
// its oldest datagram, so the freshest state is sent next.
func TestWebTransportWriteUnreliableDropsOldest(t *testing.T) {
	m, _ := testMetrics()
	c := &wtConn{t: &WebTransport{km: m.forKind(KindWebTransport)}, ending: newEnding(), out: newLatest(2)}
	c.finished = true // no sender starts: it stays behind
	for _, msg := range []string{"1", "2", "3", "4"} {
		if err := c.WriteUnreliable([]byte(msg)); err != nil {
			t.Fatal(err)
		}
	}
	if got := counter(m, "drops", "webtransport", dropSendQueueFull); got != 2 {
		t.Errorf("drops = %v, want 2", got)
	}
	for _, want := range []string{"3", "4"} {
		got, ok := c.out.pop(nil)
		if !ok || string(got) != want {
			t.Fatalf("queued %q %v, want %q", got, ok, want)
		}
	}
	c.end(ErrClosed)
	if err := c.WriteUnreliable([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
}

func TestWebTransportServeCancelEndsSessions(t *testing.T) {
	leakCheck(t)
	serverTLS, clientTLS, _ := testTLS(t)
	wt, err := NewWebTransport(DefaultWebTransportConfig(), echo, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pconn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pconn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- wt.Serve(ctx, pconn, serverTLS, nil) }()
	sess := dialWT(t, "https://"+pconn.LocalAddr().String(), clientTLS)
	str, err := sess.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := str.Write(codec.AppendFrame(nil, []byte("hi"))); err != nil {
		t.Fatal(err)
	}
	if _, err := codec.ReadFrame(bufio.NewReader(str), nil, codec.MaxMessageSize); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	<-sess.Context().Done() // the session ended with the server
}

// A client whose reliable stream is reset with WT_SESSION_GONE before the
// edge closes the session (the client is closing, and its close capsule is
// still on the way) must not leave the stream reader behind: Close has to
// wake webtransport-go's wait for the session close, which CancelRead
// alone never delivers to the stream. Left behind, it kept the Handler's
// upgrade, and so Shutdown, waiting forever.
func TestWebTransportCloseAfterSessionGoneReset(t *testing.T) {
	leakCheck(t)
	_, m, base, clientTLS := startWT(t, func(ctx context.Context, c Conn) {
		for {
			msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			if msg.Lane == Unreliable {
				_ = c.Close(codec.CodeDraining.CloseCode(), "bye")
				return
			}
			if err := c.WriteReliable(ctx, msg.Data); err != nil {
				return
			}
		}
	})

	// Dial through webtransport-go, keeping the QUIC connection so the
	// test can open a raw stream and reset it the way a closing session
	// resets its streams.
	var qconn *quic.Conn
	tr := &webtransport.Transport{
		TLSClientConfig: clientTLS,
		QUICConfig:      &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true},
		DialAddr: func(ctx context.Context, addr string, tlsConf *tls.Config, conf *quic.Config) (*quic.Conn, error) {
			c, err := quic.DialAddrEarly(ctx, addr, tlsConf, conf)
			qconn = c
			return c, err
		},
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, sess, err := tr.Dial(ctx, base+PathWebTransport, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.CloseWithError(0, "")

	// The reliable lane, opened by hand: the WebTransport stream header
	// (frame type 0x41, then the session id, which is the CONNECT
	// stream's id: the client's first bidirectional stream, 0).
	str, err := qconn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hdr := quicvarint.Append(quicvarint.Append(nil, 0x41), 0)
	if _, err := str.Write(codec.AppendFrame(hdr, []byte("hi"))); err != nil {
		t.Fatal(err)
	}
	if b, err := codec.ReadFrame(bufio.NewReader(str), nil, codec.MaxMessageSize); err != nil || string(b) != "hi" {
		t.Fatalf("echo: %q %v", b, err)
	}
	str.CancelWrite(webtransport.WTSessionGoneErrorCode)
	// Let the reset reach the edge's stream reader before the datagram
	// that makes the edge close (no close capsule is ever sent).
	time.Sleep(100 * time.Millisecond)
	for i := 0; counter(m, "active", "webtransport") != 0; i++ {
		if i == 200 {
			t.Fatal("the session is still active: the stream reader never returned after Close")
		}
		_ = sess.SendDatagram([]byte("close"))
		time.Sleep(50 * time.Millisecond) // poll interval; datagrams may be lost
	}
}

// waitSessionEnd waits for the edge to end sess and returns why; a session
// still open after 10 s fails the test (the edge never closed it).
func waitSessionEnd(t *testing.T, sess *webtransport.Session) error {
	t.Helper()
	select {
	case <-sess.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session is still open 10 s later: the edge never closed it")
	}
	_, err := sess.AcceptStream(context.Background())
	return err
}

// A length prefix that overflows 64 bits is refused like one over the
// limit: the session is closed with frame_too_large, not left open with
// its goroutines behind.
func TestWebTransportOverlongLengthClosesSession(t *testing.T) {
	leakCheck(t)
	errs := make(chan error, 1)
	_, m, base, clientTLS := startWT(t, recordingEcho(errs))
	sess := dialWT(t, base, clientTLS)
	str, err := sess.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := str.Write(bytes.Repeat([]byte{0xFF}, 11)); err != nil {
		t.Fatal(err)
	}
	var se *webtransport.SessionError
	if err := waitSessionEnd(t, sess); !errors.As(err, &se) || uint32(se.ErrorCode) != codec.CodeFrameTooLarge.CloseCode() {
		t.Fatalf("session ended with %v, want code %d", err, codec.CodeFrameTooLarge.CloseCode())
	}
	if err := <-errs; !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("server Read = %v, want ErrMessageTooLarge", err)
	}
	testwait.For(t, "active to reach 0", func() bool { return counter(m, "active", "webtransport") == 0 })
}

// A client that finishes its reliable stream without a message ends the
// Conn; the Handler's Close must still close the session with its code
// (the Conn having ended first used to skip the session close).
func TestWebTransportFinWithoutHelloClosesSession(t *testing.T) {
	leakCheck(t)
	readErr := make(chan error, 1)
	_, m, base, clientTLS := startWT(t, func(ctx context.Context, c Conn) {
		_, err := c.Read(ctx)
		readErr <- err
		_ = c.Close(codec.CodeHelloRequired.CloseCode(), "no hello")
	})
	sess := dialWT(t, base, clientTLS)
	str, err := sess.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := str.Close(); err != nil { // the stream header, then FIN
		t.Fatal(err)
	}
	if err := <-readErr; !errors.Is(err, ErrClosed) {
		t.Fatalf("server Read = %v, want ErrClosed", err)
	}
	var se *webtransport.SessionError
	if err := waitSessionEnd(t, sess); !errors.As(err, &se) || uint32(se.ErrorCode) != codec.CodeHelloRequired.CloseCode() {
		t.Fatalf("session ended with %v, want code %d", err, codec.CodeHelloRequired.CloseCode())
	}
	testwait.For(t, "active to reach 0", func() bool { return counter(m, "active", "webtransport") == 0 })
}

// A bare QUIC connection that keeps itself alive with PINGs and never
// sends a request is closed after HTTP3IdleTimeout.
func TestWebTransportBareQUICDropped(t *testing.T) {
	leakCheck(t)
	cfg := DefaultWebTransportConfig()
	cfg.HTTP3IdleTimeout = 300 * time.Millisecond
	_, _, base, clientTLS := startWTConfig(t, cfg, echo)
	tlsConf := clientTLS.Clone()
	tlsConf.NextProtos = []string{http3.NextProtoH3}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, strings.TrimPrefix(base, "https://"), tlsConf,
		&quic.Config{KeepAlivePeriod: 50 * time.Millisecond, MaxIdleTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	select {
	case <-conn.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a bare QUIC connection with keepalives was still open 10 s later")
	}
	var ae *quic.ApplicationError
	if err := context.Cause(conn.Context()); !errors.As(err, &ae) || !ae.Remote {
		t.Fatalf("connection ended with %v, want the server's application close", err)
	}
}

// The HTTP/3 idle timeout counts requests and sessions, not traffic: an
// open WebTransport session keeps its connection however long it lasts.
func TestWebTransportSessionOutlivesHTTP3IdleTimeout(t *testing.T) {
	leakCheck(t)
	cfg := DefaultWebTransportConfig()
	cfg.HTTP3IdleTimeout = 100 * time.Millisecond
	_, _, base, clientTLS := startWTConfig(t, cfg, echo)
	sess := dialWT(t, base, clientTLS)
	str, err := sess.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(str)
	start := time.Now()
	for i := 0; time.Since(start) < 10*cfg.HTTP3IdleTimeout; i++ {
		msg := fmt.Appendf(nil, "m%d", i)
		if _, err := str.Write(codec.AppendFrame(nil, msg)); err != nil {
			t.Fatalf("after %s: %v", time.Since(start), err)
		}
		got, err := codec.ReadFrame(br, nil, codec.MaxMessageSize)
		if err != nil || string(got) != string(msg) {
			t.Fatalf("after %s: echo %q %v", time.Since(start), got, err)
		}
	}
}
