package iceport

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// Batching.
//
// Every write on the port (SRTP, SRTCP, DTLS, SCTP, STUN, from every peer)
// reaches batchConn.WriteToAddrPort on the writer's own goroutine: pion's
// send path is synchronous down to the socket. The packet is copied into
// the pending batch and the batch goes out with one sendmmsg(2):
//
//   - at once, by the writer itself, when nobody holds the port corked (a
//     lone write costs one sendmmsg of one message, like the sendto it
//     replaces, and no goroutine hand-off); a writer that finds another
//     goroutine mid-sendmmsg leaves its packet for that goroutine, which
//     loops until the batch is empty (flat combining);
//   - while the port is corked (Port.Cork, held by the SFU around one
//     speaker packet's fan-out to all its listeners), when the batch fills
//     (maxBatch messages) or when the last cork is released;
//   - if a cork outlives maxHold with packets waiting, by the port's
//     flusher goroutine, so that a corking goroutine the scheduler parks
//     cannot hold anyone's packets longer than that.
//
// So a packet waits at most for the batch it is in to be produced (at most
// maxBatch-1 packets after it, encrypted and queued by the corking
// goroutine, about 1 µs each) and one sendmmsg, and never past maxHold. No
// packet waits for more traffic once the burst that carries it has ended:
// Uncork flushes.
//
// Consecutive packets of a batch to the same destination with the same
// size (the last may be shorter) are sent as one UDP GSO super-packet
// (UDP_SEGMENT) where the kernel supports it; GSO is switched off for good
// on the first error that says the device cannot do it (EIO), as quic-go
// does.
//
// A message the kernel refuses (sendmmsg stops at it) is counted in
// Stats.Errors and skipped; the rest of the batch still goes out.

const (
	// maxBatch is the most messages one sendmmsg carries.
	maxBatch = 64
	// slotSize is a batch slot's buffer. Every packet pion writes on the
	// port fits (SRTP/DTLS/SCTP stay under the 1200-1500 byte MTUs pion
	// uses); a larger one is written through after the batch, in order.
	slotSize = 2048
	// maxHold bounds how long a cork can keep a queued packet waiting.
	maxHold = 2 * time.Millisecond
	// maxGSOSegments is the kernel's UDP_MAX_SEGMENTS.
	maxGSOSegments = 64
	// maxGSOBytes bounds a super-packet's payload (an IP datagram is at
	// most 65,535 bytes with its headers).
	maxGSOBytes = 65000
)

// errPortClosed is returned by writes after Close.
var errPortClosed = net.ErrClosed

// Stats counts what the batching writer did.
type Stats struct {
	Packets   uint64 // packets handed to the port
	Syscalls  uint64 // sendmmsg and sendto calls made
	Messages  uint64 // messages the kernel accepted (a GSO super-packet is one)
	Segments  uint64 // packets sent inside GSO super-packets
	Errors    uint64 // packets the kernel refused (skipped)
	TimedOut  uint64 // batches flushed by maxHold while corked
	Oversized uint64 // packets larger than a slot, written through
}

// batch is one sendmmsg worth of packets.
type batch struct {
	n    int
	bufs [maxBatch][]byte         // cap slotSize each; len = packet
	dst  [maxBatch]netip.AddrPort // destination per packet
}

// batchConn is the port's UDP socket with batched writes. It implements
// net.PacketConn and pion/ice's AddrPortReaderWriter, so the ICE mux reads
// and writes through it without allocating.
type batchConn struct {
	conn *net.UDPConn     // immutable
	pc   *ipv4.PacketConn // immutable; sendmmsg
	raw  syscall.RawConn  // immutable

	mu       sync.Mutex
	cond     sync.Cond // signalled when a flush ends (guarded by mu)
	pend     *batch    // guarded by mu: collecting
	spare    *batch    // guarded by mu: nil while a flush sends it
	corks    int       // guarded by mu
	flushing bool      // guarded by mu: a goroutine is sending
	closed   bool      // guarded by mu
	armed    bool      // guarded by mu: hold timer running
	hold     *time.Timer
	stop     chan struct{} // closed by Close: the flusher returns
	done     chan struct{} // closed when the flusher has returned

	// Owned by the goroutine that holds flushing.
	msgs   [maxBatch]ipv4.Message
	addrs  [maxBatch]net.UDPAddr
	ips    [maxBatch][16]byte
	oobs   [maxBatch][]byte // a UDP_SEGMENT control message each
	iovs   [maxBatch][][]byte
	noGSO  atomic.Bool // GSO unsupported or switched off
	// direct: batching switched off (EGBE_ICE_BATCH=off): every write is
	// one sendto, as with a plain socket. Immutable.
	direct bool
	sendTo func(b []byte, to netip.AddrPort) error

	st struct {
		packets, syscalls, messages, segments, errors, timedOut, oversized atomic.Uint64
	}
}

var _ net.PacketConn = (*batchConn)(nil)

func newBatchConn(conn *net.UDPConn) (*batchConn, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	c := &batchConn{
		conn: conn, pc: ipv4.NewPacketConn(conn), raw: raw,
		pend: newBatch(), spare: newBatch(),
		hold: time.NewTimer(time.Hour),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	c.hold.Stop()
	c.cond.L = &c.mu
	for i := range c.oobs {
		c.oobs[i] = make([]byte, 0, unix.CmsgSpace(2))
		c.iovs[i] = make([][]byte, 0, maxGSOSegments)
	}
	c.noGSO.Store(!gsoSupported(raw))
	c.direct = os.Getenv("EGBE_ICE_BATCH") == "off"
	c.sendTo = func(b []byte, to netip.AddrPort) error {
		_, err := c.conn.WriteToUDPAddrPort(b, to)
		return err
	}
	go c.flusher()
	return c, nil
}

func newBatch() *batch {
	b := &batch{}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, 0, slotSize)
	}
	return b
}

// gsoSupported reports whether the socket accepts UDP_SEGMENT (Linux 4.18+).
func gsoSupported(raw syscall.RawConn) bool {
	if os.Getenv("EGBE_ICE_GSO") == "off" {
		return false
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		_, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT)
	}); err != nil {
		return false
	}
	return serr == nil
}

// cork makes writes wait in the batch until uncork (or a full batch, or
// maxHold). Corks nest and may be held by several goroutines at once.
func (c *batchConn) cork() {
	c.mu.Lock()
	c.corks++
	c.mu.Unlock()
}

// uncork releases one cork; the last one flushes what waits.
func (c *batchConn) uncork() {
	c.mu.Lock()
	c.corks--
	if c.corks == 0 && c.pend.n > 0 && !c.flushing {
		c.flushLocked(false)
	}
	c.mu.Unlock()
}

// WriteToAddrPort queues b for to. It reports len(b) once the packet is
// queued or sent: errors of individual destinations are counted in Stats
// (UDP gives no delivery guarantee either way).
func (c *batchConn) WriteToAddrPort(b []byte, to netip.AddrPort) (int, error) {
	c.st.packets.Add(1)
	if c.direct {
		c.st.syscalls.Add(1)
		return c.conn.WriteToUDPAddrPort(b, to)
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, errPortClosed
	}
	if len(b) > slotSize {
		return c.writeThroughLocked(b, to)
	}
	for c.pend.n == maxBatch {
		if !c.flushing {
			c.flushLocked(true)
			continue
		}
		c.cond.Wait() // the flusher hands back a spare batch
		if c.closed {
			c.mu.Unlock()
			return 0, errPortClosed
		}
	}
	p := c.pend
	p.bufs[p.n] = append(p.bufs[p.n][:0], b...)
	p.dst[p.n] = to
	p.n++
	switch {
	case c.flushing:
		// The goroutine sending now takes this batch next.
	case c.corks == 0 || p.n == maxBatch:
		c.flushLocked(false)
	case !c.armed:
		c.armed = true
		c.hold.Reset(maxHold)
	}
	c.mu.Unlock()
	return len(b), nil
}

// writeThroughLocked sends an oversized packet after everything queued
// before it (per-destination order holds). It releases mu.
func (c *batchConn) writeThroughLocked(b []byte, to netip.AddrPort) (int, error) {
	for c.flushing {
		c.cond.Wait()
	}
	if c.pend.n > 0 {
		c.flushLocked(true)
		for c.flushing {
			c.cond.Wait()
		}
	}
	c.flushing = true // keep others' packets behind this one
	c.mu.Unlock()
	c.st.oversized.Add(1)
	c.st.syscalls.Add(1)
	err := c.sendTo(b, to)
	c.mu.Lock()
	c.flushing = false
	c.cond.Broadcast()
	if c.pend.n > 0 && (c.corks == 0 || c.pend.n == maxBatch) {
		c.flushLocked(false)
	}
	c.mu.Unlock()
	if err != nil {
		c.st.errors.Add(1)
		return 0, err
	}
	return len(b), nil
}

// flushLocked sends the pending batch, and keeps sending batches that fill
// meanwhile, until nothing is left that should go now. force sends the
// current batch even while corked. Called with mu held and !flushing; mu
// is released during each sendmmsg and held again on return.
func (c *batchConn) flushLocked(force bool) {
	c.flushing = true
	for c.pend.n > 0 && (force || c.corks == 0 || c.pend.n == maxBatch) {
		force = false
		b := c.pend
		c.pend, c.spare = c.spare, nil
		if c.armed {
			c.armed = false
			c.hold.Stop()
		}
		c.mu.Unlock()
		c.send(b)
		c.mu.Lock()
		b.n = 0
		c.spare = b
		c.cond.Broadcast()
	}
	if c.pend.n > 0 && !c.armed {
		// Corked packets left behind: bound their wait.
		c.armed = true
		c.hold.Reset(maxHold)
	}
	c.flushing = false
}

// flusher sends batches a cork kept waiting longer than maxHold. It wakes
// only then; an idle port costs nothing.
func (c *batchConn) flusher() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.hold.C:
		}
		c.mu.Lock()
		c.armed = false
		if c.pend.n > 0 && !c.flushing && !c.closed {
			c.st.timedOut.Add(1)
			c.flushLocked(true)
		}
		c.mu.Unlock()
	}
}

// send writes one batch with as few sendmmsg calls as the kernel allows.
// Owned by the goroutine holding flushing.
func (c *batchConn) send(b *batch) { c.sendFrom(b, 0, !c.noGSO.Load()) }

// sendFrom sends packets first.. of b, merging same-destination runs into
// GSO super-packets when gso is set.
func (c *batchConn) sendFrom(b *batch, first int, gso bool) {
	m := 0
	var start [maxBatch]int // first packet of each message
	for i := first; i < b.n; {
		j := i + 1
		if gso {
			// Extend a run to the same destination: equal sizes, the
			// last one may be shorter, within 64 segments and 64 KB.
			size := len(b.bufs[i])
			total := size
			for j < b.n && j-i < maxGSOSegments && b.dst[j] == b.dst[i] &&
				len(b.bufs[j]) <= size && total+len(b.bufs[j]) <= maxGSOBytes {
				total += len(b.bufs[j])
				j++
				if len(b.bufs[j-1]) < size {
					break
				}
			}
		}
		msg := &c.msgs[m]
		msg.Buffers = append(c.iovs[m][:0], b.bufs[i:j]...)
		c.iovs[m] = msg.Buffers
		msg.OOB = c.oobs[m][:0]
		if j-i > 1 {
			msg.OOB = appendSegmentSize(msg.OOB, uint16(len(b.bufs[i])))
			c.oobs[m] = msg.OOB
		}
		msg.Addr = c.udpAddr(m, b.dst[i])
		start[m] = i
		m++
		i = j
	}
	defer func() {
		for k := 0; k < m; k++ {
			c.msgs[k].Buffers, c.msgs[k].Addr = nil, nil
		}
	}()
	for k := 0; k < m; {
		n, err := c.pc.WriteBatch(c.msgs[k:m], 0)
		c.st.syscalls.Add(1)
		if err != nil {
			if len(c.msgs[k].OOB) > 0 {
				// A super-packet was refused: send its packets one by
				// one (and everything after it). EIO means the device
				// cannot segment: no GSO from now on.
				if errors.Is(err, unix.EIO) {
					c.noGSO.Store(true)
				}
				c.sendFrom(b, start[k], false)
				return
			}
			c.st.errors.Add(1)
			k++ // skip the refused message, keep the rest
			continue
		}
		for _, msg := range c.msgs[k : k+n] {
			if len(msg.Buffers) > 1 {
				c.st.segments.Add(uint64(len(msg.Buffers)))
			}
		}
		c.st.messages.Add(uint64(n))
		k += n
	}
}

// udpAddr fills message m's preallocated address with ap (no allocation).
func (c *batchConn) udpAddr(m int, ap netip.AddrPort) *net.UDPAddr {
	a := &c.addrs[m]
	ip := ap.Addr()
	if ip.Is4() || ip.Is4In6() {
		v := ip.Unmap().As4()
		a.IP = append(c.ips[m][:0], v[:]...)
	} else {
		v := ip.As16()
		a.IP = append(c.ips[m][:0], v[:]...)
	}
	a.Port = int(ap.Port())
	a.Zone = ""
	return a
}

// appendSegmentSize appends a UDP_SEGMENT control message (the GSO segment
// size, a native-endian uint16) to b.
func appendSegmentSize(b []byte, size uint16) []byte {
	start := len(b)
	b = append(b, make([]byte, unix.CmsgSpace(2))...)
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[start]))
	h.Level = unix.IPPROTO_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&b[start+unix.CmsgSpace(0)])) = size
	return b
}

func (c *batchConn) stats() Stats {
	return Stats{
		Packets: c.st.packets.Load(), Syscalls: c.st.syscalls.Load(), Messages: c.st.messages.Load(),
		Segments: c.st.segments.Load(), Errors: c.st.errors.Load(), TimedOut: c.st.timedOut.Load(),
		Oversized: c.st.oversized.Load(),
	}
}

// ReadFromAddrPort reads one packet (the ICE mux's read loop).
func (c *batchConn) ReadFromAddrPort(b []byte) (int, netip.AddrPort, error) {
	return c.conn.ReadFromUDPAddrPort(b)
}

// ReadFrom implements net.PacketConn.
func (c *batchConn) ReadFrom(b []byte) (int, net.Addr, error) { return c.conn.ReadFrom(b) }

// WriteTo implements net.PacketConn through the batch.
func (c *batchConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, &net.OpError{Op: "write", Net: "udp", Addr: addr, Err: syscall.EAFNOSUPPORT}
	}
	return c.WriteToAddrPort(b, ua.AddrPort())
}

// Close sends what is queued, stops the flusher and closes the socket.
// Writes after Close fail with net.ErrClosed.
func (c *batchConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	for c.flushing {
		c.cond.Wait()
	}
	if c.pend.n > 0 {
		c.flushLocked(true)
	}
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	close(c.stop)
	<-c.done
	return c.conn.Close()
}

func (c *batchConn) LocalAddr() net.Addr                { return c.conn.LocalAddr() }
func (c *batchConn) SetDeadline(t time.Time) error      { return c.conn.SetDeadline(t) }
func (c *batchConn) SetReadDeadline(t time.Time) error  { return c.conn.SetReadDeadline(t) }
func (c *batchConn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }
