package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/wsframe"
)

// WebSocket serves the WebSocket transport (one reliable lane) at
// PathWebSocket. gorilla performs the HTTP upgrade; after the 101 response
// this package frames the connection itself (internal/wsframe), so that:
//
//   - the reader (the Handler's Read calls) parses frames out of one
//     ReadBufferSize buffer the connection keeps, and returns a message that
//     fits it without copying (valid until the next Read);
//   - the writer (the Handler's WriteReliable and Flush calls) appends frames
//     to a buffer from a shared free list that leaves in one write per
//     Flush, and an idle connection holds no write buffer;
//   - keepalive pings come from the reader's read deadline, not a timer or a
//     goroutine.
//
// Each connection's Handler runs on one goroutine the transport starts; the
// transport runs no other goroutine per connection.
type WebSocket struct {
	cfg      WebSocketConfig    // immutable after New
	h        Handler            // immutable after New
	log      *slog.Logger       // immutable after New
	km       *kindMetrics       // immutable after New
	upgrader websocket.Upgrader // immutable after New
	allowed  Origins            // immutable after New
	wbufs    *bufList           // write buffers, shared by every connection

	baseCtx    context.Context // cancelled by Shutdown to end Handlers
	cancelBase context.CancelFunc

	mu       sync.Mutex
	closing  bool                 // guarded by mu
	conns    map[*wsConn]struct{} // guarded by mu
	handlers sync.WaitGroup       // one per accepted connection
}

// NewWebSocket returns the WebSocket transport handler. m may be nil.
func NewWebSocket(cfg WebSocketConfig, h Handler, logger *slog.Logger, m *Metrics) (*WebSocket, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrConfig)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &WebSocket{
		cfg:     cfg,
		h:       h,
		log:     logger.With("component", "transport", "transport", string(KindWebSocket)),
		km:      m.forKind(KindWebSocket),
		allowed: NewOrigins(cfg.AllowedOrigins),
		conns:   make(map[*wsConn]struct{}),
	}
	s.wbufs = newBufList(cfg.WriteBufferSize)
	s.baseCtx, s.cancelBase = context.WithCancel(context.Background())
	s.upgrader = websocket.Upgrader{
		HandshakeTimeout: cfg.HandshakeTimeout,
		// gorilla never reads or writes frames here (this package does), so
		// it gets no buffers of its own: 0 reuses net/http's hijacked
		// reader, and a write pool is only drawn from by gorilla's writes.
		ReadBufferSize:  0,
		WriteBufferPool: &bufPool{},
		Subprotocols:    []string{SubprotocolProto, SubprotocolJSON},
		CheckOrigin:     s.checkOrigin,
	}
	return s, nil
}

func (s *WebSocket) checkOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	return o == "" || s.allowed.Allow(o)
}

// ServeHTTP upgrades the request and starts the connection's goroutine,
// which runs the Handler and then closes the connection.
func (s *WebSocket) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.checkOrigin(r) {
		s.km.handshakeFailure(hsOrigin)
		writeHTTPError(w, http.StatusForbidden, "origin_not_allowed", "origin not allowed")
		return
	}
	if offered := websocket.Subprotocols(r); len(offered) > 0 &&
		!slices.Contains(offered, SubprotocolProto) && !slices.Contains(offered, SubprotocolJSON) {
		// gorilla would upgrade without a subprotocol and the browser would
		// then fail the connection with no reason; say why instead.
		s.km.handshakeFailure(hsSubprotocol)
		writeHTTPError(w, http.StatusBadRequest, "unsupported_subprotocol",
			"offer "+SubprotocolProto+" or "+SubprotocolJSON)
		return
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.km.handshakeFailure(hsShutdown)
		writeHTTPError(w, http.StatusServiceUnavailable, string(codec.CodeDraining), "edge is shutting down")
		return
	}
	s.handlers.Add(1)
	s.mu.Unlock()

	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		// gorilla has already answered with a 4xx.
		s.handlers.Done()
		s.km.handshakeFailure(hsUpgrade)
		s.log.Debug("websocket upgrade failed", "err", err, "remote", r.RemoteAddr)
		return
	}
	// gorilla's Conn is dropped here: only its net.Conn and the chosen
	// subprotocol are kept. The session runs on its own goroutine so this
	// one returns and net/http drops its per-connection state (two 4 KiB
	// bufio buffers and a deep stack) that would otherwise live as long as
	// the session.
	go s.serveConn(ws.NetConn(), ws.Subprotocol())
}

// serveConn runs one connection's Handler and then closes it.
func (s *WebSocket) serveConn(nc net.Conn, subprotocol string) {
	defer s.handlers.Done()
	c := newWSConn(s, nc, subprotocol)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		c.Close(codec.CodeDraining.CloseCode(), "shutting down")
		c.finish()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.km.open()

	// The Handler gets the transport's own context, not one of its own:
	// nothing but Shutdown cancels a connection's context, and an idle
	// connection is the cheaper by it.
	s.h(s.baseCtx, c)
	c.Close(wsframe.CloseNormal, "")
	c.finish()

	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.km.closed()
}

// Shutdown stops accepting connections, cancels every Handler's context and
// waits for them to return. If ctx ends first the remaining connections are
// closed with the draining code and Shutdown still waits for their Handlers
// (which now see Read fail), returning ctx's error.
func (s *WebSocket) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.cancelBase()
	done := make(chan struct{})
	go func() { s.handlers.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	for c := range s.conns {
		c.abort(codec.CodeDraining.CloseCode(), "shutting down")
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}

const (
	// closeGrace bounds how long a closing connection waits for the peer's
	// close frame before the socket is torn down.
	closeGrace = 2 * time.Second
	// closeWriteTimeout bounds writing the close frame (and a write in
	// progress that it has to wait behind).
	closeWriteTimeout = time.Second
	// wsMaxBatch is the most the writer buffers before writing through
	// (one write per Flush below it).
	wsMaxBatch = 64 << 10
	// wsKeepMsg: an assembled message buffer above this size is not kept
	// for the next message, so one large message does not pin its size to
	// an otherwise idle connection.
	wsKeepMsg = 4 << 10
)

// wsConn is one WebSocket connection.
type wsConn struct {
	s   *WebSocket // immutable
	nc  net.Conn   // immutable: the upgraded connection, framed here
	enc Encoding   // immutable
	op  byte       // immutable: opcode of written messages (binary, or text for egbe.v1.json)

	ending
	closed   atomic.Bool // a close frame was sent (or is being sent): no data frame follows
	peerGone atomic.Bool // the socket failed or the close handshake completed: nothing to drain

	// Read side, owned by the Read caller.
	rbuf       []byte         // ReadBufferSize bytes for the connection's life
	rpos, rend int            // unread bytes are rbuf[rpos:rend]
	hdr        wsframe.Header // the frame being read, while inFrame
	inFrame    bool
	left       int64  // payload bytes of hdr not yet read
	maskPos    int    // masking key position reached in hdr's payload
	msgOp      byte   // opcode of the message being assembled into msg; 0: none
	msg        []byte // a message that is fragmented or larger than rbuf
	heard      bool   // bytes arrived since the read deadline was last armed
	pinged     bool   // a keepalive ping is out, not yet answered by any byte

	deadlineMu sync.Mutex      // orders read-deadline changes (Read, ctx hooks, Close)
	readCtx    context.Context // guarded by deadlineMu; written only by Read
	stopCtx    func() bool     // owned by Read: unhooks readCtx's cancellation

	// Write side. The session writer (WriteReliable, Flush), the reader
	// (pong replies, keepalive pings) and Close take wmu to write.
	wmu      sync.Mutex
	wbuf     *[]byte   // guarded by wmu: from s.wbufs; nil while nothing is buffered
	wdl      time.Time // guarded by wmu: the write deadline set on nc
	werr     error     // guarded by wmu: the first write error; nothing more is written
	batching bool      // guarded by wmu: Flush was called, so WriteReliable only buffers
}

var _ Conn = (*wsConn)(nil)

func newWSConn(s *WebSocket, nc net.Conn, subprotocol string) *wsConn {
	c := &wsConn{s: s, nc: nc, ending: newEnding(), enc: EncodingProto, op: wsframe.OpBinary,
		rbuf: make([]byte, s.cfg.ReadBufferSize)}
	if subprotocol == SubprotocolJSON {
		c.enc, c.op = EncodingJSON, wsframe.OpText
	}
	_ = nc.SetReadDeadline(time.Now().Add(s.cfg.PingInterval))
	return c
}

func (c *wsConn) Kind() Kind            { return KindWebSocket }
func (c *wsConn) Encoding() Encoding    { return c.enc }
func (c *wsConn) RemoteAddr() net.Addr  { return c.nc.RemoteAddr() }
func (c *wsConn) HasUnreliable() bool   { return false }
func (c *wsConn) Done() <-chan struct{} { return c.done }

func (c *wsConn) WriteUnreliable([]byte) error { return ErrNoUnreliableLane }

// Read returns the next message. A message larger than MaxMessageSize is
// refused from its frame header, before its payload is read, with close
// code 4001 (frame_too_large).
func (c *wsConn) Read(ctx context.Context) (Message, error) {
	select {
	case <-c.done:
		return Message{}, c.reason()
	default:
	}
	if ctx != c.readCtx {
		c.watchCtx(ctx)
	}
	m, err := c.next(ctx)
	if err == nil {
		c.s.km.msg(Reliable, dirIn, len(m.Data))
		return m, nil
	}
	var pe *wsframe.ProtocolError
	switch {
	case errors.Is(err, errReadCancelled):
		// The reader gave up, not the connection: the writer may still
		// have a final message (the Error saying why) to send before Close,
		// and a later Read with a live context resumes where this one
		// stopped.
		return Message{}, fmt.Errorf("%w: %w", ErrClosed, ctx.Err())
	case errors.Is(err, ErrMessageTooLarge):
		// The transport answers this itself so the client always sees the
		// typed code, whatever the session does with the error.
		c.end(err)
		_ = c.Close(codec.CodeFrameTooLarge.CloseCode(), "message too large")
		return Message{}, err
	case errors.As(err, &pe):
		c.end(fmt.Errorf("%w: %w", ErrClosed, err))
		_ = c.Close(uint32(pe.Code), "protocol error")
	default:
		c.peerGone.Store(true)
		c.end(fmt.Errorf("%w: %w", ErrClosed, err))
	}
	return Message{}, c.reason()
}

// watchCtx makes ctx's cancellation interrupt Read. One hook per distinct
// ctx, not per message: the session reader normally passes the same ctx
// every time. The hook only acts while its ctx is still the current one,
// so an earlier ctx that ends between reads (a handshake timeout cancelled
// after the hello arrived) cannot poison this reader's deadline.
func (c *wsConn) watchCtx(ctx context.Context) {
	if c.stopCtx != nil {
		c.stopCtx()
	}
	c.deadlineMu.Lock()
	c.readCtx = ctx
	if !c.closed.Load() {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.PingInterval))
		c.heard, c.pinged = false, false
	}
	c.deadlineMu.Unlock()
	c.stopCtx = context.AfterFunc(ctx, func() {
		c.deadlineMu.Lock()
		defer c.deadlineMu.Unlock()
		if c.readCtx == ctx {
			_ = c.nc.SetReadDeadline(time.Unix(1, 0))
		}
	})
}

// next reads frames until a whole data message is in, answering control
// frames on the way.
func (c *wsConn) next(ctx context.Context) (Message, error) {
	for {
		if !c.inFrame {
			if err := c.nextHeader(ctx); err != nil {
				return Message{}, err
			}
		}
		h := &c.hdr
		if h.Op >= wsframe.OpClose {
			// A control frame (at most 125 bytes) is handled whole, even
			// between the fragments of a message.
			n := int(h.Length)
			if err := c.fill(ctx, n); err != nil {
				return Message{}, err
			}
			p := c.rbuf[c.rpos : c.rpos+n]
			wsframe.Unmask(h.Mask, 0, p)
			c.rpos += n
			c.inFrame = false
			if err := c.control(h.Op, p); err != nil {
				return Message{}, err
			}
			continue
		}
		if h.Op != wsframe.OpContinuation {
			if h.Fin && h.Length <= int64(len(c.rbuf)) {
				// The common case: a whole message in one frame that fits
				// the read buffer is unmasked in place and returned from it.
				n := int(h.Length)
				if err := c.fill(ctx, n); err != nil {
					return Message{}, err
				}
				p := c.rbuf[c.rpos : c.rpos+n]
				wsframe.Unmask(h.Mask, 0, p)
				c.rpos += n
				c.inFrame = false
				return Message{Lane: Reliable, Data: p}, nil
			}
			c.msgOp = h.Op
			if cap(c.msg) > wsKeepMsg {
				c.msg = nil
			}
			c.msg = c.msg[:0]
		}
		if err := c.readPayload(ctx); err != nil {
			return Message{}, err
		}
		c.inFrame = false
		if h.Fin {
			c.msgOp = 0
			return Message{Lane: Reliable, Data: c.msg}, nil
		}
	}
}

// nextHeader reads and checks the next frame header.
func (c *wsConn) nextHeader(ctx context.Context) error {
	for {
		h, need, err := wsframe.ParseHeader(c.rbuf[c.rpos:c.rend])
		if err != nil {
			return err
		}
		if need > 0 {
			if err := c.fill(ctx, need); err != nil {
				return err
			}
			continue
		}
		switch h.Op {
		case wsframe.OpText, wsframe.OpBinary:
			if c.msgOp != 0 {
				return &wsframe.ProtocolError{Code: wsframe.CloseProtocol, Msg: "new message inside a fragmented one"}
			}
			if h.Length > codec.MaxMessageSize {
				return fmt.Errorf("%w: %d bytes", ErrMessageTooLarge, h.Length)
			}
		case wsframe.OpContinuation:
			if c.msgOp == 0 {
				return &wsframe.ProtocolError{Code: wsframe.CloseProtocol, Msg: "continuation frame outside a message"}
			}
			if total := int64(len(c.msg)) + h.Length; total > codec.MaxMessageSize {
				return fmt.Errorf("%w: over %d bytes", ErrMessageTooLarge, codec.MaxMessageSize)
			}
		}
		c.rpos += h.Size
		c.hdr, c.inFrame, c.left, c.maskPos = h, true, h.Length, 0
		return nil
	}
}

// readPayload appends the rest of the current data frame's payload to msg:
// what is buffered first, then small remainders through the buffer and
// large ones straight into msg.
func (c *wsConn) readPayload(ctx context.Context) error {
	for c.left > 0 {
		if c.rend > c.rpos {
			n := int(min(int64(c.rend-c.rpos), c.left))
			start := len(c.msg)
			c.msg = append(c.msg, c.rbuf[c.rpos:c.rpos+n]...)
			c.maskPos = wsframe.Unmask(c.hdr.Mask, c.maskPos, c.msg[start:])
			c.rpos += n
			c.left -= int64(n)
			continue
		}
		if c.left < int64(len(c.rbuf)) {
			if err := c.fill(ctx, 1); err != nil {
				return err
			}
			continue
		}
		c.msg = slices.Grow(c.msg, int(c.left))
		start := len(c.msg)
		n, err := c.readSome(ctx, c.msg[start:start+int(c.left)])
		c.msg = c.msg[:start+n]
		c.maskPos = wsframe.Unmask(c.hdr.Mask, c.maskPos, c.msg[start:])
		c.left -= int64(n)
		if err != nil {
			return err
		}
	}
	return nil
}

// fill reads until at least need (≤ len(rbuf)) bytes are buffered.
func (c *wsConn) fill(ctx context.Context, need int) error {
	for c.rend-c.rpos < need {
		if c.rpos == c.rend {
			c.rpos, c.rend = 0, 0
		} else if len(c.rbuf)-c.rpos < need {
			c.rend = copy(c.rbuf, c.rbuf[c.rpos:c.rend])
			c.rpos = 0
		}
		n, err := c.readSome(ctx, c.rbuf[c.rend:])
		c.rend += n
		if err != nil {
			return err
		}
	}
	return nil
}

// readSome reads at least one byte into p. A read deadline that passes is
// the keepalive's tick (or ctx's cancellation, or the close grace running
// out); any other error ends the read.
func (c *wsConn) readSome(ctx context.Context, p []byte) (int, error) {
	for {
		n, err := c.nc.Read(p)
		if n > 0 {
			// An error that came with data recurs on the next read.
			c.heard = true
			return n, nil
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			if err := c.keepalive(ctx); err != nil {
				return 0, err
			}
		default:
			return 0, err
		}
	}
}

// keepalive runs when the read deadline passes. The deadline is armed
// PingInterval ahead; when it passes with bytes heard meanwhile it is just
// re-armed, otherwise the peer is pinged and gets PongWait to send
// anything. A peer silent for between PingInterval+PongWait and
// 2*PingInterval+PongWait is dropped, and a connection with traffic costs
// one deadline update per PingInterval.
func (c *wsConn) keepalive(ctx context.Context) error {
	if ctx.Err() != nil {
		return errReadCancelled
	}
	c.deadlineMu.Lock()
	switch {
	case c.closed.Load():
		c.deadlineMu.Unlock()
		return errCloseGrace
	case c.heard:
		c.heard, c.pinged = false, false
		_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.PingInterval))
		c.deadlineMu.Unlock()
		return nil
	case c.pinged:
		c.deadlineMu.Unlock()
		return errKeepalive
	}
	c.pinged = true
	_ = c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.PongWait))
	c.deadlineMu.Unlock()
	// A failed ping write shows on the next read or write.
	_ = c.writeControl(wsframe.OpPing, nil)
	return nil
}

// control answers a control frame: a ping with a pong, a close with the
// close reply (then the connection is over).
func (c *wsConn) control(op byte, p []byte) error {
	switch op {
	case wsframe.OpPing:
		if err := c.writeControl(wsframe.OpPong, p); err != nil && !errors.Is(err, ErrClosed) {
			return err
		}
	case wsframe.OpClose:
		code, err := wsframe.ParseClose(p)
		if err != nil {
			return err
		}
		if !c.closed.Swap(true) {
			// The peer started the close: answer with its code (RFC 6455
			// 5.5.1); the connection goroutine then closes the socket.
			_ = c.sendClose(code, "")
		}
		c.peerGone.Store(true)
		return fmt.Errorf("%w with code %d", errPeerClosed, code)
	}
	// A pong only proves the peer is alive, which readSome has noted.
	return nil
}

// buffer is the pending write buffer, taken from the free list if there is
// none. Called with wmu held.
func (c *wsConn) buffer() *[]byte {
	if c.wbuf == nil {
		c.wbuf = c.s.wbufs.get()
	}
	return c.wbuf
}

// release gives the write buffer back. Called with wmu held.
func (c *wsConn) release() {
	if c.wbuf != nil {
		c.s.wbufs.put(c.wbuf)
		c.wbuf = nil
	}
}

// writeLocked writes everything buffered in one write. Called with wmu held.
func (c *wsConn) writeLocked(ctx context.Context) error {
	if c.wbuf == nil || len(*c.wbuf) == 0 {
		return nil
	}
	c.armWriteDeadline(ctx)
	_, err := c.nc.Write(*c.wbuf)
	c.release()
	if err != nil {
		c.werr = err
	}
	return err
}

// armWriteDeadline bounds the next write by WriteTimeout (or ctx's earlier
// deadline). The deadline is only moved when it is later than wanted or
// less than half a WriteTimeout away, so a busy writer does not update it
// on every flush. Called with wmu held.
func (c *wsConn) armWriteDeadline(ctx context.Context) {
	now := time.Now()
	d := now.Add(c.s.cfg.WriteTimeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	if !c.wdl.IsZero() && !c.wdl.After(d) && c.wdl.Sub(now) >= c.s.cfg.WriteTimeout/2 {
		return
	}
	_ = c.nc.SetWriteDeadline(d)
	c.wdl = d
}

// appendLocked buffers one frame, first writing what is buffered if the
// batch would grow past wsMaxBatch. Called with wmu held.
func (c *wsConn) appendLocked(ctx context.Context, op byte, msg []byte) error {
	if c.werr != nil {
		return c.werr
	}
	if c.closed.Load() {
		return ErrClosed
	}
	buf := c.buffer()
	if len(*buf) > 0 && len(*buf)+wsframe.MaxServerHeader+len(msg) > wsMaxBatch {
		if err := c.writeLocked(ctx); err != nil {
			return err
		}
		buf = c.buffer()
	}
	*buf = wsframe.AppendHeader(*buf, op, len(msg))
	*buf = append(*buf, msg...)
	return nil
}

// writeControl writes a ping or pong at once (with whatever the writer has
// buffered ahead of it).
func (c *wsConn) writeControl(op byte, p []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.appendLocked(context.Background(), op, p); err != nil {
		return err
	}
	return c.writeLocked(context.Background())
}

// WriteReliable buffers one message as one frame (binary, or text for
// egbe.v1.json). Until the first Flush it also writes it at once, so a
// caller that never flushes still works; from then on frames leave at the
// next Flush (or when the batch reaches wsMaxBatch).
func (c *wsConn) WriteReliable(ctx context.Context, msg []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	c.wmu.Lock()
	err := c.appendLocked(ctx, c.op, msg)
	if err == nil && !c.batching {
		err = c.writeLocked(ctx)
	}
	c.wmu.Unlock()
	if err != nil {
		return c.writeFailed(err)
	}
	c.s.km.msg(Reliable, dirOut, len(msg))
	return nil
}

// Flush writes every buffered frame in one write.
func (c *wsConn) Flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.wmu.Lock()
	c.batching = true
	err := c.writeLocked(ctx)
	c.wmu.Unlock()
	if err != nil {
		return c.writeFailed(err)
	}
	return nil
}

func (c *wsConn) writeFailed(err error) error {
	if errors.Is(err, ErrClosed) {
		return err
	}
	c.end(fmt.Errorf("%w: %w", ErrClosed, err))
	return c.reason()
}

// Close writes what is buffered and then a close frame with code and
// reason, and half-closes the socket so the frames are delivered ahead of
// the FIN; the connection goroutine then waits (at most closeGrace) for the
// peer's close reply before releasing the socket.
func (c *wsConn) Close(code uint32, reason string) error {
	if c.closed.Swap(true) {
		return nil
	}
	err := c.sendClose(int(code), reason)
	c.deadlineMu.Lock()
	_ = c.nc.SetReadDeadline(time.Now().Add(closeGrace))
	c.deadlineMu.Unlock()
	if tc, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
	c.end(fmt.Errorf("%w: closed by edge with code %d", ErrClosed, code))
	return err
}

// sendClose writes the buffered frames and a close frame. The caller has
// set closed.
func (c *wsConn) sendClose(code int, reason string) error {
	if !c.wmu.TryLock() {
		// The writer is inside a write to a slow peer: bound that write,
		// then follow it.
		_ = c.nc.SetWriteDeadline(time.Now().Add(closeWriteTimeout))
		c.wmu.Lock()
	}
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	buf := c.buffer()
	*buf = wsframe.AppendClose(*buf, code, reason)
	c.wdl = time.Now().Add(closeWriteTimeout)
	_ = c.nc.SetWriteDeadline(c.wdl)
	return c.writeLocked(context.Background())
}

// abort closes with code and tears the socket down at once (shutdown).
func (c *wsConn) abort(code uint32, reason string) {
	_ = c.Close(code, reason)
	c.deadlineMu.Lock()
	_ = c.nc.SetReadDeadline(time.Unix(1, 0))
	c.deadlineMu.Unlock()
}

// finish runs on the connection goroutine after the Handler: unless the
// peer is already gone, it drains whatever the peer still sends (its close
// reply) until EOF or the grace deadline, so closing does not reset the
// connection under the close frame; then it releases the socket.
func (c *wsConn) finish() {
	// readCtx's hook is left alone: a session reader may still be inside
	// Read. The hook only sets a deadline on this socket and goes away with
	// its ctx (the Handler's, cancelled by serveConn).
	if !c.peerGone.Load() {
		c.deadlineMu.Lock()
		_ = c.nc.SetReadDeadline(time.Now().Add(closeGrace))
		c.deadlineMu.Unlock()
		_, _ = io.Copy(io.Discard, io.LimitReader(c.nc, 1<<20))
	}
	_ = c.nc.Close()
	c.wmu.Lock()
	c.release()
	c.wmu.Unlock()
	c.end(ErrClosed)
}
