package signalling

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/internal/wsframe"
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
	// CloseTooBig (1009): a frame exceeded Config.ReadLimit.
	CloseTooBig = websocket.CloseMessageTooBig
	// CloseDisconnectPlayer (1011): the streamer sent disconnectPlayer; the
	// reason is the streamer's (empty if none).
	CloseDisconnectPlayer = websocket.CloseInternalServerErr
)

// maxCloseReason is the longest close reason a control frame can carry.
const maxCloseReason = 123

// conn is one WebSocket, or (relay.go) the socketless proxy of a player on
// another edge.
//
// A socket is framed here after gorilla's upgrade (internal/wsframe), in
// batches, with no goroutine between a message's arrival and its relay:
//
//   - Its reader goroutine (readLoop) reads whatever has arrived into a
//     pooled buffer, taken inside the read call only once bytes are there
//     (an idle socket holds none), and handles every whole frame in it.
//   - Handling a frame queues frames for other sockets (send): each is
//     appended to that socket's write buffer, and the socket joins the
//     server's flush list (flushList).
//   - When the batch is handled, the reader writes every listed socket's
//     buffer with one non-blocking write each. So a burst (an offer and its
//     candidates) leaves in one write, on the goroutine that read it.
//   - Only a socket whose kernel buffer is full gets a writer goroutine,
//     which finishes that write (bounded by WriteTimeout) and whatever was
//     queued meanwhile, then exits. A socket that has SendQueue frames
//     waiting is closed as a slow consumer; nobody ever waits for it.
//
// A proxy's frames go to out instead, which relay.go drains.
type conn struct {
	s   *Server      // immutable
	log *slog.Logger // immutable
	// bc is the connection (a proxy's: relay.go's deadConn). Immutable.
	bc *batchConn
	// raw is bc.Conn's for non-blocking reads and writes; nil when it has
	// none (TLS): writes then go through the writer goroutine. Immutable.
	raw syscall.RawConn
	// out: a proxy's frames (nil entry: the close in closeCode and
	// closeReason); nil for a socket. Immutable.
	out chan []byte
	// queue is the most frames a socket's write buffer holds. Immutable
	// once the reader runs.
	queue int

	// Read side, owned by the reader.
	rb         []byte // read buffer (pooled at readBufSize); nil while empty
	rpos, rend int    // unread bytes are rb[rpos:rend]
	want       int    // bytes the next frame needs from rpos
	msg        []byte // a fragmented message being assembled
	msgOp      byte   // its opcode; 0: none
	readFn     func(fd uintptr) bool
	rn         int   // readFn's result
	rerr       error // readFn's error

	mu          sync.Mutex
	wrote       sync.Cond // L is &mu: broadcast when writing ends
	closing     bool      // guarded by mu: no more frames are queued
	closeCode   int       // guarded by mu (proxies: the close relay.go sends on)
	closeReason string    // guarded by mu
	wbuf        *[]byte   // guarded by mu: frames not yet handed to a write; nil when none
	nbuf        int       // guarded by mu: frames in wbuf
	writing     bool      // guarded by mu: a flush or the writer goroutine owns the socket's writes
	listed      bool      // guarded by mu: on the flush list
	finished    bool      // guarded by mu: the reader is done; writes end by finishBy
	finishBy    time.Time // guarded by mu
	werr        error     // guarded by mu: the first write error; nothing more is written
	writeFn     func(fd uintptr) bool
	wb          []byte // writeFn's input, owned by the write token holder
	wn          int    // writeFn's result
	wferr       error  // writeFn's error

	next *conn // guarded by the flush list's mu
}

// newConn returns the conn of an upgraded WebSocket ws over bc (gorilla's
// Conn is dropped: only the connection is used), or with ws nil a proxy's
// (relay.go).
func newConn(s *Server, ws *websocket.Conn, bc *batchConn, log *slog.Logger) *conn {
	c := &conn{s: s, bc: bc, log: log, queue: s.cfg.SendQueue}
	c.wrote.L = &c.mu
	if ws == nil {
		c.out = make(chan []byte, s.cfg.SendQueue)
		return c
	}
	if sc, ok := bc.Conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			c.raw = raw
			c.readFn, c.writeFn = c.readRaw, c.writeRaw
		}
	}
	return c
}

// send queues a text frame; false if the socket is closing or was closed
// for falling behind. b is copied (a socket's) or kept (a proxy's).
func (c *conn) send(b []byte) bool {
	if c.out != nil {
		return c.enqueue(b)
	}
	c.mu.Lock()
	if !c.admitLocked() {
		c.mu.Unlock()
		return false
	}
	w := c.bufLocked()
	*w = wsframe.AppendHeader(*w, wsframe.OpText, len(b))
	*w = append(*w, b...)
	c.queuedLocked()
	return true
}

// sendEdited queues m with its key members removed (val nil) or set to
// the JSON value val (Message.rebuild). A socket's frame is built straight
// into its write buffer from the sender's bytes.
func (c *conn) sendEdited(m *Message, key string, val []byte) bool {
	if c.out != nil {
		return c.enqueue(m.rebuild(key, val))
	}
	c.mu.Lock()
	if !c.admitLocked() {
		c.mu.Unlock()
		return false
	}
	w := c.bufLocked()
	*w = wsframe.AppendHeader(*w, wsframe.OpText, m.rebuiltLen(key, val))
	*w = m.appendRebuilt(*w, key, val)
	c.queuedLocked()
	return true
}

// enqueue is a proxy's send.
func (c *conn) enqueue(b []byte) bool {
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

// admitLocked counts one more frame waiting, or closes a socket that has
// SendQueue waiting already. Called with mu held.
func (c *conn) admitLocked() bool {
	if c.closing {
		return false
	}
	if c.nbuf >= c.queue {
		c.closing = true
		c.s.met.drop(dropSlowConsumer)
		c.log.Warn("send queue full, closing socket")
		_ = c.bc.Close()
		return false
	}
	c.nbuf++
	return true
}

// bufLocked is the write buffer, taken from the pool if there is none.
// Called with mu held.
func (c *conn) bufLocked() *[]byte {
	if c.wbuf == nil {
		c.wbuf = writePool.Get().(*[]byte)
	}
	return c.wbuf
}

// queuedLocked lists c for the next flush unless it is listed or its
// writes are owned (the owner looks for more before it lets go). It
// unlocks mu.
func (c *conn) queuedLocked() {
	list := !c.listed && !c.writing
	if list {
		c.listed = true
	}
	c.mu.Unlock()
	if list {
		c.s.fl.add(c)
	}
}

// closeWith queues a close frame after what is queued; code CloseNoStatus
// sends an empty close body. The peer then has CloseGrace to answer it.
func (c *conn) closeWith(code int, reason string) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	c.closeCode, c.closeReason = code, truncReason(reason)
	if c.out != nil {
		select {
		case c.out <- nil:
		default:
			_ = c.bc.Close()
		}
		c.mu.Unlock()
		return
	}
	w := c.bufLocked()
	*w = wsframe.AppendClose(*w, code, c.closeReason)
	c.nbuf++
	_ = c.bc.Conn.SetReadDeadline(time.Now().Add(c.s.cfg.CloseGrace))
	c.queuedLocked()
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

// ---- writing ----

// flush writes what c has queued, unless its writes are owned already (the
// owner writes it). Called by the flush list.
func (c *conn) flush() {
	c.mu.Lock()
	c.listed = false
	if c.writing || c.wbuf == nil {
		c.mu.Unlock()
		return
	}
	c.writing = true
	for c.wbuf != nil {
		w := c.takeLocked()
		c.mu.Unlock()
		n, err := c.tryWrite(*w)
		if err == nil && n < len(*w) {
			// The kernel's buffer is full (or this is TLS): a writer
			// goroutine finishes the write, holding the token. The reader
			// waits for it in finish.
			go c.writeLoop(w, n)
			return
		}
		putWriteBuf(w)
		c.mu.Lock()
		if err != nil {
			c.failLocked(err)
			break
		}
	}
	c.writing = false
	c.wrote.Broadcast()
	c.mu.Unlock()
}

// tryWrite writes b without blocking; n < len(b) with no error: the rest
// would block.
func (c *conn) tryWrite(b []byte) (int, error) {
	if c.raw == nil {
		return 0, nil
	}
	c.s.met.writes.Inc()
	c.wb, c.wn, c.wferr = b, 0, nil
	err := c.raw.Write(c.writeFn)
	n, ferr := c.wn, c.wferr
	c.wb = nil
	if err != nil {
		return n, err
	}
	return n, ferr
}

// writeRaw is writeFn: it never waits for the socket to become writable.
func (c *conn) writeRaw(fd uintptr) bool {
	for c.wn < len(c.wb) {
		n, err := syscall.Write(int(fd), c.wb[c.wn:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN || (err == nil && n <= 0):
			return true
		case err != nil:
			c.wferr = err
			return true
		}
		c.wn += n
	}
	return true
}

// writeLoop is a socket's writer goroutine: it holds the write token,
// writes w[off:] and then whatever was queued meanwhile with blocking
// writes, and exits when nothing is left. Its owner is the socket's
// reader, which waits for it in finish.
func (c *conn) writeLoop(w *[]byte, off int) {
	b := (*w)[off:]
	c.mu.Lock()
	for {
		dl := time.Now().Add(c.s.cfg.WriteTimeout)
		if c.finished {
			dl = c.finishBy
		}
		// Under mu, so finish's earlier deadline is never overwritten.
		_ = c.bc.Conn.SetWriteDeadline(dl)
		c.mu.Unlock()
		c.s.met.writes.Inc()
		_, err := c.bc.Conn.Write(b)
		putWriteBuf(w)
		c.mu.Lock()
		if err != nil {
			c.failLocked(err)
			break
		}
		if c.wbuf == nil {
			break
		}
		w = c.takeLocked()
		b = *w
	}
	if !c.finished {
		// The non-blocking writes that follow must find no deadline.
		_ = c.bc.Conn.SetWriteDeadline(time.Time{})
	}
	c.writing = false
	c.wrote.Broadcast()
	c.mu.Unlock()
}

// takeLocked takes the write buffer (not nil) for a write. Called with mu
// held by the holder of the write token.
func (c *conn) takeLocked() *[]byte {
	w := c.wbuf
	c.s.met.frames.Add(float64(c.nbuf))
	c.wbuf, c.nbuf = nil, 0
	return w
}

// failLocked: a write failed; nothing more is written and the connection
// is dropped (its reader then ends). Called with mu held.
func (c *conn) failLocked(err error) {
	if c.werr == nil {
		c.werr = err
		c.log.Debug("write failed, socket closed", "err", err)
	}
	c.closing = true
	if c.wbuf != nil {
		putWriteBuf(c.wbuf)
		c.wbuf, c.nbuf = nil, 0
	}
	_ = c.bc.Close()
}

// maxPooledWrite is the largest write buffer kept for reuse.
const maxPooledWrite = 128 << 10

var writePool = sync.Pool{New: func() any { b := make([]byte, 0, 8<<10); return &b }}

func putWriteBuf(w *[]byte) {
	if cap(*w) <= maxPooledWrite {
		*w = (*w)[:0]
		writePool.Put(w)
	}
}

// flushList holds the sockets that have frames queued. A reader handling
// a batch of frames is active; when it is done it writes every listed
// socket (its own pongs and close replies included). A frame queued while
// no reader is active (the idle lifecycle, a cross-edge relay, Close) is
// written at once by the goroutine that queued it. Either way a write
// never blocks (flush).
type flushList struct {
	mu     sync.Mutex
	active int   // guarded by mu: readers inside a batch
	head   *conn // guarded by mu: listed sockets, linked by conn.next
}

func (f *flushList) begin() {
	f.mu.Lock()
	f.active++
	f.mu.Unlock()
}

// end: a reader's batch is handled; write every listed socket.
func (f *flushList) end() {
	f.mu.Lock()
	f.active--
	h := f.head
	f.head = nil
	f.mu.Unlock()
	flushAll(h)
}

// add lists c (which must not be listed). If no reader is active, the
// caller writes the list at once: no batch will end to do it.
func (f *flushList) add(c *conn) {
	f.mu.Lock()
	c.next = f.head
	f.head = c
	if f.active > 0 {
		f.mu.Unlock()
		return
	}
	h := f.head
	f.head = nil
	f.mu.Unlock()
	flushAll(h)
}

func flushAll(h *conn) {
	for h != nil {
		c := h
		h, c.next = c.next, nil
		c.flush()
	}
}

// ---- reading ----

// readBufSize is a pooled read buffer's size: Epic's offers (a few KiB)
// fit with the frames around them. A frame that does not fit gets a buffer
// of its own.
const readBufSize = 16 << 10

var readPool = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}

// readLoop hands each text frame to handle until the socket fails or
// closes. It runs on the socket's reader goroutine. handle must not keep
// the frame: it aliases the read buffer.
func (c *conn) readLoop(handle func([]byte)) {
	for {
		if err := c.fill(); err != nil {
			return
		}
		c.s.fl.begin()
		done := c.handleBuffered(handle)
		c.s.fl.end()
		if done {
			return
		}
	}
}

// handleBuffered handles every whole frame in the read buffer; done
// reports that the connection is over (a close frame, a protocol error, a
// frame over ReadLimit).
func (c *conn) handleBuffered(handle func([]byte)) (done bool) {
	for {
		h, need, err := wsframe.ParseHeader(c.rb[c.rpos:c.rend])
		if err != nil {
			c.protocolError(err)
			return true
		}
		if need > 0 {
			c.want = need
			return false
		}
		if h.Op < wsframe.OpClose && int64(len(c.msg))+h.Length > c.s.cfg.ReadLimit {
			c.s.met.drop(dropTooLarge)
			c.log.Info("frame over read limit, socket closed", "limit", c.s.cfg.ReadLimit)
			c.closeWith(CloseTooBig, "")
			return true
		}
		total := h.Size + int(h.Length)
		if c.rend-c.rpos < total {
			c.want = total
			return false
		}
		p := c.rb[c.rpos+h.Size : c.rpos+total]
		wsframe.Unmask(h.Mask, 0, p)
		c.rpos += total
		if c.frame(&h, p, handle) {
			return true
		}
		if c.rpos == c.rend {
			c.want = 0
			return false
		}
	}
}

// frame handles one frame; true when the connection is over.
func (c *conn) frame(h *wsframe.Header, p []byte, handle func([]byte)) bool {
	switch h.Op {
	case wsframe.OpPing:
		c.pong(p)
	case wsframe.OpPong:
	case wsframe.OpClose:
		code, err := wsframe.ParseClose(p)
		if err != nil {
			c.protocolError(err)
			return true
		}
		c.answerClose(code)
		return true
	case wsframe.OpText, wsframe.OpBinary:
		if c.msgOp != 0 {
			c.protocolError(&wsframe.ProtocolError{Code: wsframe.CloseProtocol, Msg: "new message inside a fragmented one"})
			return true
		}
		if h.Fin {
			c.message(h.Op, p, handle)
			return false
		}
		c.msgOp, c.msg = h.Op, append(c.msg[:0], p...)
	case wsframe.OpContinuation:
		if c.msgOp == 0 {
			c.protocolError(&wsframe.ProtocolError{Code: wsframe.CloseProtocol, Msg: "continuation frame outside a message"})
			return true
		}
		c.msg = append(c.msg, p...)
		if h.Fin {
			op := c.msgOp
			c.msgOp = 0
			c.message(op, c.msg, handle)
			c.msg = nil // fragmented messages are rare: keep no buffer
		}
	}
	return false
}

func (c *conn) message(op byte, p []byte, handle func([]byte)) {
	if op != wsframe.OpText {
		c.s.met.drop(dropBinary)
		return
	}
	handle(p)
}

// pong answers a ping with its payload.
func (c *conn) pong(p []byte) {
	c.mu.Lock()
	if !c.admitLocked() {
		c.mu.Unlock()
		return
	}
	w := c.bufLocked()
	*w = wsframe.AppendHeader(*w, wsframe.OpPong, len(p))
	*w = append(*w, p...)
	c.queuedLocked()
}

// answerClose: the peer closed; unless the broker closed first, the close
// is echoed with the peer's code (RFC 6455 5.5.1).
func (c *conn) answerClose(code int) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	w := c.bufLocked()
	*w = wsframe.AppendClose(*w, code, "")
	c.nbuf++
	c.queuedLocked()
}

// protocolError closes the socket with the violation's code.
func (c *conn) protocolError(err error) {
	c.log.Info("websocket protocol error, socket closed", "err", err)
	code := wsframe.CloseProtocol
	var pe *wsframe.ProtocolError
	if errors.As(err, &pe) {
		code = pe.Code
	}
	c.closeWith(code, "protocol error")
}

// fill reads at least one byte more, with room for the c.want bytes the
// next frame needs.
func (c *conn) fill() error {
	if c.rb != nil && c.rpos == c.rend {
		c.putReadBuf()
	}
	if c.rb != nil {
		need := max(c.want, c.rend-c.rpos+1)
		switch {
		case len(c.rb)-c.rpos >= need:
		case len(c.rb) >= need:
			c.rend = copy(c.rb, c.rb[c.rpos:c.rend])
			c.rpos = 0
		default:
			nb := make([]byte, max(need, 2*len(c.rb)))
			c.rend = copy(nb, c.rb[c.rpos:c.rend])
			c.rpos = 0
			c.putReadBuf()
			c.rb = nb
		}
	}
	if c.raw != nil {
		c.rn, c.rerr = 0, nil
		if err := c.raw.Read(c.readFn); err != nil {
			return err
		}
		if c.rerr != nil {
			return c.rerr
		}
		if c.rn == 0 {
			return io.EOF
		}
		c.rend += c.rn
		return nil
	}
	if c.rb == nil {
		c.takeReadBuf()
	}
	n, err := c.bc.Conn.Read(c.rb[c.rend:])
	c.rend += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// readRaw is readFn. The pooled buffer is taken only once bytes have
// arrived and given back before waiting, so an idle socket pins none.
func (c *conn) readRaw(fd uintptr) bool {
	if c.rb == nil {
		c.takeReadBuf()
	}
	for {
		n, err := syscall.Read(int(fd), c.rb[c.rend:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			if c.rpos == c.rend {
				c.putReadBuf()
			}
			return false
		case err != nil:
			c.rerr = err
		default:
			c.rn = n
		}
		return true
	}
}

func (c *conn) takeReadBuf() {
	c.rb = *readPool.Get().(*[]byte)
	c.rpos, c.rend = 0, 0
}

// putReadBuf gives the read buffer back (a pooled-size one to the pool).
func (c *conn) putReadBuf() {
	if len(c.rb) == readBufSize {
		b := c.rb
		readPool.Put(&b)
	}
	c.rb, c.rpos, c.rend, c.want = nil, 0, 0, 0
}

// finish ends the connection after readLoop returned: what is still
// queued (a close reply) is written, bounded by CloseGrace, after any
// writer goroutine is done; then the TCP connection goes.
func (c *conn) finish() {
	c.mu.Lock()
	c.closing, c.finished = true, true
	c.finishBy = time.Now().Add(c.s.cfg.CloseGrace)
	_ = c.bc.Conn.SetWriteDeadline(c.finishBy)
	for c.writing {
		c.wrote.Wait()
	}
	var w *[]byte
	if c.wbuf != nil && c.werr == nil {
		w = c.takeLocked()
	}
	c.mu.Unlock()
	if w != nil {
		c.s.met.writes.Inc()
		_, _ = c.bc.Conn.Write(*w)
		putWriteBuf(w)
	}
	if c.rb != nil {
		c.putReadBuf()
	}
	_ = c.bc.Conn.Close()
}

// ---- the upgrade ----

// batchConn is the hijacked TCP connection under a WebSocket. While held
// (from the hijack to Server.upgrade's flush), writes collect in buf and
// go out in one write: the 101 response and the greeting frames. After
// that the conn code uses Conn directly.
type batchConn struct {
	net.Conn
	mu      sync.Mutex
	holding bool   // guarded by mu
	buf     []byte // guarded by mu
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.holding {
		return b.Conn.Write(p)
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// flush ends holding and writes what was held.
func (b *batchConn) flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holding = false
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.Conn.Write(b.buf)
	b.buf = nil
	return err
}

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
	// Born holding: the 101 response waits for the greeting frames
	// (Server.upgrade flushes both in one write).
	h.bc = &batchConn{Conn: nc, holding: true}
	return h.bc, brw, nil
}
