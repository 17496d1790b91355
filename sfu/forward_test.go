package sfu

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oshun/egbe-edge/internal/testwait"
)

// sinkWriter is a TrackLocalWriter that counts, optionally blocking.
type sinkWriter struct {
	n     atomic.Int64
	block chan struct{} // non-nil: WriteRTP waits on it
	last  atomic.Uint32 // last sequence number
}

func (w *sinkWriter) WriteRTP(h *rtp.Header, p []byte) (int, error) {
	if w.block != nil {
		<-w.block
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
	s := &SFU{cfg: cfg, m: m, now: time.Now, dirty: map[string]bool{}, kick: make(chan struct{}, 1)}
	s.pool.New = func() any { return &packet{pool: &s.pool} }
	return s
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
	st := &slotTrack{id: "slot0"}
	st.bind.Store(&binding{w: w, ssrc: 0x1234, pt: 111})
	return &peer{slots: []*slotTrack{st}, q: newQueue(s.cfg.QueueLen), done: make(chan struct{})}
}

// opusPacket is a 12-byte header, an RFC 6464 one-byte extension and a
// 60-byte payload (24 kbit/s, 20 ms).
func opusPacket(seq uint16) []byte {
	h := rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: seq, Timestamp: uint32(seq) * opusFrame, SSRC: 0xabc}
	_ = h.SetExtension(1, []byte{0x80 | 30})
	b, _ := (&rtp.Packet{Header: h, Payload: make([]byte, 60)}).Marshal()
	return b
}

// ingest runs the read loop's per-packet work on raw.
func (s *SFU) ingest(sp *peer, raw []byte) {
	pk := s.pool.Get().(*packet)
	pk.n = copy(pk.b[:], raw)
	if !parseRTP(pk.b[:pk.n], 1, &pk.info) {
		s.pool.Put(pk)
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
	hdr := &rtp.Header{Version: 2}
	batch := make([]entry, 0, 64)
	seq := uint16(1)
	allocs := testing.AllocsPerRun(1000, func() {
		seq++
		raw[2], raw[3] = byte(seq>>8), byte(seq)
		s.ingest(sp, raw)
		for _, l := range ls {
			batch = l.q.popAll(batch[:0])
			s.sendBatch(l, batch, hdr)
			clear(batch)
		}
	})
	if allocs != 0 {
		t.Fatalf("forwarding path allocates %.1f per packet", allocs)
	}
	if got := testutil.ToFloat64(s.m.forwarded); got < 10*1000 {
		t.Fatalf("forwarded %v", got)
	}
}

// TestSlowListenerQueue: a listener whose writes block does not slow the
// speaker's fan-out or the other listeners; its queue drops the oldest.
func TestSlowListenerQueue(t *testing.T) {
	s := bareSFU(t, func(c *Config) { c.QueueLen = 8 })
	sp := &peer{room: "r"}
	slow := &sinkWriter{block: make(chan struct{})}
	fast := &sinkWriter{}
	ls := []*peer{bareListener(s, slow), bareListener(s, fast)}
	wire(sp, ls)
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() { defer wg.Done(); s.writeLoop(l) }()
	}
	const n = 500
	var inFanout time.Duration
	for i := range n {
		raw := opusPacket(uint16(i + 1))
		start := time.Now()
		s.ingest(sp, raw)
		inFanout += time.Since(start)
		// The fast listener gets every packet while the slow one is stuck.
		deadline := time.Now().Add(time.Second)
		for fast.n.Load() != int64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("fast listener stuck at %d of %d", fast.n.Load(), i+1)
			}
			runtime.Gosched()
		}
	}
	if inFanout > time.Second {
		t.Fatalf("fan-out of %d packets took %v", n, inFanout)
	}
	testwait.Within(t, 2*time.Second, "fast listener gets the last packet", func() bool { return fast.last.Load() == n })
	if got := testutil.ToFloat64(s.m.dropped[dropQueueFull]); got < n-20 {
		t.Fatalf("queue_full drops = %v, want about %d", got, n-9)
	}
	close(slow.block)
	for _, l := range ls {
		close(l.done)
	}
	wg.Wait()
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
