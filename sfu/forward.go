package sfu

// maxPacket is the largest RTP packet the SFU forwards (one Ethernet MTU;
// an Opus frame is at most 1275 bytes).
const maxPacket = 1500

// opusClock is Opus's RTP clock (RFC 7587: always 48 kHz).
const opusClock = 48000

// opusFrame is one 20 ms frame in RTP timestamp units.
const opusFrame = opusClock / 50

// packet is one received RTP packet. Each speaker's read loop owns one
// and reuses it: the fan-out is synchronous, so every listener's copy has
// been encrypted and handed to the ICE port before the next read.
type packet struct {
	info rtpInfo
	at   int64 // arrival, unix nanoseconds (SFU clock)
	n    int
	b    [maxPacket]byte
}

func (p *packet) payload() []byte { return p.b[p.info.payOff:p.info.payEnd] }

// rewriter maps the packets of whichever speaker currently holds a slot
// onto the slot's one outgoing stream: SSRC is the slot's, and sequence
// numbers and timestamps continue across speaker switches so the
// listener's decoder sees one stream. Guarded by its slot's mutex.
type rewriter struct {
	src     *peer  // speaker of the last forwarded packet
	started bool   // a packet was forwarded
	seqOff  uint16 // out = in + seqOff (mod 2^16)
	tsOff   uint32 // out = in + tsOff (mod 2^32)
	first   uint16 // out seq of the current speaker's first packet
	lastSeq uint16 // highest out seq sent
	lastTS  uint32 // out ts of lastSeq
	lastAt  int64  // arrival (unix ns) of lastSeq's packet
}

// rewrite returns the outgoing sequence number and timestamp of a packet
// from src, whether it starts a new speaker on this slot (marker), and
// ok=false for a packet that must not be sent (older than what was sent).
// It never allocates.
func (r *rewriter) rewrite(src *peer, seq uint16, ts uint32, at int64) (oseq uint16, ots uint32, switched, ok bool) {
	if !r.started || r.src != src {
		switched = true
		if !r.started {
			r.seqOff, r.tsOff = 0, 0
		} else {
			// Continue the stream: next sequence number, and a timestamp
			// advanced by the wall time since the last packet, in whole
			// 20 ms frames (at least one).
			r.seqOff = r.lastSeq + 1 - seq
			step := uint32(opusFrame)
			if d := at - r.lastAt; d > 0 {
				frames := (d*opusClock/1e9 + opusFrame/2) / opusFrame
				if frames > 1 {
					if frames > 50*60 { // bound: one minute
						frames = 50 * 60
					}
					step = uint32(frames) * opusFrame
				}
			}
			r.tsOff = r.lastTS + step - ts
		}
		r.src, r.started = src, true
		r.first = seq + r.seqOff
		r.lastSeq = r.first - 1
	}
	oseq = seq + r.seqOff
	if int16(oseq-r.lastSeq) <= 0 {
		return 0, 0, false, false // duplicate, reordered or before the switch
	}
	ots = ts + r.tsOff
	r.lastSeq, r.lastTS, r.lastAt = oseq, ots, at
	return oseq, ots, switched, true
}
