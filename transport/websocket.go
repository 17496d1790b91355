package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/codec"
)

// WebSocket serves the WebSocket transport (one reliable lane) at
// PathWebSocket. Each connection's Handler runs on one goroutine the
// transport owns, so an idle session costs that goroutine, the socket and a
// ReadBufferSize buffer: write buffers are pooled and keepalive pings come
// from a timer, not a goroutine.
type WebSocket struct {
	cfg      WebSocketConfig    // immutable after New
	h        Handler            // immutable after New
	log      *slog.Logger       // immutable after New
	km       *kindMetrics       // immutable after New
	upgrader websocket.Upgrader // immutable after New
	allowed  Origins            // immutable after New

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
	s.baseCtx, s.cancelBase = context.WithCancel(context.Background())
	s.upgrader = websocket.Upgrader{
		HandshakeTimeout: cfg.HandshakeTimeout,
		ReadBufferSize:   cfg.ReadBufferSize,
		WriteBufferSize:  cfg.WriteBufferSize,
		WriteBufferPool:  &bufPool{},
		Subprotocols:     []string{SubprotocolProto, SubprotocolJSON},
		CheckOrigin:      s.checkOrigin,
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
	// The session runs on its own goroutine so this one returns and
	// net/http drops its per-connection state (two 4 KiB bufio buffers and
	// a deep stack) that would otherwise live as long as the session.
	go s.serveConn(ws)
}

// serveConn runs one connection's Handler and then closes it.
func (s *WebSocket) serveConn(ws *websocket.Conn) {
	defer s.handlers.Done()
	c := newWSConn(s, ws)
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

	ctx, cancel := context.WithCancel(s.baseCtx)
	s.h(ctx, c)
	cancel()
	c.Close(websocket.CloseNormalClosure, "")
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

// closeGrace bounds how long a closing connection waits for the peer's
// close frame before the socket is torn down.
const closeGrace = 2 * time.Second

// wsConn is one WebSocket connection.
type wsConn struct {
	s   *WebSocket      // immutable
	ws  *websocket.Conn // reads owned by the Read caller; writes by the WriteReliable caller
	enc Encoding        // immutable
	mt  int             // message type written; immutable

	ending
	closed     atomic.Bool     // Close has sent (or tried to send) a close frame
	peerGone   atomic.Bool     // the socket failed or the peer closed: nothing to drain
	pinger     *time.Timer     // keepalive; stopped in finish
	readCtx    context.Context // guarded by deadlineMu; written only by Read
	deadlineMu sync.Mutex      // orders readCtx changes against its cancellation hook
	stopCtx    func() bool     // owned by Read: unhooks readCtx's cancellation
	scratch    []byte          // owned by Read
}

var _ Conn = (*wsConn)(nil)

func newWSConn(s *WebSocket, ws *websocket.Conn) *wsConn {
	c := &wsConn{s: s, ws: ws, ending: newEnding(), enc: EncodingProto, mt: websocket.BinaryMessage}
	if ws.Subprotocol() == SubprotocolJSON {
		c.enc, c.mt = EncodingJSON, websocket.TextMessage
	}
	deadline := s.cfg.PingInterval + s.cfg.PongWait
	_ = ws.SetReadDeadline(time.Now().Add(deadline))
	ws.SetPongHandler(func(string) error {
		if c.closed.Load() {
			return nil // keep the close grace deadline
		}
		return ws.SetReadDeadline(time.Now().Add(deadline))
	})
	c.pinger = time.AfterFunc(s.cfg.PingInterval, c.ping)
	return c
}

func (c *wsConn) ping() {
	if c.closed.Load() {
		return
	}
	// WriteControl may run concurrently with the writer (gorilla allows it).
	if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.s.cfg.WriteTimeout)); err != nil {
		return // the reader will see the broken socket
	}
	c.pinger.Reset(c.s.cfg.PingInterval)
}

func (c *wsConn) Kind() Kind           { return KindWebSocket }
func (c *wsConn) Encoding() Encoding   { return c.enc }
func (c *wsConn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }
func (c *wsConn) HasUnreliable() bool  { return false }
func (c *wsConn) Done() <-chan struct{} {
	return c.done
}

func (c *wsConn) WriteUnreliable([]byte) error { return ErrNoUnreliableLane }

// Read returns the next message. Oversized messages are refused by reading
// at most MaxMessageSize+1 bytes (gorilla's own read limit would answer
// 1009 before the edge could send its typed close code).
func (c *wsConn) Read(ctx context.Context) (Message, error) {
	select {
	case <-c.done:
		return Message{}, c.reason()
	default:
	}
	if ctx != c.readCtx {
		// One cancellation hook per distinct ctx, not per message: the
		// session reader normally passes the same ctx every time. The hook
		// only acts while its ctx is still the current one, so an earlier
		// ctx that ends between reads (a handshake timeout cancelled after
		// the hello arrived) cannot poison this reader's deadline.
		if c.stopCtx != nil {
			c.stopCtx()
		}
		c.deadlineMu.Lock()
		c.readCtx = ctx
		if !c.closed.Load() {
			_ = c.ws.NetConn().SetReadDeadline(time.Now().Add(c.s.cfg.PingInterval + c.s.cfg.PongWait))
		}
		c.deadlineMu.Unlock()
		c.stopCtx = context.AfterFunc(ctx, func() {
			c.deadlineMu.Lock()
			defer c.deadlineMu.Unlock()
			if c.readCtx == ctx {
				_ = c.ws.NetConn().SetReadDeadline(time.Unix(1, 0))
			}
		})
	}
	_, r, err := c.ws.NextReader()
	if err != nil {
		if ctx.Err() != nil {
			// The reader gave up, not the connection: the writer may still
			// have a final message (the Error saying why) to send before
			// Close. The socket cannot be read again (gorilla keeps the
			// error), which is fine: the caller is ending the session.
			return Message{}, fmt.Errorf("%w: %w", ErrClosed, ctx.Err())
		}
		c.peerGone.Store(true)
		c.end(fmt.Errorf("%w: %w", ErrClosed, err))
		return Message{}, c.reason()
	}
	data, err := c.readAll(r)
	if errors.Is(err, ErrMessageTooLarge) {
		// The transport answers this itself so the client always sees the
		// typed code, whatever the session does with the error.
		c.end(err)
		_ = c.Close(codec.CodeFrameTooLarge.CloseCode(), "message too large")
		return Message{}, err
	}
	if err != nil {
		c.end(fmt.Errorf("%w: %w", ErrClosed, err))
		return Message{}, c.reason()
	}
	c.s.km.msg(Reliable, dirIn, len(data))
	return Message{Lane: Reliable, Data: data}, nil
}

// readAll reads one message into scratch and returns an exact-size copy the
// receiver owns, refusing anything over MaxMessageSize.
func (c *wsConn) readAll(r io.Reader) ([]byte, error) {
	buf := c.scratch[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, max(512, cap(buf)))
		}
		// Never read more than MaxMessageSize+1 in total.
		limit := min(cap(buf), codec.MaxMessageSize+1)
		n, err := r.Read(buf[len(buf):limit])
		buf = buf[:len(buf)+n]
		if len(buf) > codec.MaxMessageSize {
			c.keepScratch(buf)
			return nil, fmt.Errorf("%w: over %d bytes", ErrMessageTooLarge, codec.MaxMessageSize)
		}
		if err == io.EOF {
			c.keepScratch(buf)
			out := make([]byte, len(buf))
			copy(out, buf)
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// keepScratch retains small scratch buffers only: one large message must not
// pin 64 KiB to an otherwise idle connection.
func (c *wsConn) keepScratch(buf []byte) {
	if cap(buf) <= 4<<10 {
		c.scratch = buf[:0]
	} else {
		c.scratch = nil
	}
}

// WriteReliable writes one message as one WebSocket frame (binary, or text
// for egbe.v1.json).
func (c *wsConn) WriteReliable(ctx context.Context, msg []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	deadline := time.Now().Add(c.s.cfg.WriteTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.ws.SetWriteDeadline(deadline)
	if err := c.ws.WriteMessage(c.mt, msg); err != nil {
		c.end(fmt.Errorf("%w: %w", ErrClosed, err))
		return c.reason()
	}
	c.s.km.msg(Reliable, dirOut, len(msg))
	return nil
}

// Close sends a close frame with code and reason, then half-closes the
// socket so the frame is delivered ahead of the FIN; the reader sees the
// peer's close reply (or the grace deadline) and the connection goroutine
// releases the socket.
func (c *wsConn) Close(code uint32, reason string) error {
	if c.closed.Swap(true) {
		return nil
	}
	if len(reason) > 123 { // control frame payload limit (RFC 6455 5.5) minus the code
		reason = strings.ToValidUTF8(reason[:123], "")
	}
	err := c.ws.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(int(code), reason), time.Now().Add(time.Second))
	_ = c.ws.NetConn().SetReadDeadline(time.Now().Add(closeGrace))
	if tc, ok := c.ws.NetConn().(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
	c.end(fmt.Errorf("%w: closed by edge with code %d", ErrClosed, code))
	if errors.Is(err, websocket.ErrCloseSent) {
		return nil
	}
	return err
}

// abort closes with code and tears the socket down at once (shutdown).
func (c *wsConn) abort(code uint32, reason string) {
	_ = c.Close(code, reason)
	_ = c.ws.NetConn().SetReadDeadline(time.Unix(1, 0))
}

// finish runs on the connection goroutine after the Handler: unless the
// peer is already gone, it drains whatever the peer still sends (its close
// reply) until EOF or the grace deadline, so closing does not reset the
// connection under the close frame; then it releases the socket.
func (c *wsConn) finish() {
	c.pinger.Stop()
	// readCtx's hook is left alone: a session reader may still be inside
	// Read. The hook only sets a deadline on this socket and goes away with
	// its ctx (the Handler's, cancelled by serveConn).
	nc := c.ws.NetConn()
	if !c.peerGone.Load() {
		_ = nc.SetReadDeadline(time.Now().Add(closeGrace))
		_, _ = io.Copy(io.Discard, io.LimitReader(nc, 1<<20))
	}
	_ = c.ws.Close()
	c.end(ErrClosed)
}

// Flush is a no-op: WriteReliable writes each frame at once.
func (c *wsConn) Flush(context.Context) error { return nil }
