package pxsfu

import "encoding/binary"

// rtpHeader is the part of an RTP header (RFC 3550 section 5.1) the
// forwarder reads. parse fills it without allocating.
type rtpHeader struct {
	marker bool
	pt     uint8
	seq    uint16
	ts     uint32
	ssrc   uint32
	payOff int // payload start (after CSRCs and header extension)
	payEnd int // payload end (before padding)
}

// parse reads b's header; false for a packet too short or malformed
// (version not 2, lengths past the end).
func (h *rtpHeader) parse(b []byte) bool {
	if len(b) < 12 || b[0]>>6 != 2 {
		return false
	}
	h.marker = b[1]&0x80 != 0
	h.pt = b[1] & 0x7f
	h.seq = binary.BigEndian.Uint16(b[2:4])
	h.ts = binary.BigEndian.Uint32(b[4:8])
	h.ssrc = binary.BigEndian.Uint32(b[8:12])
	off := 12 + 4*int(b[0]&0x0f)
	if b[0]&0x10 != 0 { // header extension: profile(2) length(2, in words)
		if len(b) < off+4 {
			return false
		}
		off += 4 + 4*int(binary.BigEndian.Uint16(b[off+2:off+4]))
	}
	end := len(b)
	if b[0]&0x20 != 0 { // padding: the last byte counts it
		end -= int(b[len(b)-1])
	}
	if off > end {
		return false
	}
	h.payOff, h.payEnd = off, end
	return true
}

// codecKind selects the key-frame test.
type codecKind uint8

const (
	codecOther codecKind = iota
	codecH264
	codecVP8
	codecVP9
	codecAV1
)

// isKeyframeStart reports whether payload starts a key frame: the only
// place a player may switch layers (its decoder needs one to start).
func isKeyframeStart(c codecKind, p []byte) bool {
	if len(p) == 0 {
		return false
	}
	switch c {
	case codecH264:
		return h264KeyframeStart(p)
	case codecVP8:
		return vp8KeyframeStart(p)
	case codecVP9:
		// VP9 payload descriptor (RFC 9628): I P L F B E V Z. A frame's
		// first packet (B) that is not inter-predicted (P).
		return p[0]&0x08 != 0 && p[0]&0x40 == 0
	case codecAV1:
		// AV1 aggregation header (AV1 RTP spec 4.4): Z Y W W N; N marks
		// the first packet of a coded video sequence.
		return p[0]&0x08 != 0
	}
	return false
}

// H.264 NAL unit types (ITU-T H.264 Table 7-1) and RTP packetization
// types (RFC 6184 section 5.2).
const (
	nalIDR  = 5
	nalSPS  = 7
	nalSTAP = 24
	nalFUA  = 28
	nalFUB  = 29
)

// h264KeyframeStart: an SPS or the start of an IDR slice, alone, in a
// STAP-A, or as the first fragment of an FU-A/FU-B.
func h264KeyframeStart(p []byte) bool {
	switch t := p[0] & 0x1f; t {
	case nalIDR, nalSPS:
		return true
	case nalSTAP:
		for i := 1; i+2 < len(p); {
			n := int(p[i])<<8 | int(p[i+1])
			if i+2 >= len(p) || n == 0 {
				return false
			}
			if nt := p[i+2] & 0x1f; nt == nalIDR || nt == nalSPS {
				return true
			}
			i += 2 + n
		}
	case nalFUA, nalFUB:
		if len(p) < 2 {
			return false
		}
		nt := p[1] & 0x1f
		return p[1]&0x80 != 0 && (nt == nalIDR || nt == nalSPS)
	}
	return false
}

// vp8KeyframeStart: RFC 7741 section 4.2, the first packet of partition 0
// (S=1, PID=0) whose payload header has P=0.
func vp8KeyframeStart(p []byte) bool {
	if p[0]&0x10 == 0 || p[0]&0x07 != 0 {
		return false
	}
	i := 1
	if p[0]&0x80 != 0 { // X: extension byte
		if len(p) < 2 {
			return false
		}
		x := p[1]
		i = 2
		if x&0x80 != 0 { // I: picture id, 7 or 15 bits
			if len(p) <= i {
				return false
			}
			if p[i]&0x80 != 0 {
				i++
			}
			i++
		}
		if x&0x40 != 0 { // L: TL0PICIDX
			i++
		}
		if x&0x30 != 0 { // T or K
			i++
		}
	}
	return i < len(p) && p[i]&0x01 == 0
}

// codecOf maps a MIME type to its key-frame test.
func codecOf(mime string) codecKind {
	switch {
	case equalFold(mime, "video/H264"):
		return codecH264
	case equalFold(mime, "video/VP8"):
		return codecVP8
	case equalFold(mime, "video/VP9"):
		return codecVP9
	case equalFold(mime, "video/AV1"):
		return codecAV1
	}
	return codecOther
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
