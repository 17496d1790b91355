package pxsfu

import (
	"bytes"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oshun/egbe-edge/signalling/streamer"
)

// sinkWriter stands in for a sender's SRTP stream: it keeps the last
// packet written (the forwarder's output up to the write).
type sinkWriter struct {
	n        int
	lastSeq  uint16
	lastTS   uint32
	lastSSRC uint32
	lastLen  int
}

func (w *sinkWriter) WriteRTP(h *rtp.Header, payload []byte) (int, error) {
	w.n++
	w.lastSeq, w.lastTS, w.lastSSRC, w.lastLen = h.SequenceNumber, h.Timestamp, h.SSRC, len(payload)
	return len(payload), nil
}

func (w *sinkWriter) Write(b []byte) (int, error) { return len(b), nil }

var _ webrtc.TrackLocalWriter = (*sinkWriter)(nil)

// bareUpstream is an upstream with layers and no peer connection.
func bareUpstream(t testing.TB, layers int) (*SFU, *upstream) {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry(), "SFU")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	s := &SFU{cfg: cfg, met: m, players: map[string]*player{}, gone: map[string]bool{}}
	u := &upstream{s: s, info: offerInfo{video: &mediaInfo{}}}
	for i := range layers {
		u.video = append(u.video, &layer{idx: int32(i)})
	}
	u.ptKind[96] = codecH264
	return s, u
}

// boundVideo is a player's video bound to a sink with payload type 96.
func boundVideo(u *upstream, target int) (*videoOut, *sinkWriter) {
	w := &sinkWriter{}
	t := &outTrack{kind: webrtc.RTPCodecTypeVideo}
	b := &binding{w: w, ssrc: 4242}
	b.pts[96] = true
	t.bind.Store(b)
	p := &player{up: u, id: "P"}
	return newVideoOut(p, t, target), w
}

// h264Packets packetizes frame n of the pattern into RTP packets.
func h264Packets(t testing.TB, ssrc uint32, seq uint16, ts uint32) [][]byte {
	t.Helper()
	pat, _ := streamer.NewPatternH264(64, 32)
	var out [][]byte
	for _, nal := range bytes.Split(pat.Frame(0), []byte{0, 0, 0, 1})[1:] {
		// Single NAL unit packets (SPS, PPS) and the IDR as FU-A fragments.
		if nal[0]&0x1f != 5 {
			out = append(out, rtpPacket(ssrc, seq, ts, nal))
			seq++
			continue
		}
		for off, first := 1, true; off < len(nal); first = false {
			end := min(off+1000, len(nal))
			hdr := []byte{nal[0]&0xe0 | 28, nal[0] & 0x1f}
			if first {
				hdr[1] |= 0x80
			}
			if end == len(nal) {
				hdr[1] |= 0x40
			}
			out = append(out, rtpPacket(ssrc, seq, ts, append(hdr, nal[off:end]...)))
			seq++
			off = end
		}
	}
	return out
}

func rtpPacket(ssrc uint32, seq uint16, ts uint32, payload []byte) []byte {
	p := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: ts, SSRC: ssrc}, Payload: payload}
	b, _ := p.Marshal()
	return b
}

// TestForwardZeroAllocs: the per-packet path, from a packet read off a
// layer to the write into a player's SRTP stream, allocates nothing.
func TestForwardZeroAllocs(t *testing.T) {
	_, u := bareUpstream(t, 3)
	var subs []*videoOut
	var sinks []*sinkWriter
	for range 20 {
		v, w := boundVideo(u, 2)
		subs = append(subs, v)
		sinks = append(sinks, w)
	}
	u.video[2].subs.Store(&subs)
	pkts := h264Packets(t, 9, 100, 5000)
	var h rtpHeader
	var n uint32
	// The first frame switches every player onto layer 2.
	for _, p := range pkts {
		u.onVideo(u.video[2], p, &h, &n)
	}
	seq := uint16(100 + len(pkts))
	buf := make([]byte, len(pkts[3]))
	allocs := testing.AllocsPerRun(1000, func() {
		copy(buf, pkts[3]) // an FU-A fragment
		buf[2], buf[3] = byte(seq>>8), byte(seq)
		seq++
		u.onVideo(u.video[2], buf, &h, &n)
	})
	if allocs != 0 {
		t.Fatalf("forwarding path allocates %.1f per packet", allocs)
	}
	for i, w := range sinks {
		if w.n < 1000 || w.lastSSRC != 4242 || w.lastLen != len(pkts[3])-12 {
			t.Fatalf("player %d: %+v", i, w)
		}
	}
	if got := testutil.ToFloat64(u.s.met.forwarded); got < 20*1000 {
		t.Fatalf("forwarded %v", got)
	}
}

// TestLayerSwitchOnKeyFrame: a player switches layers only at a key
// frame of its target, and its outgoing stream continues (+1 sequence
// numbers, timestamps forward) across the switch.
func TestLayerSwitchOnKeyFrame(t *testing.T) {
	_, u := bareUpstream(t, 2)
	v, w := boundVideo(u, 0)
	var h rtpHeader
	fwd := func(l int32, pkt []byte, at int64) forwardResult {
		if !h.parse(pkt) {
			t.Fatal("parse")
		}
		return v.forward(l, &h, pkt, isKeyframeStart(codecH264, pkt[h.payOff:h.payEnd]), at)
	}
	low := h264Packets(t, 1, 1000, 90000)
	high := h264Packets(t, 2, 50000, 7777777)
	// Before a key frame of layer 0 nothing goes out: an FU-A middle
	// fragment is not a start.
	if r := fwd(0, low[3], 0); r != fwdSkip {
		t.Fatalf("mid-frame start: %v", r)
	}
	for _, p := range low {
		if r := fwd(0, p, 1e9); r != fwdSent && r != fwdSwitched {
			t.Fatalf("layer 0: %v", r)
		}
	}
	lastSeq, lastTS := w.lastSeq, w.lastTS
	v.target.Store(1)
	// Layer 1's mid-frame packets are skipped, its key frame switches.
	if r := fwd(1, high[4], 2e9); r != fwdSkip {
		t.Fatalf("layer 1 mid-frame: %v", r)
	}
	if r := fwd(1, high[0], 2e9); r != fwdSwitched {
		t.Fatalf("layer 1 key frame: %v", r)
	}
	if w.lastSeq != lastSeq+1 || w.lastTS-lastTS != 90000 {
		t.Fatalf("after the switch seq %d (was %d) ts %d (was %d)", w.lastSeq, lastSeq, w.lastTS, lastTS)
	}
	// Layer 0 no longer reaches the player.
	if r := fwd(0, low[0], 2e9); r != fwdSkip {
		t.Fatalf("old layer after the switch: %v", r)
	}
	// A packet from before the switch point is stale.
	if r := fwd(1, rtpPacket(2, 49999, 7777777, []byte{1, 2}), 2e9); r != fwdStale {
		t.Fatalf("pre-switch packet: %v", r)
	}
}

// TestKeyframeRequestsMerged: 500 players joining over ten seconds cost
// the streamer one PLI per KeyframeInterval at most, and a key frame
// arriving cancels a merged request.
func TestKeyframeRequestsMerged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, u := bareUpstream(t, 3)
		var plis atomic.Int64
		u.pli = func(uint32) { plis.Add(1) }
		l := u.video[2]
		l.ssrc.Store(9)
		for i := range 500 {
			u.wantKeyframe(l, keyJoin)
			time.Sleep(20 * time.Millisecond)
			if i%5 == 0 {
				u.flushKeyframes(time.Now())
			}
		}
		u.flushKeyframes(time.Now())
		if n := plis.Load(); n < 5 || n > 11 {
			t.Fatalf("%d PLIs for 500 joins over 10 s", n)
		}
		// A key frame inside the gap: the merged request is dropped.
		time.Sleep(2 * time.Second)
		before := plis.Load()
		u.wantKeyframe(l, keyJoin) // sent
		u.wantKeyframe(l, keyJoin) // merged
		l.keyArrived(time.Now().UnixNano() + 1)
		time.Sleep(2 * time.Second)
		u.flushKeyframes(time.Now())
		if n := plis.Load() - before; n != 1 {
			t.Fatalf("%d PLIs, want 1 (the merged one was answered by a key frame)", n)
		}
	})
}

// TestPickLayer: preference, bandwidth estimate with hysteresis, probing,
// and stopped layers.
func TestPickLayer(t *testing.T) {
	s, u := bareUpstream(t, 3)
	s.cfg.ProbeAfter = 10 * time.Second
	rates := []uint64{300e3, 1200e3, 4800e3}
	now := time.Unix(1000, 0)
	for i, r := range rates {
		u.video[i].rate.Store(r)
		u.video[i].lastPkt.Store(now.UnixNano())
	}
	p := &player{up: u, offeredAt: now.Add(-time.Minute), backoff: 1}
	p.pref.Store(-1)
	p.video, _ = boundVideo(u, 2)
	p.video.cur.Store(2)
	pick := func(est uint64) int {
		if est > 0 {
			p.est.Store(est)
			p.estAt.Store(now.UnixNano())
		}
		return u.pickLayer(p, now)
	}
	if got := pick(0); got != 2 {
		t.Fatalf("no estimate: layer %d", got)
	}
	p.pref.Store(1)
	if got := pick(0); got != 1 {
		t.Fatalf("preference 1: layer %d", got)
	}
	p.pref.Store(-1)
	if got := pick(50e6); got != 2 {
		t.Fatalf("ample estimate: layer %d", got)
	}
	// 2 Mbit/s does not carry layer 2 (4.8): down to 1, on the second sample.
	if got := pick(2e6); got != 2 {
		t.Fatalf("first low sample: layer %d", got)
	}
	if got := pick(2e6); got != 1 {
		t.Fatalf("second low sample: layer %d", got)
	}
	p.video.cur.Store(1)
	// 1 Mbit/s still keeps layer 1 (80 % of 1.2), 0.5 does not.
	if got := pick(1e6); got != 1 {
		t.Fatalf("1 Mbit/s on layer 1: layer %d", got)
	}
	pick(500e3)
	if got := pick(500e3); got != 0 {
		t.Fatalf("0.5 Mbit/s: layer %d", got)
	}
	p.video.cur.Store(0)
	// Held down by the estimate, it probes one layer up after ProbeAfter.
	now = now.Add(time.Second)
	if got := pick(500e3); got != 0 {
		t.Fatalf("held down: layer %d", got)
	}
	now = now.Add(11 * time.Second)
	if got := pick(500e3); got != 1 {
		t.Fatalf("probe: layer %d", got)
	}
	// A layer that stopped sending is skipped.
	p.est.Store(0)
	u.video[0].lastPkt.Store(now.UnixNano())
	u.video[1].lastPkt.Store(now.UnixNano())
	u.video[2].lastPkt.Store(now.Add(-5 * time.Second).UnixNano())
	if got := pick(0); got != 1 {
		t.Fatalf("top layer stopped: layer %d", got)
	}
}

// TestKeyframeStart covers the codecs' key-frame tests beyond H.264's.
func TestKeyframeStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    codecKind
		p    []byte
		want bool
	}{
		{"vp8 key, no extension", codecVP8, []byte{0x10, 0x00}, true},
		{"vp8 inter", codecVP8, []byte{0x10, 0x01}, false},
		{"vp8 key, picture id 15 bits", codecVP8, []byte{0x90, 0x80, 0x81, 0x02, 0x00}, true},
		{"vp8 not a partition start", codecVP8, []byte{0x00, 0x00}, false},
		{"vp8 truncated extension", codecVP8, []byte{0x90}, false},
		{"vp9 key start", codecVP9, []byte{0x08}, true},
		{"vp9 inter", codecVP9, []byte{0x48}, false},
		{"av1 new sequence", codecAV1, []byte{0x08}, true},
		{"av1 other", codecAV1, []byte{0x10}, false},
		{"h264 STAP-A with SPS", codecH264, []byte{24, 0, 2, 0x67, 0x42}, true},
		{"h264 STAP-A truncated", codecH264, []byte{24, 0, 9, 0x41}, false},
		{"h264 FU-A IDR middle", codecH264, []byte{0x7c, 0x05}, false},
		{"h264 non-IDR slice", codecH264, []byte{0x41}, false},
		{"opus", codecOther, []byte{0x08}, false},
		{"empty", codecH264, nil, false},
	} {
		if got := isKeyframeStart(tc.c, tc.p); got != tc.want {
			t.Errorf("%s: %v", tc.name, got)
		}
	}
}

// FuzzRTPHeader: no packet makes the header parser or the key-frame
// tests read out of bounds.
func FuzzRTPHeader(f *testing.F) {
	for _, p := range h264Packets(f, 1, 2, 3) {
		f.Add(p)
	}
	f.Add(rtpPacket(1, 2, 3, []byte{0x90, 0x80}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h rtpHeader
		if !h.parse(b) {
			return
		}
		if h.payOff > h.payEnd || h.payEnd > len(b) {
			t.Fatalf("payload %d..%d of %d", h.payOff, h.payEnd, len(b))
		}
		for c := codecOther; c <= codecAV1; c++ {
			isKeyframeStart(c, b[h.payOff:h.payEnd])
		}
	})
}
