package pxsfu

import (
	"sync"
	"sync/atomic"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
)

// The packet path. Each upstream track (a video layer, or audio) has one
// reader goroutine (pion's OnTrack goroutine) that reads a packet into its
// own buffer, parses the header, and writes it to every player currently
// subscribed to that track, one after the other:
//
//	layer reader ─ parse ─ key frame? ─┬▶ player 1: cur layer? rewrite seq/ts/SSRC ▶ WriteRTP (SRTP, shared UDP port)
//	                                   ├▶ player 2 ...
//	                                   └▶ (players waiting to switch to this layer)
//
// The subscriber list of a track is an immutable slice behind an atomic
// pointer, replaced (never edited) when players join, leave or change
// target layer, so the reader takes no SFU lock. A player's video state
// has its own mutex: two layer readers touch it only while it waits to
// switch. Writes go straight to the sender's SRTP stream (the player API
// has no interceptors), so nothing on this path allocates.

// maxPacket is the largest RTP packet read (one Ethernet MTU).
const maxPacket = 1500

// videoClock is the RTP clock of every video codec the SFU forwards.
const videoClock = 90000

// outTrack is one sendonly track of a player: a webrtc.TrackLocal whose
// SSRC is fixed by its sender; the forwarder writes rewritten packets to
// its bound stream.
type outTrack struct {
	kind   webrtc.RTPCodecType
	id     string
	stream string
	bind   atomic.Pointer[binding]
}

type binding struct {
	w    webrtc.TrackLocalWriter
	ssrc uint32
	pts  [128]bool // payload types the player accepted
}

var _ webrtc.TrackLocal = (*outTrack)(nil)

func (t *outTrack) Bind(ctx webrtc.TrackLocalContext) (webrtc.RTPCodecParameters, error) {
	codecs := ctx.CodecParameters()
	if len(codecs) == 0 {
		return webrtc.RTPCodecParameters{}, webrtc.ErrUnsupportedCodec
	}
	b := &binding{w: ctx.WriteStream(), ssrc: uint32(ctx.SSRC())}
	for _, c := range codecs {
		b.pts[c.PayloadType&0x7f] = true
	}
	t.bind.Store(b)
	return codecs[0], nil
}

func (t *outTrack) Unbind(webrtc.TrackLocalContext) error { t.bind.Store(nil); return nil }
func (t *outTrack) ID() string                            { return t.id }
func (t *outTrack) RID() string                           { return "" }
func (t *outTrack) StreamID() string                      { return t.stream }
func (t *outTrack) Kind() webrtc.RTPCodecType             { return t.kind }

// rewriter maps the packets of whichever layer a player receives onto its
// one outgoing stream: sequence numbers continue +1 across a switch and
// timestamps advance by the wall time since the last packet, so the
// decoder sees one stream. Owned by videoOut.mu.
type rewriter struct {
	started bool
	seqOff  uint16 // out = in + seqOff
	tsOff   uint32 // out = in + tsOff
	firstIn uint16 // in seq of the segment's first packet
	lastSeq uint16 // highest out seq sent
	lastTS  uint32 // out ts of lastSeq
	lastAt  int64  // arrival (unix ns) of lastSeq's packet
}

// begin starts a segment at in packet (seq, ts), arriving at at.
func (r *rewriter) begin(seq uint16, ts uint32, at int64, clock uint32) {
	if !r.started {
		r.seqOff, r.tsOff = 0, 0
	} else {
		r.seqOff = r.lastSeq + 1 - seq
		step := uint32(1)
		if d := at - r.lastAt; d > 0 {
			if d > 60e9 { // bound: one minute
				d = 60e9
			}
			if s := uint32(d * int64(clock) / 1e9); s > 0 {
				step = s
			}
		}
		r.tsOff = r.lastTS + step - ts
	}
	r.started = true
	r.firstIn = seq
	r.lastSeq = seq + r.seqOff - 1
	r.lastTS = ts + r.tsOff
	r.lastAt = at
}

// rewrite maps in (seq, ts) to the outgoing stream; ok is false for a
// packet older than the segment (sent before the switch).
func (r *rewriter) rewrite(seq uint16, ts uint32, at int64) (oseq uint16, ots uint32, ok bool) {
	if int16(seq-r.firstIn) < 0 {
		return 0, 0, false
	}
	oseq, ots = seq+r.seqOff, ts+r.tsOff
	if int16(oseq-r.lastSeq) > 0 {
		r.lastSeq, r.lastTS, r.lastAt = oseq, ots, at
	}
	return oseq, ots, true
}

// videoOut is a player's video: which layer it receives (cur) and wants
// (target), and the rewriting onto its track.
type videoOut struct {
	p      *player
	track  *outTrack
	target atomic.Int32 // layer to switch to at its next key frame; set by the SFU
	cur    atomic.Int32 // layer forwarded now, -1 before the first; written under mu

	mu  sync.Mutex
	rw  rewriter   // guarded by mu
	hdr rtp.Header // guarded by mu: the outgoing header, reused
}

func newVideoOut(p *player, t *outTrack, target int) *videoOut {
	v := &videoOut{p: p, track: t}
	v.cur.Store(-1)
	v.target.Store(int32(target))
	v.hdr.Version = 2
	return v
}

// forwardResult says what forward did with a packet.
type forwardResult uint8

const (
	fwdSent     forwardResult = iota
	fwdSkip                   // not this player's layer (yet): not counted
	fwdUnbound                // DTLS not up, or the track was not negotiated
	fwdCodec                  // the player did not accept the payload type
	fwdStale                  // older than the layer switch
	fwdWriteErr               // the write failed
	fwdSwitched               // sent, and it switched layers
	fwdResultLen
)

// forward writes packet pkt (header h) of layer l to the player, switching
// to l first if l is its target and pkt starts a key frame.
func (v *videoOut) forward(l int32, h *rtpHeader, pkt []byte, key bool, at int64) forwardResult {
	res := fwdSent
	v.mu.Lock()
	if l != v.cur.Load() {
		if l != v.target.Load() || !key {
			v.mu.Unlock()
			return fwdSkip
		}
		v.rw.begin(h.seq, h.ts, at, videoClock)
		v.cur.Store(l)
		res = fwdSwitched
	}
	seq, ts, ok := v.rw.rewrite(h.seq, h.ts, at)
	if !ok {
		v.mu.Unlock()
		return fwdStale
	}
	b := v.track.bind.Load()
	switch {
	case b == nil:
		res = fwdUnbound
	case !b.pts[h.pt]:
		res = fwdCodec
	default:
		v.hdr.Marker = h.marker
		v.hdr.PayloadType = h.pt
		v.hdr.SequenceNumber = seq
		v.hdr.Timestamp = ts
		v.hdr.SSRC = b.ssrc
		if _, err := b.w.WriteRTP(&v.hdr, pkt[h.payOff:h.payEnd]); err != nil {
			res = fwdWriteErr
		}
	}
	v.mu.Unlock()
	return res
}

// audioOut is a player's audio track: packets pass through with the
// track's SSRC (sequence numbers and timestamps unchanged: one source).
type audioOut struct {
	track *outTrack
	mu    sync.Mutex
	hdr   rtp.Header // guarded by mu
}

func (a *audioOut) forward(h *rtpHeader, pkt []byte) forwardResult {
	b := a.track.bind.Load()
	switch {
	case b == nil:
		return fwdUnbound
	case !b.pts[h.pt]:
		return fwdCodec
	}
	a.mu.Lock()
	a.hdr.Version = 2
	a.hdr.Marker = h.marker
	a.hdr.PayloadType = h.pt
	a.hdr.SequenceNumber = h.seq
	a.hdr.Timestamp = h.ts
	a.hdr.SSRC = b.ssrc
	_, err := b.w.WriteRTP(&a.hdr, pkt[h.payOff:h.payEnd])
	a.mu.Unlock()
	if err != nil {
		return fwdWriteErr
	}
	return fwdSent
}
