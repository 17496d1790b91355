package iceport

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

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
	// Held counts the batches whose first packet had to wait (under a
	// cork, or behind another goroutine's sendmmsg); HoldNanos is the sum
	// and HoldMaxNanos the longest of those waits, from the first
	// packet's queueing to the start of its sendmmsg: the latency the
	// batching adds (later packets of a batch wait less).
	Held, HoldNanos, HoldMaxNanos uint64
}

// batch is one sendmmsg worth of packets.
type batch struct {
	n    int
	t0   int64                    // monotonic ns its first packet waited from; 0: sent at once
	bufs [maxBatch][]byte         // cap slotSize each; len = packet
	dst  [maxBatch]netip.AddrPort // destination per packet
}

// batchConn is the port's UDP socket with batched writes. It implements
// net.PacketConn and pion/ice's AddrPortReaderWriter, so the ICE mux reads
// and writes through it without allocating.
type batchConn struct {
	conn *net.UDPConn    // immutable
	raw  syscall.RawConn // immutable
	v6   bool            // immutable: an AF_INET6 (dual-stack) socket

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

	// Owned by the goroutine that holds flushing: the sendmmsg(2)
	// arguments, built in place (no allocation per batch).
	hdrs   [maxBatch]mmsghdr
	iovs   [maxBatch]unix.Iovec
	names  [maxBatch]unix.RawSockaddrInet6     // an Inet4 one is its prefix
	oobs   [maxBatch][cmsgSegmentLenConst]byte // a UDP_SEGMENT control message each
	first  [maxBatch]int                       // first packet of each message
	hstart int                                 // first message of hdrs for sendmmsg
	nhdr   int                                 // messages from hstart for sendmmsg
	sent   int                                 // sendmmsg's result
	errno  syscall.Errno                       // sendmmsg's error
	sendmm func(fd uintptr) bool               // the RawConn.Write callback (built once)
	noGSO  atomic.Bool                         // GSO unsupported or switched off
	// direct: batching switched off (EGBE_ICE_BATCH=off): every write is
	// one sendto, as with a plain socket. Immutable.
	direct bool
	sendTo func(b []byte, to netip.AddrPort) error

	st struct {
		packets, syscalls, messages, segments, errors, timedOut, oversized atomic.Uint64
		held, holdNanos, holdMax                                           atomic.Uint64
	}
}

var _ net.PacketConn = (*batchConn)(nil)

func newBatchConn(conn *net.UDPConn) (*batchConn, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	if n := unix.CmsgSpace(2); n != cmsgSegmentLenConst {
		return nil, fmt.Errorf("iceport: CMSG_SPACE(2) is %d here, want %d", n, cmsgSegmentLenConst)
	}
	c := &batchConn{
		conn: conn, raw: raw, v6: isV6(raw),
		pend: newBatch(), spare: newBatch(),
		hold: time.NewTimer(time.Hour),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	c.hold.Stop()
	c.cond.L = &c.mu
	c.sendmm = func(fd uintptr) bool {
		n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&c.hdrs[c.hstart])), uintptr(c.nhdr), 0, 0, 0)
		if e == unix.EAGAIN {
			return false // the poller waits for room
		}
		c.sent, c.errno = int(n), e
		return true
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
	if p.n == 1 && (c.corks > 0 || c.flushing) {
		p.t0 = monoNow() // it will wait: time it (a lone write does not)
	}
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
		if b.t0 != 0 {
			c.held(monoNow() - b.t0)
			b.t0 = 0
		}
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

// monoStart anchors monoNow.
var monoStart = time.Now()

// monoNow is monotonic nanoseconds (never 0: a batch's t0 of 0 is unset).
func monoNow() int64 { return int64(time.Since(monoStart)) + 1 }

// held records a batch's first packet's wait of d nanoseconds.
func (c *batchConn) held(d int64) {
	c.st.held.Add(1)
	c.st.holdNanos.Add(uint64(d))
	for {
		m := c.st.holdMax.Load()
		if uint64(d) <= m || c.st.holdMax.CompareAndSwap(m, uint64(d)) {
			return
		}
	}
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
	m, iov := 0, 0
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
		h := &c.hdrs[m].hdr
		*h = unix.Msghdr{}
		h.Iov = &c.iovs[iov]
		h.SetIovlen(j - i)
		for k := i; k < j; k++ {
			c.iovs[iov].Base = unsafe.SliceData(b.bufs[k])
			c.iovs[iov].SetLen(len(b.bufs[k]))
			iov++
		}
		h.Name, h.Namelen = c.sockaddr(m, b.dst[i])
		if j-i > 1 {
			putSegmentSize(&c.oobs[m], uint16(len(b.bufs[i])))
			h.Control = &c.oobs[m][0]
			h.SetControllen(cmsgSegmentLenConst)
		}
		c.first[m] = i
		m++
		i = j
	}
	for k := 0; k < m; {
		c.hstart, c.nhdr = k, m-k
		err := c.raw.Write(c.sendmm)
		c.st.syscalls.Add(1)
		if err == nil && c.errno != 0 {
			err = c.errno
		}
		if err != nil {
			if c.hdrs[k].hdr.Controllen > 0 {
				// A super-packet was refused: send its packets one by
				// one (and everything after it). EIO means the device
				// cannot segment: no GSO from now on.
				if errors.Is(err, unix.EIO) {
					c.noGSO.Store(true)
				}
				c.sendFrom(b, c.first[k], false)
				return
			}
			if isClosed(err) || errors.Is(err, os.ErrDeadlineExceeded) {
				// The socket is closed, or writes are being aborted
				// (the ICE mux's shutdown): nothing more goes out.
				c.st.errors.Add(uint64(b.n - c.first[k]))
				return
			}
			c.st.errors.Add(1)
			k++ // skip the refused message, keep the rest
			continue
		}
		for _, mh := range c.hdrs[k : k+c.sent] {
			if mh.hdr.Iovlen > 1 {
				c.st.segments.Add(mh.hdr.Iovlen)
			}
		}
		c.st.messages.Add(uint64(c.sent))
		k += c.sent
	}
}

// isClosed reports a write on a closed socket.
func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) || errors.Is(err, unix.EBADF) }

// sockaddr fills message m's destination in the socket's family: an IPv4
// address on a dual-stack AF_INET6 socket is written IPv4-mapped.
func (c *batchConn) sockaddr(m int, ap netip.AddrPort) (*byte, uint32) {
	sa := &c.names[m]
	ip := ap.Addr()
	if !c.v6 {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: ip.Unmap().As4()}
		putPort(&sa4.Port, ap.Port())
		return (*byte)(unsafe.Pointer(sa4)), unix.SizeofSockaddrInet4
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: ip.As16()}
	putPort(&sa.Port, ap.Port())
	return (*byte)(unsafe.Pointer(sa)), unix.SizeofSockaddrInet6
}

// putPort stores a port in network byte order.
func putPort(dst *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(dst))
	b[0], b[1] = byte(port>>8), byte(port)
}

// isV6 reports whether the socket is AF_INET6.
func isV6(raw syscall.RawConn) bool {
	var sa unix.Sockaddr
	_ = raw.Control(func(fd uintptr) { sa, _ = unix.Getsockname(int(fd)) })
	_, ok := sa.(*unix.SockaddrInet6)
	return ok
}

// mmsghdr is struct mmsghdr of sendmmsg(2).
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

// cmsgSegmentLenConst is the size of a UDP_SEGMENT control message,
// CMSG_SPACE(sizeof(uint16)) on 64-bit Linux (checked in newBatchConn).
const cmsgSegmentLenConst = 24

// putSegmentSize writes a UDP_SEGMENT control message (the GSO segment
// size, a native-endian uint16) into b.
func putSegmentSize(b *[cmsgSegmentLenConst]byte, size uint16) {
	*b = [cmsgSegmentLenConst]byte{}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
	h.Level = unix.IPPROTO_UDP
	h.Type = unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&b[unix.CmsgSpace(0)])) = size
}

func (c *batchConn) stats() Stats {
	return Stats{
		Packets: c.st.packets.Load(), Syscalls: c.st.syscalls.Load(), Messages: c.st.messages.Load(),
		Segments: c.st.segments.Load(), Errors: c.st.errors.Load(), TimedOut: c.st.timedOut.Load(),
		Oversized: c.st.oversized.Load(),
		Held:      c.st.held.Load(), HoldNanos: c.st.holdNanos.Load(), HoldMaxNanos: c.st.holdMax.Load(),
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
