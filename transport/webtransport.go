package transport

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
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
	// wbufs holds write buffers, taken only while a session has frames
	// buffered.
	wbufs *bufList

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
	t.wbufs = newBufList(4 << 10)
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
		// A connection with no request or session open is closed after
		// this (QUIC keepalives do not count), so a client cannot park
		// bare QUIC connections here.
		IdleTimeout: t.cfg.HTTP3IdleTimeout,
		Logger:      t.log,
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
		c.stop()
		return
	}
	t.conns[c] = struct{}{}
	t.mu.Unlock()
	t.km.open()

	c.start()
	t.h(ctx, c)
	_ = c.Close(0, "")
	c.stop()

	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	t.km.closed()
}

// wtReadBuffer is each session's reliable-stream read buffer, kept for the
// session's life: frames that fit it are returned from it without a copy.
const wtReadBuffer = 1 << 10

// wtConn is one WebTransport session.
//
// Goroutines: the Handler's (the upgrade request's) reads the reliable
// stream itself in Read; one receiver per session waits for datagrams,
// parks them in a latest-wins queue and interrupts Read with a read
// deadline; a datagram sender runs only while datagrams wait to be sent
// (quic-go's SendDatagram blocks when its own queue is full, and
// WriteUnreliable must not).
type wtConn struct {
	t    *WebTransport         // immutable
	sess *webtransport.Session // immutable
	str  *webtransport.Stream  // immutable: reads by Read, writes under wmu

	ending
	stopRecv  context.CancelFunc // immutable: ends the receiver's wait
	closeOnce sync.Once          // the session close, whatever ended the Conn first

	// Read side, owned by the Read caller.
	rbuf       []byte // wtReadBuffer bytes
	rpos, rend int    // unread bytes are rbuf[rpos:rend]
	left       int    // bytes of the frame being assembled into msg still to read
	inFrame    bool   // a frame larger than rbuf is being assembled into msg
	msg        []byte // that frame
	dg         []byte // the datagram last returned
	readCtx    context.Context
	stopCtx    func() bool

	in  *latest // received datagrams: receiver -> Read
	out *latest // datagrams to send: WriteUnreliable -> sender

	// Write side: the session writer and Close take wmu to write.
	wmu      sync.Mutex
	wbuf     *[]byte   // guarded by wmu: from t.wbufs; nil while nothing is buffered
	wdl      time.Time // guarded by wmu: the write deadline set on str
	werr     error     // guarded by wmu: the first write error
	batching bool      // guarded by wmu: Flush was called, so WriteReliable only buffers

	sendMu   sync.Mutex
	sending  bool           // guarded by sendMu: a sender goroutine is running
	finished bool           // guarded by sendMu: no sender may start any more
	sbuf     []byte         // owned by the running sender
	sendFn   func()         // immutable: c.send, bound once
	wg       sync.WaitGroup // the receiver and the sender
}

var _ Conn = (*wtConn)(nil)

func newWTConn(t *WebTransport, sess *webtransport.Session, str *webtransport.Stream) *wtConn {
	c := &wtConn{
		t: t, sess: sess, str: str, ending: newEnding(),
		rbuf: make([]byte, wtReadBuffer),
		in:   newLatest(t.cfg.InboundQueue),
		out:  newLatest(t.cfg.DatagramQueue),
	}
	c.sendFn = c.send
	return c
}

// start runs the datagram receiver.
func (c *wtConn) start() {
	ctx, cancel := context.WithCancel(c.sess.Context())
	c.stopRecv = cancel
	c.wg.Go(func() { c.receive(ctx) })
}

// stop ends the Conn's goroutines and waits for them. The Conn has ended.
func (c *wtConn) stop() {
	c.sendMu.Lock()
	c.finished = true
	c.sendMu.Unlock()
	if c.stopRecv != nil {
		c.stopRecv()
	}
	c.wg.Wait()
}

// endWith ends the Conn (first cause wins) and wakes Read and the receiver.
func (c *wtConn) endWith(err error) {
	if c.end(err) {
		if c.stopRecv != nil {
			c.stopRecv()
		}
		_ = c.str.SetReadDeadline(time.Now())
	}
}

// receive parks each datagram for Read (dropping the oldest when Read is
// behind) and wakes Read. It also notices the session's end, whoever ended
// it, and ends the Conn with its reason.
func (c *wtConn) receive(ctx context.Context) {
	for {
		msg, err := c.sess.ReceiveDatagram(ctx)
		if err != nil {
			break
		}
		c.t.km.msg(Unreliable, dirIn, len(msg))
		if c.in.push(msg) {
			c.t.km.drop(dropRecvQueueFull)
		}
		c.wake()
	}
	select {
	case <-c.sess.Context().Done():
		// Once the session is closed AcceptStream returns at once with the
		// close reason (the context's cause is only "canceled").
		_, err := c.sess.AcceptStream(context.Background())
		c.endWith(fmt.Errorf("%w: %w", ErrClosed, err))
	case <-c.done:
	}
}

// wake interrupts a Read blocked on the reliable stream: Read clears the
// deadline, then looks at the datagram queue, ctx and the Conn's end, so a
// wake is never lost (whatever was parked before the deadline was set is
// seen after it is cleared).
func (c *wtConn) wake() { _ = c.str.SetReadDeadline(time.Now()) }

func (c *wtConn) Kind() Kind            { return KindWebTransport }
func (c *wtConn) Encoding() Encoding    { return EncodingProto }
func (c *wtConn) RemoteAddr() net.Addr  { return c.sess.RemoteAddr() }
func (c *wtConn) HasUnreliable() bool   { return true }
func (c *wtConn) Done() <-chan struct{} { return c.done }

// Read returns the next message: a parked datagram first, else the next
// frame of the reliable stream, read here without another goroutine.
func (c *wtConn) Read(ctx context.Context) (Message, error) {
	if ctx != c.readCtx {
		if c.stopCtx != nil {
			c.stopCtx()
		}
		c.readCtx = ctx
		c.stopCtx = context.AfterFunc(ctx, c.wake)
	}
	for {
		select {
		case <-c.done:
			return Message{}, c.reason()
		default:
		}
		if cap(c.dg) > latestKeep {
			c.dg = nil
		}
		if dg, ok := c.in.pop(c.dg); ok {
			c.dg = dg
			return Message{Lane: Unreliable, Data: dg}, nil
		}
		if m, ok, err := c.frame(); err != nil {
			err = fmt.Errorf("%w: %w", ErrMessageTooLarge, err)
			_ = c.closeWith(codec.CodeFrameTooLarge.CloseCode(), "message too large", err)
			return Message{}, err
		} else if ok {
			c.t.km.msg(Reliable, dirIn, len(m))
			return Message{Lane: Reliable, Data: m}, nil
		}
		if err := c.readMore(ctx); err != nil {
			if errors.Is(err, errReadCancelled) {
				return Message{}, fmt.Errorf("%w: %w", ErrClosed, ctx.Err())
			}
			c.endWith(err)
			return Message{}, c.reason()
		}
	}
}

// frame returns the next whole frame if it is buffered (a frame that fits
// rbuf is returned from it, a larger one from msg). An error is a length
// prefix over MaxMessageSize (or one that overflows 64 bits).
func (c *wtConn) frame() ([]byte, bool, error) {
	if c.inFrame {
		n := min(c.rend-c.rpos, c.left)
		c.msg = append(c.msg, c.rbuf[c.rpos:c.rpos+n]...)
		c.rpos += n
		c.left -= n
		if c.left > 0 {
			return nil, false, nil
		}
		c.inFrame = false
		return c.msg, true, nil
	}
	buf := c.rbuf[c.rpos:c.rend]
	v, n := binary.Uvarint(buf)
	switch {
	case n == 0:
		return nil, false, nil
	case n < 0:
		return nil, false, fmt.Errorf("%w: length prefix overflows", codec.ErrFrameTooLarge)
	case v > codec.MaxMessageSize:
		return nil, false, fmt.Errorf("%w: %d > %d bytes", codec.ErrFrameTooLarge, v, codec.MaxMessageSize)
	}
	size := int(v)
	if n+size <= len(c.rbuf) {
		if len(buf) < n+size {
			return nil, false, nil
		}
		c.rpos += n + size
		return buf[n : n+size], true, nil
	}
	// Larger than the read buffer: assemble it in msg.
	c.rpos += n
	if cap(c.msg) > wsKeepMsg {
		c.msg = nil
	}
	c.msg = slices.Grow(c.msg[:0], size)
	c.inFrame, c.left = true, size
	return c.frame()
}

// readMore reads what the stream has: into rbuf, or straight into msg for a
// large frame's remainder. It returns nil after a wake (the caller looks at
// the datagram queue again), errReadCancelled when ctx is done, and the
// stream's error (EOF included) otherwise.
func (c *wtConn) readMore(ctx context.Context) error {
	var p []byte
	direct := c.inFrame && c.left >= len(c.rbuf)
	switch {
	case direct:
		p = c.msg[len(c.msg) : len(c.msg)+c.left]
	default:
		if c.rpos == c.rend {
			c.rpos, c.rend = 0, 0
		} else if c.rpos > 0 {
			c.rend = copy(c.rbuf, c.rbuf[c.rpos:c.rend])
			c.rpos = 0
		}
		p = c.rbuf[c.rend:]
	}
	n, err := c.str.Read(p)
	if direct {
		c.msg = c.msg[:len(c.msg)+n]
		c.left -= n
		// With left at 0 the frame is whole: frame() hands it over.
	} else {
		c.rend += n
	}
	switch {
	case n > 0 || err == nil:
		// An error that came with data recurs on the next read.
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		_ = c.str.SetReadDeadline(time.Time{})
		if ctx.Err() != nil {
			return errReadCancelled
		}
		return nil
	case errors.Is(err, io.EOF):
		if c.rpos == c.rend && !c.inFrame {
			return fmt.Errorf("%w: the client finished its reliable stream", ErrClosed)
		}
		return fmt.Errorf("%w: reliable stream: %w", ErrClosed, io.ErrUnexpectedEOF)
	default:
		return fmt.Errorf("%w: reliable stream: %w", ErrClosed, err)
	}
}

// buffer is the pending write buffer, from the free list if there is none.
// Called with wmu held.
func (c *wtConn) buffer() *[]byte {
	if c.wbuf == nil {
		c.wbuf = c.t.wbufs.get()
	}
	return c.wbuf
}

// release gives the write buffer back. Called with wmu held.
func (c *wtConn) release() {
	if c.wbuf != nil {
		c.t.wbufs.put(c.wbuf)
		c.wbuf = nil
	}
}

// writeLocked writes everything buffered in one stream write (quic-go
// copies it into the stream's send buffer). Called with wmu held.
func (c *wtConn) writeLocked(ctx context.Context) error {
	if c.wbuf == nil || len(*c.wbuf) == 0 {
		return nil
	}
	now := time.Now()
	d := now.Add(c.t.cfg.WriteTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	if c.wdl.IsZero() || c.wdl.After(d) || c.wdl.Sub(now) < c.t.cfg.WriteTimeout/2 {
		_ = c.str.SetWriteDeadline(d)
		c.wdl = d
	}
	_, err := c.str.Write(*c.wbuf)
	c.release()
	if err != nil {
		c.werr = err
	}
	return err
}

// WriteReliable buffers one framed message on the reliable stream. Until
// the first Flush it also writes it at once (a caller that never flushes
// still works); from then on frames leave at the next Flush or when the
// batch reaches wsMaxBatch.
func (c *wtConn) WriteReliable(ctx context.Context, msg []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	c.wmu.Lock()
	err := c.werr
	if err == nil {
		buf := c.buffer()
		if len(*buf) > 0 && len(*buf)+binary.MaxVarintLen64+len(msg) > wsMaxBatch {
			err = c.writeLocked(ctx)
			buf = c.buffer()
		}
		*buf = codec.AppendFrame(*buf, msg)
		if err == nil && !c.batching {
			err = c.writeLocked(ctx)
		}
	}
	c.wmu.Unlock()
	if err != nil {
		c.endWith(fmt.Errorf("%w: %w", ErrClosed, err))
		return c.reason()
	}
	c.t.km.msg(Reliable, dirOut, len(msg))
	return nil
}

// Flush writes every buffered frame in one stream write.
func (c *wtConn) Flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.wmu.Lock()
	c.batching = true
	err := c.werr
	if err == nil {
		err = c.writeLocked(ctx)
	}
	c.wmu.Unlock()
	if err != nil {
		c.endWith(fmt.Errorf("%w: %w", ErrClosed, err))
		return c.reason()
	}
	return nil
}

// WriteUnreliable queues one datagram for the sender without blocking; a
// full queue drops its oldest datagram (latest wins).
func (c *wtConn) WriteUnreliable(msg []byte) error {
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	if c.out.push(msg) {
		c.t.km.drop(dropSendQueueFull)
	}
	c.sendMu.Lock()
	if !c.sending && !c.finished {
		c.sending = true
		c.wg.Add(1)
		go c.sendFn() // a func value made once: no closure allocated per burst
	}
	c.sendMu.Unlock()
	return nil
}

// send hands queued datagrams to quic-go until the queue is empty, then
// exits: an idle session has no sender goroutine.
func (c *wtConn) send() {
	defer c.wg.Done()
	for {
		var ok bool
		if cap(c.sbuf) > latestKeep {
			c.sbuf = nil
		}
		c.sbuf, ok = c.out.pop(c.sbuf)
		if !ok {
			c.sendMu.Lock()
			if c.out.len() == 0 {
				c.sending = false
				c.sendMu.Unlock()
				return
			}
			c.sendMu.Unlock()
			continue
		}
		// SendDatagram copies; it blocks only while quic-go's own queue
		// is full, and fails once the session is closed.
		if err := c.sess.SendDatagram(c.sbuf); err != nil {
			var tooLarge *quic.DatagramTooLargeError
			if errors.As(err, &tooLarge) {
				c.t.km.drop(dropSendTooLarge)
			} else {
				c.t.km.drop(dropSendFailed)
			}
			continue
		}
		c.t.km.msg(Unreliable, dirOut, len(c.sbuf))
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

// closeWith ends the Conn with why (unless it has ended already) and,
// once, closes the session with code: whatever ended the Conn first (the
// client's FIN, a bad length prefix, the peer), the session is always
// closed with the code of the first Close.
func (c *wtConn) closeWith(code uint32, reason string, why error) error {
	c.endWith(why)
	c.closeOnce.Do(func() {
		// Unblock a Read in progress. CancelRead alone is not enough: when
		// the client's WT_SESSION_GONE reset arrived first,
		// webtransport-go's Read waits for the session's close, and
		// CancelRead detaches the stream from the session so that close
		// never reaches it; only a read deadline wakes that wait.
		_ = c.str.SetReadDeadline(time.Now())
		c.str.CancelRead(0)
		// What is buffered, then FIN, then the session close with its code.
		if !c.wmu.TryLock() {
			// The writer is inside a write: bound it, then follow it.
			_ = c.str.SetWriteDeadline(time.Now().Add(closeWriteTimeout))
			c.wmu.Lock()
		}
		if c.werr == nil {
			_ = c.writeLocked(context.Background())
		}
		c.werr = ErrClosed
		c.release()
		_ = c.str.Close()
		c.wmu.Unlock()
		time.AfterFunc(wtCloseGrace, func() {
			_ = c.sess.CloseWithError(webtransport.SessionErrorCode(code), reason)
		})
	})
	return nil
}
