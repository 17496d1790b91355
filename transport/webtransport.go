package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

	"github.com/oshun/egbe-edge/codec"
)

// WebTransport serves HTTP/3 on the edge's UDP socket: WebTransport sessions
// at PathWebTransport, every other request to the mux given to Serve.
//
// Lanes: the reliable lane is the first bidirectional stream the client
// opens, carrying codec frames (uvarint length + envelope); the unreliable
// lane is datagrams, one envelope each.
type WebTransport struct {
	cfg WebTransportConfig // immutable after New
	h   Handler            // immutable after New
	log *slog.Logger       // immutable after New
	km  *kindMetrics       // immutable after New

	baseCtx    context.Context // cancelled by Shutdown to end Handlers
	cancelBase context.CancelFunc

	mu      sync.Mutex
	server  *webtransport.Server // guarded by mu; set by Serve
	closing bool                 // guarded by mu
	conns   map[*wtConn]struct{} // guarded by mu
	// handlers counts upgrade requests in flight (each runs a Handler).
	handlers  sync.WaitGroup
	closeOnce sync.Once     // closes server once
	stopped   chan struct{} // closed when Shutdown has finished closing server
}

// NewWebTransport returns the WebTransport transport. m may be nil.
func NewWebTransport(cfg WebTransportConfig, h Handler, logger *slog.Logger, m *Metrics) (*WebTransport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrConfig)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	t := &WebTransport{
		cfg:     cfg,
		h:       h,
		log:     logger.With("component", "transport", "transport", string(KindWebTransport)),
		km:      m.forKind(KindWebTransport),
		conns:   make(map[*wtConn]struct{}),
		stopped: make(chan struct{}),
	}
	t.baseCtx, t.cancelBase = context.WithCancel(context.Background())
	return t, nil
}

// Serve runs HTTP/3 on pconn with tlsConf (h3 ALPN is added) until ctx is
// done or Shutdown is called; it returns nil then. mux serves every request
// that is not a WebTransport CONNECT to PathWebTransport; nil means 404.
// The caller owns pconn and closes it after Serve returns.
func (t *WebTransport) Serve(ctx context.Context, pconn net.PacketConn, tlsConf *tls.Config, mux http.Handler) error {
	if tlsConf == nil || (len(tlsConf.Certificates) == 0 && tlsConf.GetCertificate == nil && tlsConf.GetConfigForClient == nil) {
		return fmt.Errorf("%w: webtransport needs a TLS certificate", ErrConfig)
	}
	if mux == nil {
		mux = http.NotFoundHandler()
	}
	h3 := &http3.Server{
		TLSConfig: http3.ConfigureTLSConfig(tlsConf.Clone()),
		QUICConfig: &quic.Config{
			MaxIdleTimeout:  t.cfg.MaxIdleTimeout,
			KeepAlivePeriod: t.cfg.KeepAlivePeriod,
			// A session uses its CONNECT stream and one reliable stream;
			// the rest is headroom for ordinary HTTP/3 requests. Streams a
			// client opens beyond the first are never read, so their
			// windows bound what it can park here.
			MaxIncomingStreams:             quicMaxIncomingStreams,
			InitialStreamReceiveWindow:     quicInitialStreamWindow,
			MaxStreamReceiveWindow:         quicMaxStreamWindow,
			InitialConnectionReceiveWindow: quicInitialConnWindow,
			MaxConnectionReceiveWindow:     quicMaxConnWindow,
			// webtransport-go v0.13 refuses connections without both.
			EnableDatagrams:                  true,
			EnableStreamResetPartialDelivery: true,
		},
		Logger: t.log,
	}
	srv := &webtransport.Server{
		H3: h3,
		// Browsers open WebTransport cross-origin (page on :8080, session on
		// :8443); the access token in the hello authenticates, not the
		// origin.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	h3.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect && r.URL.Path == PathWebTransport {
			t.upgrade(srv, w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
	// Registers the WebTransport SETTINGS and the connection context hook
	// on h3 before it serves anything.
	webtransport.ConfigureHTTP3Server(h3)

	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		return ErrShuttingDown
	}
	if t.server != nil {
		t.mu.Unlock()
		return fmt.Errorf("%w: Serve called twice", ErrConfig)
	}
	t.server = srv
	t.mu.Unlock()

	stop := context.AfterFunc(ctx, func() {
		// A fresh context: ctx is already done.
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		_ = t.Shutdown(sctx)
	})
	err := t.serveQUIC(srv, h3, pconn)
	if t.isClosing() {
		<-t.stopped // the AfterFunc's Shutdown, if it was that, has finished
		stop()
		return nil
	}
	stop()
	return fmt.Errorf("transport: webtransport serve: %w", err)
}

// serveQUIC accepts QUIC connections on pconn and hands each to srv until
// Shutdown. webtransport-go's own Server.Serve adds to a WaitGroup that
// Server.Close waits on, which races when a shutdown lands while Serve is
// still starting; ServeQUICConn does not touch it, so the accept loop is
// ours.
func (t *WebTransport) serveQUIC(srv *webtransport.Server, h3 *http3.Server, pconn net.PacketConn) error {
	ln, err := quic.ListenEarly(pconn, h3.TLSConfig, h3.QUICConfig)
	if err != nil {
		return err
	}
	defer ln.Close()
	var conns sync.WaitGroup
	defer conns.Wait() // each ends when srv.Close closes its connection
	for {
		qconn, err := ln.Accept(t.baseCtx)
		if err != nil {
			return err
		}
		conns.Go(func() { _ = srv.ServeQUICConn(qconn) })
	}
}

func (t *WebTransport) isClosing() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closing
}

// Shutdown stops accepting sessions, cancels every Handler's context and
// waits for Handlers to return, then closes the HTTP/3 server. If ctx ends
// first, remaining sessions are closed with the draining code and the
// server is closed at once (aborting upgrades still waiting for SETTINGS);
// Shutdown still waits for the Handlers and returns ctx's error.
func (t *WebTransport) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	t.closing = true
	srv := t.server
	t.mu.Unlock()
	t.cancelBase()

	done := make(chan struct{})
	go func() { t.handlers.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		t.mu.Lock()
		for c := range t.conns {
			_ = c.Close(codec.CodeDraining.CloseCode(), "shutting down")
		}
		t.mu.Unlock()
		t.closeServer(srv)
	}
	<-done
	if cerr := t.closeServer(srv); err == nil {
		err = cerr
	}
	return err
}

// closeServer closes srv once; every caller waits until it is closed.
func (t *WebTransport) closeServer(srv *webtransport.Server) error {
	var err error
	t.closeOnce.Do(func() {
		if srv != nil {
			// Closes the QUIC connections, then waits for the server's
			// goroutines.
			if cerr := srv.Close(); cerr != nil && !errors.Is(cerr, http.ErrServerClosed) {
				err = fmt.Errorf("transport: close http3 server: %w", cerr)
			}
		}
		close(t.stopped)
	})
	<-t.stopped
	return err
}

// QUIC flow-control limits per connection. The initial stream window holds
// two maximum-size frames so a reliable lane never stalls on one message;
// quic-go auto-tunes windows up to the maxima for fast paths.
const (
	quicMaxIncomingStreams  = 16
	quicInitialStreamWindow = 2 * (codec.MaxMessageSize + 16)
	quicMaxStreamWindow     = 2 << 20
	quicInitialConnWindow   = 4 * (codec.MaxMessageSize + 16)
	quicMaxConnWindow       = 8 << 20
)

// shutdownGrace bounds the Shutdown that Serve runs when its ctx ends.
const shutdownGrace = 5 * time.Second

// upgrade runs on the HTTP/3 request goroutine for the session's life: the
// request stream is the session, so it must not return early.
func (t *WebTransport) upgrade(srv *webtransport.Server, w http.ResponseWriter, r *http.Request) {
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		t.km.handshakeFailure(hsShutdown)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	t.handlers.Add(1)
	t.mu.Unlock()
	defer t.handlers.Done()

	sess, err := srv.Upgrade(w, r)
	if err != nil {
		t.km.handshakeFailure(hsUpgrade)
		t.log.Debug("webtransport upgrade failed", "err", err, "remote", r.RemoteAddr)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithCancel(t.baseCtx)
	defer cancel()

	// The reliable lane is the client's first bidirectional stream.
	sctx, scancel := context.WithTimeout(ctx, t.cfg.FirstStreamTimeout)
	str, err := sess.AcceptStream(sctx)
	scancel()
	if err != nil {
		t.km.handshakeFailure(hsNoStream)
		_ = sess.CloseWithError(webtransport.SessionErrorCode(codec.CodeHandshakeTimeout.CloseCode()), "no reliable stream")
		return
	}

	c := newWTConn(t, sess, str)
	t.mu.Lock()
	if t.closing {
		t.mu.Unlock()
		_ = c.Close(codec.CodeDraining.CloseCode(), "shutting down")
		c.wg.Wait()
		return
	}
	t.conns[c] = struct{}{}
	t.mu.Unlock()
	t.km.open()

	c.start()
	t.h(ctx, c)
	_ = c.Close(0, "")
	c.wg.Wait()

	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	t.km.closed()
}

// wtConn is one WebTransport session.
type wtConn struct {
	t    *WebTransport         // immutable
	sess *webtransport.Session // immutable
	str  *webtransport.Stream  // reads owned by streamLoop; writes by the WriteReliable caller

	ending
	reliable   chan []byte // streamLoop -> Read; bounded
	unreliable chan []byte // datagramLoop -> Read; bounded, drops when full
	outgoing   chan []byte // WriteUnreliable -> sendLoop; bounded, drops when full
	wbuf       []byte      // owned by the WriteReliable caller
	wg         sync.WaitGroup
}

var _ Conn = (*wtConn)(nil)

func newWTConn(t *WebTransport, sess *webtransport.Session, str *webtransport.Stream) *wtConn {
	return &wtConn{
		t: t, sess: sess, str: str, ending: newEnding(),
		reliable:   make(chan []byte, t.cfg.InboundQueue),
		unreliable: make(chan []byte, t.cfg.InboundQueue),
		outgoing:   make(chan []byte, t.cfg.DatagramQueue),
	}
}

// start runs the connection's three goroutines: reliable-stream reader,
// datagram reader and datagram sender (SendDatagram blocks when quic-go's
// queue is full, so only this connection's sender ever waits on it).
func (c *wtConn) start() {
	c.wg.Go(c.streamLoop)
	c.wg.Go(c.datagramLoop)
	c.wg.Go(c.sendLoop)
	// Whoever ends the session (peer, idle timeout, Close) unblocks the loops.
	c.wg.Go(func() {
		select {
		case <-c.sess.Context().Done():
			// Once the session is closed AcceptStream returns at once with
			// the close reason (the context's cause is only "canceled").
			_, err := c.sess.AcceptStream(context.Background())
			c.end(fmt.Errorf("%w: %w", ErrClosed, err))
		case <-c.done:
		}
	})
}

func (c *wtConn) streamLoop() {
	br := bufio.NewReaderSize(c.str, 4<<10)
	for {
		// nil buf: each message gets its own allocation, owned by the reader.
		msg, err := codec.ReadFrame(br, nil, codec.MaxMessageSize)
		if err != nil {
			if errors.Is(err, codec.ErrFrameTooLarge) {
				err = fmt.Errorf("%w: %w", ErrMessageTooLarge, err)
				_ = c.closeWith(codec.CodeFrameTooLarge.CloseCode(), "message too large", err)
				return
			}
			c.end(fmt.Errorf("%w: reliable stream: %w", ErrClosed, err))
			return
		}
		c.t.km.msg(Reliable, dirIn, len(msg))
		select {
		case c.reliable <- msg: // blocks: reliable traffic is never dropped
		case <-c.done:
			return
		}
	}
}

func (c *wtConn) datagramLoop() {
	for {
		msg, err := c.sess.ReceiveDatagram(c.sess.Context())
		if err != nil {
			return
		}
		c.t.km.msg(Unreliable, dirIn, len(msg))
		select {
		case c.unreliable <- msg:
		default:
			c.t.km.drop(dropRecvQueueFull)
		}
	}
}

func (c *wtConn) sendLoop() {
	for {
		select {
		case msg := <-c.outgoing:
			if err := c.sess.SendDatagram(msg); err != nil {
				c.t.km.drop(dropSendQueueFull)
				continue
			}
			c.t.km.msg(Unreliable, dirOut, len(msg))
		case <-c.done:
			return
		}
	}
}

func (c *wtConn) Kind() Kind            { return KindWebTransport }
func (c *wtConn) Encoding() Encoding    { return EncodingProto }
func (c *wtConn) RemoteAddr() net.Addr  { return c.sess.RemoteAddr() }
func (c *wtConn) HasUnreliable() bool   { return true }
func (c *wtConn) Done() <-chan struct{} { return c.done }

// Read returns the next message from either lane, queued messages first.
func (c *wtConn) Read(ctx context.Context) (Message, error) {
	return readLanes(ctx, c.reliable, c.unreliable, c.done, c.reason)
}

// WriteReliable writes one framed message on the reliable stream.
func (c *wtConn) WriteReliable(ctx context.Context, msg []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	deadline := time.Now().Add(c.t.cfg.WriteTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.str.SetWriteDeadline(deadline)
	// One Write per frame: quic-go copies it into the stream's send buffer.
	c.wbuf = codec.AppendFrame(c.wbuf[:0], msg)
	_, err := c.str.Write(c.wbuf)
	if cap(c.wbuf) > 4<<10 {
		c.wbuf = nil // do not pin a large buffer to an idle session
	}
	if err != nil {
		c.end(fmt.Errorf("%w: %w", ErrClosed, err))
		return c.reason()
	}
	c.t.km.msg(Reliable, dirOut, len(msg))
	return nil
}

// WriteUnreliable queues one datagram for the sender without blocking.
func (c *wtConn) WriteUnreliable(msg []byte) error {
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	// Copy: the caller may reuse msg as soon as this returns.
	b := make([]byte, len(msg))
	copy(b, msg)
	select {
	case c.outgoing <- b:
		return nil
	default:
		c.t.km.drop(dropSendQueueFull)
		return ErrDropped
	}
}

// Close ends the session with CloseWithError(code, reason).
func (c *wtConn) Close(code uint32, reason string) error {
	return c.closeWith(code, reason, fmt.Errorf("%w: closed by edge with code %d", ErrClosed, code))
}

// wtCloseGrace is how long a closing session keeps its reliable stream
// before the session close resets it: closing the session at once would
// discard what was just written and not yet sent (the final Error that says
// why), which WebSocket's in-order close frame never loses.
const wtCloseGrace = 200 * time.Millisecond

func (c *wtConn) closeWith(code uint32, reason string, why error) error {
	if !c.end(why) {
		return nil
	}
	// Unblock the stream reader. CancelRead alone is not enough: when the
	// client's WT_SESSION_GONE reset arrived first, webtransport-go's Read
	// waits for the session's close, and CancelRead detaches the stream
	// from the session so that close never reaches it; only a read
	// deadline wakes that wait.
	_ = c.str.SetReadDeadline(time.Now())
	c.str.CancelRead(0)
	// FIN after the buffered frames, then the session close with its code.
	_ = c.str.Close()
	time.AfterFunc(wtCloseGrace, func() {
		_ = c.sess.CloseWithError(webtransport.SessionErrorCode(code), reason)
	})
	return nil
}

// Flush is a no-op: WriteReliable writes each frame at once.
func (c *wtConn) Flush(context.Context) error { return nil }
