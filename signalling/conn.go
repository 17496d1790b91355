package signalling

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
)

// WebSocket close codes the broker sends (RFC 6455 section 7.4.1).
const (
	// CloseNoStatus (1005) is never on the wire: the broker sends a close
	// frame with an empty body, which the peer reports as 1005. Used when a
	// player's streamer leaves, and when an unsubscribed player signals
	// while no streamer is registered (as Epic's server does).
	CloseNoStatus = websocket.CloseNoStatusReceived
	// CloseGoingAway (1001): the server is shutting down.
	CloseGoingAway = websocket.CloseGoingAway
	// ClosePolicy (1008): token refused, streamer id not the token's, or
	// the id is held by another connection (token mode).
	ClosePolicy = websocket.ClosePolicyViolation
	// CloseTooBig (1009): a frame exceeded Config.ReadLimit (sent by the
	// WebSocket library).
	CloseTooBig = websocket.CloseMessageTooBig
	// CloseDisconnectPlayer (1011): the streamer sent disconnectPlayer; the
	// reason is the streamer's (empty if none).
	CloseDisconnectPlayer = websocket.CloseInternalServerErr
)

// maxCloseReason is the longest close reason a control frame can carry.
const maxCloseReason = 123

// The send queue holds text frames; a nil entry means "send the close frame
// in closeCode/closeReason". A slot is one slice header, so an idle socket's
// queue costs SendQueue*24 bytes.

// conn is one WebSocket: the handler goroutine reads (readLoop), one writer
// goroutine drains a bounded queue (writeLoop). Nothing ever blocks on a
// slow peer: a full queue closes that socket.
type conn struct {
	s   *Server         // immutable
	ws  *websocket.Conn // immutable; reads owned by readLoop, writes by writeLoop
	log *slog.Logger    // immutable
	bc  *batchConn      // immutable: ws's TCP connection
	out chan []byte     // immutable; bounded
	// quit is closed by the reader when it is done, which stops the writer.
	quit  chan struct{}
	wdone chan struct{} // closed when writeLoop returns

	mu          sync.Mutex
	closing     bool   // guarded by mu: no more frames are queued
	closeCode   int    // guarded by mu: set with the nil queue entry
	closeReason string // guarded by mu
}

func newConn(s *Server, ws *websocket.Conn, bc *batchConn, log *slog.Logger) *conn {
	return &conn{s: s, ws: ws, bc: bc, log: log, out: make(chan []byte, s.cfg.SendQueue),
		quit: make(chan struct{}), wdone: make(chan struct{})}
}

// send queues a text frame; false if the socket is closing or was closed
// for falling behind.
func (c *conn) send(b []byte) bool {
	if b == nil {
		b = []byte{} // nil is the close sentinel
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	select {
	case c.out <- b:
		return true
	default:
		c.closing = true
		c.s.met.drop(dropSlowConsumer)
		c.log.Warn("send queue full, closing socket")
		_ = c.bc.Close()
		return false
	}
}

// closeWith queues a close frame after what is queued; code CloseNoStatus
// sends an empty close body.
func (c *conn) closeWith(code int, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.closing = true
	c.closeCode, c.closeReason = code, truncReason(reason)
	select {
	case c.out <- nil:
	default:
		_ = c.bc.Close()
	}
}

// kill drops the TCP connection now.
func (c *conn) kill() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	_ = c.bc.Close()
}

func truncReason(r string) string {
	if len(r) <= maxCloseReason {
		return r
	}
	r = r[:maxCloseReason]
	for len(r) > 0 && !utf8.ValidString(r) {
		r = r[:len(r)-1]
	}
	return r
}

// writeLoop owns all data writes to ws. It writes every queued frame into
// the batch buffer, then flushes once (DERP's sendLoop). It returns after a
// close frame, a write error, or quit.
func (c *conn) writeLoop() {
	defer c.s.wg.Done()
	defer close(c.wdone)
	for {
		select {
		case <-c.quit:
			return
		default:
		}
		var f []byte
		select {
		case f = <-c.out:
		case <-c.quit:
			return
		}
		c.bc.hold()
		closed, err := false, error(nil)
		for {
			closed, err = c.writeFrame(f)
			if closed || err != nil || len(c.out) == 0 {
				break
			}
			f = <-c.out
		}
		if ferr := c.bc.flush(); err == nil {
			err = ferr
		}
		if err != nil {
			c.kill()
			return
		}
		if closed {
			// Wait for the peer's close (readLoop sees it), but not forever.
			_ = c.bc.SetReadDeadline(time.Now().Add(c.s.cfg.CloseGrace))
			return
		}
	}
}

// writeFrame writes f into the batch; closed reports a close frame.
func (c *conn) writeFrame(f []byte) (closed bool, err error) {
	deadline := time.Now().Add(c.s.cfg.WriteTimeout)
	if f == nil {
		c.mu.Lock()
		code, reason := c.closeCode, c.closeReason
		c.mu.Unlock()
		err = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), deadline)
		if errors.Is(err, websocket.ErrCloseSent) {
			err = nil // the peer's close was echoed already
		}
		return true, err
	}
	_ = c.ws.SetWriteDeadline(deadline)
	return false, c.ws.WriteMessage(websocket.TextMessage, f)
}

// writeGreeting writes f before the writer runs (see Server.upgrade).
func (c *conn) writeGreeting(f []byte) error {
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
	return c.ws.WriteMessage(websocket.TextMessage, f)
}

// readLoop hands each text frame to handle until the socket fails or
// closes. It runs on the socket's reader goroutine. A frame is read into a
// pooled buffer taken only once the frame has begun to arrive (an idle
// socket pins none) and returned after handle: handle must not keep b.
func (c *conn) readLoop(handle func([]byte)) {
	c.ws.SetReadLimit(c.s.cfg.ReadLimit)
	for {
		mt, r, err := c.ws.NextReader()
		var bp *[]byte
		if err == nil {
			bp = readPool.Get().(*[]byte)
			*bp, err = readAll(r, (*bp)[:0])
		}
		if err != nil {
			if bp != nil {
				putReadBuf(bp)
			}
			if errors.Is(err, websocket.ErrReadLimit) {
				c.s.met.drop(dropTooLarge)
				c.log.Info("frame over read limit, socket closed", "limit", c.s.cfg.ReadLimit)
			}
			return
		}
		if mt != websocket.TextMessage {
			putReadBuf(bp)
			c.s.met.drop(dropBinary)
			continue
		}
		handle(*bp)
		putReadBuf(bp)
	}
}

// readAll appends r's message to b (io.ReadAll into a caller's buffer).
func readAll(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// maxPooledRead is the largest read buffer kept for reuse (Epic's SDP
// offers are tens of KiB; rarer giants are left to the GC).
const maxPooledRead = 128 << 10

var readPool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

func putReadBuf(bp *[]byte) {
	if cap(*bp) <= maxPooledRead {
		*bp = (*bp)[:0]
		readPool.Put(bp)
	}
}

// finish ends the connection after readLoop returned: the writer finishes
// its batch (so a close echo queued in it goes out), bounded by CloseGrace.
func (c *conn) finish() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	close(c.quit)
	_ = c.bc.SetWriteDeadline(time.Now().Add(c.s.cfg.CloseGrace))
	<-c.wdone
	_ = c.ws.Close()
}

// maxBatch is the most a writer buffers before writing through.
const maxBatch = 64 << 10

// batchConn is the hijacked TCP connection under a WebSocket. While the
// writer holds a batch, writes (its frames, and control frames the reader
// sends meanwhile) collect in buf and go out in one write at flush.
type batchConn struct {
	net.Conn
	mu      sync.Mutex
	holding bool   // guarded by mu
	buf     []byte // guarded by mu
}

func (b *batchConn) hold() {
	b.mu.Lock()
	b.holding = true
	b.mu.Unlock()
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.holding {
		return b.Conn.Write(p)
	}
	if b.buf == nil {
		b.buf = (*batchPool.Get().(*[]byte))[:0]
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) >= maxBatch {
		if err := b.writeBufLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// flush ends the batch and writes it.
func (b *batchConn) flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holding = false
	return b.writeBufLocked()
}

func (b *batchConn) writeBufLocked() error {
	if b.buf == nil {
		return nil
	}
	_, err := b.Conn.Write(b.buf)
	// Idle sockets pin no buffer: it goes back to the pool.
	if cap(b.buf) <= 2*maxBatch {
		buf := b.buf[:0]
		batchPool.Put(&buf)
	}
	b.buf = nil
	return err
}

var batchPool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

// batchHijacker hands the upgrader a batchConn.
type batchHijacker struct {
	http.ResponseWriter
	bc *batchConn
}

func (h *batchHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	// ResponseController follows Unwrap through middleware wrappers.
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// Born holding: the 101 response waits in the batch for the greeting
	// frames (Server.upgrade flushes both in one write).
	h.bc = &batchConn{Conn: nc, holding: true}
	return h.bc, brw, nil
}
