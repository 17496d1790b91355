package iceport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/testwait"
)

// sink is a real loopback UDP socket that records what arrives.
type sink struct {
	conn *net.UDPConn
	ap   netip.AddrPort
	mu   sync.Mutex
	got  [][]byte // guarded by mu
	wg   sync.WaitGroup
}

func newSink(t testing.TB) *sink {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadBuffer(4 << 20)
	s := &sink{conn: c, ap: c.LocalAddr().(*net.UDPAddr).AddrPort()}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		buf := make([]byte, 65536)
		for {
			n, _, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.got = append(s.got, append([]byte(nil), buf[:n]...))
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = c.Close(); s.wg.Wait() })
	return s
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

func (s *sink) packets() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.got...)
}

func newTestConn(t testing.TB) *batchConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetWriteBuffer(8 << 20)
	bc, err := newBatchConn(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bc.Close() })
	return bc
}

// pkt is a test packet: writer id, sequence number, padding to size.
func pkt(writer, seq uint32, size int) []byte {
	b := make([]byte, max(size, 8))
	binary.BigEndian.PutUint32(b, writer)
	binary.BigEndian.PutUint32(b[4:], seq)
	return b
}

// checkStream requires the packets of each writer at s to be exactly
// 0..n-1 in order.
func checkStream(t *testing.T, s *sink, writers []uint32, n int) {
	t.Helper()
	next := map[uint32]uint32{}
	for _, w := range writers {
		next[w] = 0
	}
	for _, p := range s.packets() {
		w, seq := binary.BigEndian.Uint32(p), binary.BigEndian.Uint32(p[4:])
		want, ok := next[w]
		if !ok {
			t.Fatalf("%v: packet from unknown writer %d", s.ap, w)
		}
		if seq != want {
			t.Fatalf("%v: writer %d: got seq %d, want %d (lost, duplicated or reordered)", s.ap, w, seq, want)
		}
		next[w] = want + 1
	}
	for w, got := range next {
		if int(got) != n {
			t.Fatalf("%v: writer %d: %d of %d packets", s.ap, w, got, n)
		}
	}
}

// TestBatchOrderingNoLossNoDup: several writers, some corking around
// bursts (so batches fill and flush while others append), others writing
// one packet at a time; each destination gets each writer's packets
// exactly once and in order, including GSO runs (same destination, same
// size) and oversized packets written through.
func TestBatchOrderingNoLossNoDup(t *testing.T) {
	for _, gso := range []bool{true, false} {
		t.Run(fmt.Sprintf("gso=%v", gso), func(t *testing.T) {
			bc := newTestConn(t)
			if !gso {
				bc.noGSO.Store(true)
			} else if bc.noGSO.Load() {
				t.Log("kernel without UDP_SEGMENT: GSO runs are sent as plain messages")
			}
			const dests, writers, n = 6, 4, 600
			sinks := make([]*sink, dests)
			for i := range sinks {
				sinks[i] = newSink(t)
			}
			var wg sync.WaitGroup
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for seq := 0; seq < n; {
						if w%2 == 0 { // a corked burst: 1..40 rounds over every destination
							burst := 1 + (seq*7+w)%40
							bc.cork()
							for k := 0; k < burst && seq < n; k++ {
								for d, s := range sinks {
									size := 100 + (seq % 3)
									if d == 0 && seq%97 == 5 {
										size = 3000 // through the oversized path
									}
									if _, err := bc.WriteToAddrPort(pkt(uint32(w), uint32(seq), size), s.ap); err != nil {
										t.Error(err)
									}
								}
								seq++
							}
							bc.uncork()
						} else { // one at a time, a same-size run to one destination
							for _, s := range sinks {
								for k := 0; k < 3 && seq+k < n; k++ {
									if _, err := bc.WriteToAddrPort(pkt(uint32(w), uint32(seq+k), 200), s.ap); err != nil {
										t.Error(err)
									}
								}
							}
							seq += 3
						}
					}
				}()
			}
			wg.Wait()
			ids := make([]uint32, writers)
			for i := range ids {
				ids[i] = uint32(i)
			}
			for _, s := range sinks {
				testwait.Within(t, 5*time.Second, "all packets", func() bool { return s.count() >= writers*n })
			}
			time.Sleep(20 * time.Millisecond) // a duplicate would land now
			for _, s := range sinks {
				checkStream(t, s, ids, n)
			}
			st := bc.stats()
			if st.Syscalls >= st.Packets {
				t.Fatalf("no batching: %d syscalls for %d packets", st.Syscalls, st.Packets)
			}
			if gso && !bc.noGSO.Load() && st.Segments == 0 {
				t.Fatalf("GSO on but no super-packets: %+v", st)
			}
			t.Logf("%+v", st)
		})
	}
}

// TestBatchFlushOnIdle: a packet never waits for more traffic. Written
// alone it leaves at once; written under a cork it leaves at the uncork;
// under a cork whose holder never lets go it leaves after maxHold.
func TestBatchFlushOnIdle(t *testing.T) {
	bc := newTestConn(t)
	s := newSink(t)
	if _, err := bc.WriteToAddrPort(pkt(0, 0, 50), s.ap); err != nil {
		t.Fatal(err)
	}
	testwait.Within(t, 2*time.Second, "an uncorked packet", func() bool { return s.count() == 1 })
	if st := bc.stats(); st.Held != 0 {
		t.Fatalf("a lone write counted as held: %+v", st)
	}

	bc.cork()
	_, _ = bc.WriteToAddrPort(pkt(0, 1, 50), s.ap)
	_, _ = bc.WriteToAddrPort(pkt(0, 2, 50), s.ap)
	bc.uncork()
	testwait.Within(t, 2*time.Second, "packets at uncork", func() bool { return s.count() == 3 })
	if st := bc.stats(); st.Held != 1 || st.HoldNanos == 0 || st.HoldNanos != st.HoldMaxNanos {
		t.Fatalf("one corked batch: %+v", st)
	}

	bc.cork() // a holder that stalls
	_, _ = bc.WriteToAddrPort(pkt(0, 3, 50), s.ap)
	testwait.Within(t, 2*time.Second, "a packet a stalled cork holds", func() bool { return s.count() == 4 })
	if st := bc.stats(); st.TimedOut == 0 || st.Held != 2 || st.HoldMaxNanos < uint64(maxHold) {
		// The timer cannot fire before maxHold: the batch's wait is at
		// least that.
		t.Fatalf("the hold timer did not flush: %+v", st)
	}
	// Later packets under the same stalled cork are bounded too.
	_, _ = bc.WriteToAddrPort(pkt(0, 4, 50), s.ap)
	testwait.Within(t, 2*time.Second, "a second packet a stalled cork holds", func() bool { return s.count() == 5 })
	bc.uncork()
	checkStream(t, s, []uint32{0}, 5)
}

// TestBatchErroringDestination: a destination the kernel refuses (UDP
// port 0: EINVAL) costs only its own packets; everything around it in the
// same batches arrives, in order.
func TestBatchErroringDestination(t *testing.T) {
	for _, gso := range []bool{true, false} {
		t.Run(fmt.Sprintf("gso=%v", gso), func(t *testing.T) {
			bc := newTestConn(t)
			if !gso {
				bc.noGSO.Store(true)
			}
			good := []*sink{newSink(t), newSink(t)}
			bad := netip.MustParseAddrPort("127.0.0.1:0")
			const n = 200
			bc.cork()
			for seq := 0; seq < n; seq++ {
				_, _ = bc.WriteToAddrPort(pkt(0, uint32(seq), 80), good[0].ap)
				_, _ = bc.WriteToAddrPort(pkt(0, uint32(seq), 80), bad)
				_, _ = bc.WriteToAddrPort(pkt(0, uint32(seq), 80), bad) // a GSO run
				_, _ = bc.WriteToAddrPort(pkt(0, uint32(seq), 80), good[1].ap)
			}
			bc.uncork()
			for _, s := range good {
				testwait.Within(t, 3*time.Second, "good destinations", func() bool { return s.count() >= n })
				checkStream(t, s, []uint32{0}, n)
			}
			if got := bc.stats().Errors; got != 2*n {
				t.Fatalf("errors = %d, want %d", got, 2*n)
			}
		})
	}
}

// TestBatchCloseWhileFlushing: Close while writers are mid-batch neither
// deadlocks nor panics; later writes fail with net.ErrClosed and the
// flusher goroutine is gone (goleak, TestMain).
func TestBatchCloseWhileFlushing(t *testing.T) {
	for round := range 20 {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		bc, err := newBatchConn(c)
		if err != nil {
			t.Fatal(err)
		}
		s := newSink(t)
		var wg sync.WaitGroup
		var closedSeen atomic.Int64
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seq := 0; ; seq++ {
					if w == 0 {
						bc.cork()
					}
					_, err := bc.WriteToAddrPort(pkt(uint32(w), uint32(seq), 120), s.ap)
					if w == 0 {
						bc.uncork()
					}
					if err != nil {
						if !errors.Is(err, net.ErrClosed) {
							t.Errorf("write after close: %v", err)
						}
						closedSeen.Add(1)
						return
					}
				}
			}()
		}
		testwait.Within(t, 2*time.Second, "traffic", func() bool { return s.count() > 50*(round%3+1) })
		if err := bc.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if closedSeen.Load() != 4 {
			t.Fatalf("%d writers saw the close", closedSeen.Load())
		}
		if _, err := bc.WriteToAddrPort(pkt(9, 0, 10), s.ap); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write after Close: %v", err)
		}
		if err := bc.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
}

// TestBatchDualStack: on a dual-stack socket (":port", what the edge's
// default --ice-udp opens) IPv4 destinations go out IPv4-mapped, and
// both families arrive, through plain and GSO messages.
func TestBatchDualStack(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{})
	if err != nil {
		t.Fatal(err)
	}
	bc, err := newBatchConn(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bc.Close() })
	if !bc.v6 {
		t.Skip("no IPv6 on this host: the socket is AF_INET") // the AF_INET path is every other test
	}
	s4 := newSink(t)
	c6, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Fatalf("IPv6 loopback: %v", err)
	}
	s6 := &sink{conn: c6, ap: c6.LocalAddr().(*net.UDPAddr).AddrPort()}
	s6.wg.Add(1)
	go func() {
		defer s6.wg.Done()
		buf := make([]byte, 65536)
		for {
			n, _, err := c6.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			s6.mu.Lock()
			s6.got = append(s6.got, append([]byte(nil), buf[:n]...))
			s6.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = c6.Close(); s6.wg.Wait() })
	bc.cork()
	for seq := range 10 {
		_, _ = bc.WriteToAddrPort(pkt(0, uint32(seq), 100), s4.ap)
	}
	for seq := range 10 {
		_, _ = bc.WriteToAddrPort(pkt(0, uint32(seq), 100), s6.ap)
	}
	bc.uncork()
	for _, s := range []*sink{s4, s6} {
		testwait.Within(t, 2*time.Second, "both families", func() bool { return s.count() >= 10 })
		checkStream(t, s, []uint32{0}, 10)
	}
}
