package sfu

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oshun/egbe-edge/internal/testwait"
)

// sinkWriter is a TrackLocalWriter that counts, optionally failing.
type sinkWriter struct {
	n    atomic.Int64
	fail bool          // WriteRTP fails (a listener whose SRTP session is gone)
	last atomic.Uint32 // last sequence number
}

var errSinkClosed = errors.New("sink closed")

func (w *sinkWriter) WriteRTP(h *rtp.Header, p []byte) (int, error) {
	if w.fail {
		return 0, errSinkClosed
	}
	w.n.Add(1)
	w.last.Store(uint32(h.SequenceNumber))
	return len(p), nil
}
func (w *sinkWriter) Write(b []byte) (int, error) { return len(b), nil }

func bareSFU(tb testing.TB, mod func(*Config)) *SFU {
	cfg := Default()
	if mod != nil {
		mod(&cfg)
	}
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		tb.Fatal(err)
	}
	return &SFU{cfg: cfg, m: m, now: time.Now, dirty: map[string]bool{}, kick: make(chan struct{}, 1)}
}

// wire makes sp the speaker of slot 0 of every listener.
func wire(sp *peer, ls []*peer) {
	subs := make([]sub, len(ls))
	for i, l := range ls {
		l.slots[0].cur.Store(sp)
		subs[i] = sub{l: l, slot: 0}
	}
	sp.subs.Store(&subs)
}

func bareListener(s *SFU, w *sinkWriter) *peer {
	st := &slotTrack{id: "slot0", hdr: rtp.Header{Version: 2}}
	st.bind.Store(&binding{w: w, ssrc: 0x1234, pt: 111})
	return &peer{slots: []*slotTrack{st}, done: make(chan struct{})}
}

// opusPacket is a 12-byte header, an RFC 6464 one-byte extension and a
// 60-byte payload (24 kbit/s, 20 ms).
func opusPacket(seq uint16) []byte {
	h := rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: seq, Timestamp: uint32(seq) * opusFrame, SSRC: 0xabc}
	_ = h.SetExtension(1, []byte{0x80 | 30})
	b, _ := (&rtp.Packet{Header: h, Payload: make([]byte, 60)}).Marshal()
	return b
}

// ingest runs the read loop's per-packet work on raw, in pk (the read
// loop's own buffer).
func (s *SFU) ingest(sp *peer, pk *packet, raw []byte) {
	pk.n = copy(pk.b[:], raw)
	if !parseRTP(pk.b[:pk.n], 1, &pk.info) {
		return
	}
	pk.at = s.now().UnixNano()
	s.observe(sp, &pk.info, pk.at)
	s.fanout(sp, pk)
}

func TestForwardZeroAllocs(t *testing.T) {
	s := bareSFU(t, nil)
	sp := &peer{room: "r"}
	var ls []*peer
	for range 10 {
		ls = append(ls, bareListener(s, &sinkWriter{}))
	}
	wire(sp, ls)
	sp.speaking.Store(true) // no speaking flip inside the measured loop
	sp.loud.Store(127 - 30)
	raw := opusPacket(1)
	pk := new(packet)
	seq := uint16(1)
	allocs := testing.AllocsPerRun(1000, func() {
		seq++
		raw[2], raw[3] = byte(seq>>8), byte(seq)
		s.ingest(sp, pk, raw)
	})
	if allocs != 0 {
		t.Fatalf("forwarding path allocates %.1f per packet", allocs)
	}
	if got := testutil.ToFloat64(s.m.forwarded); got < 10*1000 {
		t.Fatalf("forwarded %v", got)
	}
}

// TestFailingListener: a listener whose writes fail (its SRTP session
// gone mid-fan-out) costs only itself: every other listener of the
// speaker gets every packet, in order, and the failures are counted.
func TestFailingListener(t *testing.T) {
	s := bareSFU(t, nil)
	sp := &peer{room: "r"}
	sp.speaking.Store(true)
	sp.loud.Store(127 - 30)
	bad := &sinkWriter{fail: true}
	good := []*sinkWriter{{}, {}}
	ls := []*peer{bareListener(s, good[0]), bareListener(s, bad), bareListener(s, good[1])}
	wire(sp, ls)
	const n = 500
	pk := new(packet)
	for i := range n {
		s.ingest(sp, pk, opusPacket(uint16(i+1)))
	}
	for i, g := range good {
		if g.n.Load() != n || g.last.Load() != n {
			t.Fatalf("listener %d got %d packets, last seq %d; want %d", i, g.n.Load(), g.last.Load(), n)
		}
	}
	if got := testutil.ToFloat64(s.m.dropped[dropWriteError]); got != n {
		t.Fatalf("write_error drops = %v, want %d", got, n)
	}
	if got := testutil.ToFloat64(s.m.forwarded); got != 2*n {
		t.Fatalf("forwarded = %v, want %d", got, 2*n)
	}
}

func TestRewriter(t *testing.T) {
	a, b := &peer{}, &peer{}
	var r rewriter
	base := int64(1e12)
	at := func(ms int) int64 { return base + int64(ms)*1e6 }
	type step struct {
		src      *peer
		seq      uint16
		ts       uint32
		ms       int
		wantSeq  uint16
		wantTS   uint32
		switched bool
		ok       bool
	}
	steps := []step{
		{a, 100, 5000, 0, 100, 5000, true, true},
		{a, 101, 5960, 20, 101, 5960, false, true},
		{a, 101, 5960, 21, 0, 0, false, false},     // duplicate
		{a, 103, 7880, 60, 103, 7880, false, true}, // loss gap kept
		{a, 102, 6920, 61, 0, 0, false, false},     // late: dropped
		// switch to b 100 ms later: seq continues, ts advances 5 frames
		{b, 65535, 1 << 31, 160, 104, 7880 + 5*960, true, true},
		{b, 0, 1<<31 + 960, 180, 105, 7880 + 6*960, false, true}, // b's seq wraps
		{a, 104, 8840, 181, 0, 0, true, false},                   // a again but older than the boundary? no: new switch
	}
	for i, s := range steps[:7] {
		seq, ts, sw, ok := r.rewrite(s.src, s.seq, s.ts, at(s.ms))
		if ok != s.ok || (ok && (seq != s.wantSeq || ts != s.wantTS || sw != s.switched)) {
			t.Fatalf("step %d: got seq %d ts %d switched %v ok %v; want %+v", i, seq, ts, sw, ok, s)
		}
	}
	// Switching back to a continues after b.
	seq, ts, sw, ok := r.rewrite(a, 104, 8840, at(200))
	if !ok || !sw || seq != 106 || ts != 7880+7*960 {
		t.Fatalf("switch back: seq %d ts %d sw %v ok %v", seq, ts, sw, ok)
	}
}

// TestForwardPionZeroAllocs: nothing allocates from the speaker's RTP
// read (the read loop's track read: SRTP-decrypted packet out of pion)
// through the fan-out to every listener's SRTP encryption and the batched
// UDP write, at 1 and at 100 listeners. Speaker and listeners are real
// pion clients in a child process (only the edge's allocations count);
// each run is one microphone packet, done when every listener's slot has
// written it.
//
// Two measures. testing.AllocsPerRun counts the whole process, where
// pion's per-agent ICE timers (every 2 s, about ten allocations each, in
// 100 agents connected together) land in some windows and not others: the
// quietest of several 50-packet windows must be 0. And, exactly, every
// allocation whose stack passes through the read loop, from the heap
// profile at MemProfileRate 1 over all the windows, must be 0. The edge's
// periodic RTCP and sampling are not on the path and are pushed out of
// the window; the clients send no RTCP and a consent check every 10 s.
// Under the race detector (sync.Pool drops at random) only the exact
// stack count applies.
func TestForwardPionZeroAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("joins 100 pion peers (-short)")
	}
	rate := runtime.MemProfileRate
	t.Cleanup(func() { runtime.MemProfileRate = rate })
	for _, n := range []int{1, 100} {
		t.Run(fmt.Sprintf("listeners=%d", n), func(t *testing.T) {
			e := newEnv(t, func(c *Config) { c.StatsInterval, c.ReportInterval = time.Hour, time.Hour })
			r, ps := joinChildren(t, e, n+1, speakerEnv+"=1", quietEnv+"=1")
			listeners := ps[1:]
			sent := func() (total int64) {
				for _, l := range listeners {
					total += int64(l.slots[0].sent.Load())
				}
				return total
			}
			// Warm up: the speaker's track arrives, the room is
			// recomputed and every listener's slot carries it.
			testwait.Within(t, 20*time.Second, "every listener hears the speaker", func() bool {
				r.speak(t)
				for _, l := range listeners {
					if l.slots[0].sent.Load() < 3 {
						return false
					}
				}
				return true
			})
			want := sent()
			for range 50 { // settle buffers and pion's per-stream state
				r.speak(t)
				want += int64(n)
				waitSent(t, sent, want)
			}
			count0, want0 := r.count(t), want
			quietest := math.Inf(1)
			for range 10 {
				a := testing.AllocsPerRun(50, func() {
					r.speak(t)
					want += int64(n)
					for sent() < want {
						runtime.Gosched()
					}
				})
				quietest = min(quietest, a)
			}
			if quietest != 0 && !raceEnabled {
				t.Errorf("AllocsPerRun: %.0f per forwarded microphone packet in the quietest window (%d listeners)", quietest, n)
			}
			// The same windows again with every allocation profiled.
			runtime.MemProfileRate = 1
			before := readLoopAllocs()
			for range 10 * 51 {
				r.speak(t)
				want += int64(n)
				for sent() < want {
					runtime.Gosched()
				}
			}
			runtime.MemProfileRate = rate
			var path int64
			for stack, a := range readLoopAllocs() {
				if d := a - before[stack]; d > 0 {
					path += d
					t.Logf("%d allocations at%s", d, stack)
				}
			}
			if path != 0 {
				t.Errorf("%d allocations on the read loop's path over %d packets (%d listeners)", path, 10*51, n)
			}
			// And the listeners received every packet forwarded.
			testwait.Within(t, 5*time.Second, "receivers count the forwarded packets", func() bool {
				return r.count(t)-count0 >= want-want0
			})
		})
	}
}

// runtimeCaches are the runtime's and sync's own amortised allocations:
// pool refills after a GC emptied a sync.Pool, pool chain links, the
// per-P sudog cache of select, the per-P timer heap, the type-switch
// caches the runtime grows at random. They happen a bounded number of
// times per GC or ever, not per packet.
var runtimeCaches = map[string]bool{
	"sync.(*Pool).Get":                  true,
	"sync.(*Pool).pinSlow":              true,
	"sync.(*poolChain).pushHead":        true,
	"runtime.acquireSudog":              true,
	"runtime.(*timers).addHeap":         true,
	"runtime.buildTypeAssertCache":      true,
	"runtime.buildInterfaceSwitchCache": true,
}

// readLoopAllocs maps each allocation stack through SFU.readLoop (other
// than runtimeCaches) to its allocations so far (exact at MemProfileRate
// 1).
func readLoopAllocs() map[string]int64 {
	runtime.GC() // the profile is published two cycles late
	runtime.GC()
	n, _ := runtime.MemProfile(nil, true)
	recs := make([]runtime.MemProfileRecord, n+64)
	n, _ = runtime.MemProfile(recs, true)
	out := map[string]int64{}
	for _, rec := range recs[:n] {
		var stack strings.Builder
		frames := runtime.CallersFrames(rec.Stack())
		for {
			f, more := frames.Next()
			if runtimeCaches[f.Function] {
				break
			}
			fmt.Fprintf(&stack, "\n\t%s:%d", f.Function, f.Line)
			if strings.HasSuffix(f.Function, "sfu.(*SFU).readLoop") {
				out[stack.String()] += rec.AllocObjects
				break
			}
			if !more {
				break
			}
		}
	}
	return out
}

// waitSent spins until sent() reaches want (bounded).
func waitSent(t *testing.T, sent func() int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for sent() < want {
		if time.Now().After(deadline) {
			t.Fatalf("forwarded %d of %d", sent(), want)
		}
		runtime.Gosched()
	}
}
