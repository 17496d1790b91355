package sfu

// RTP fixed header, RFC 3550 section 5.1:
//
//	 0                   1                   2                   3
//	|V=2|P|X|  CC   |M|     PT      |       sequence number         |
//	|                           timestamp                           |
//	|           synchronization source (SSRC) identifier            |
//	|            contributing source (CSRC) identifiers (CC x 4)    |
//	| extension profile (X=1)       |  extension length (words)     |
//	|                        extension data ...                     |
const (
	rtpHeaderLen = 12
	// one-byte header extensions, RFC 8285 section 4.2: profile 0xBEDE,
	// elements ID(4 bits) | L(4 bits, length-1) | data.
	extProfileOneByte = 0xBEDE
	// two-byte header extensions, RFC 8285 section 4.3: profile 0x100X,
	// elements ID(8) | L(8) | data.
	extProfileTwoByteMask = 0xFFF0
	extProfileTwoByte     = 0x1000
	// noAudioLevel is returned when a packet has no RFC 6464 element.
	noAudioLevel = -1
)

// rtpInfo is what the forwarding path needs from one RTP packet. It is
// filled by parseRTP into a caller-owned value: nothing allocates.
type rtpInfo struct {
	seq        uint16
	ts         uint32
	ssrc       uint32
	pt         uint8
	marker     bool
	payOff     int // first payload byte
	payEnd     int // one past the last payload byte (padding removed)
	audioLevel int // RFC 6464 level 0..127 (-dBov), or noAudioLevel
	voice      bool
}

// parseRTP parses b's header. levelID is the negotiated id of the RFC 6464
// ssrc-audio-level extension (0 = not negotiated). It reports false for a
// packet that is not well-formed RTP version 2.
func parseRTP(b []byte, levelID uint8, out *rtpInfo) bool {
	if len(b) < rtpHeaderLen || b[0]>>6 != 2 {
		return false
	}
	out.marker = b[1]&0x80 != 0
	out.pt = b[1] & 0x7f
	out.seq = uint16(b[2])<<8 | uint16(b[3])
	out.ts = uint32(b[4])<<24 | uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7])
	out.ssrc = uint32(b[8])<<24 | uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11])
	out.audioLevel = noAudioLevel
	out.voice = false
	off := rtpHeaderLen + 4*int(b[0]&0x0f)
	if off > len(b) {
		return false
	}
	if b[0]&0x10 != 0 {
		if off+4 > len(b) {
			return false
		}
		profile := uint16(b[off])<<8 | uint16(b[off+1])
		extLen := 4 * (int(b[off+2])<<8 | int(b[off+3]))
		ext := off + 4
		off = ext + extLen
		if off > len(b) {
			return false
		}
		if levelID != 0 {
			parseAudioLevel(b[ext:off], profile, levelID, out)
		}
	}
	end := len(b)
	if b[0]&0x20 != 0 { // padding: last byte counts padding bytes
		pad := int(b[end-1])
		if pad == 0 || end-pad < off {
			return false
		}
		end -= pad
	}
	out.payOff, out.payEnd = off, end
	return true
}

// parseAudioLevel finds the RFC 6464 element (1 byte: V | level(7)).
func parseAudioLevel(ext []byte, profile uint16, id uint8, out *rtpInfo) {
	switch {
	case profile == extProfileOneByte:
		for i := 0; i < len(ext); {
			eid := ext[i] >> 4
			if eid == 0 { // padding
				i++
				continue
			}
			if eid == 15 {
				return
			}
			l := int(ext[i]&0x0f) + 1
			if i+1+l > len(ext) {
				return
			}
			if eid == id {
				out.voice = ext[i+1]&0x80 != 0
				out.audioLevel = int(ext[i+1] & 0x7f)
				return
			}
			i += 1 + l
		}
	case profile&extProfileTwoByteMask == extProfileTwoByte:
		for i := 0; i < len(ext); {
			eid := ext[i]
			if eid == 0 {
				i++
				continue
			}
			if i+2 > len(ext) {
				return
			}
			l := int(ext[i+1])
			if i+2+l > len(ext) {
				return
			}
			if eid == id && l >= 1 {
				out.voice = ext[i+2]&0x80 != 0
				out.audioLevel = int(ext[i+2] & 0x7f)
				return
			}
			i += 2 + l
		}
	}
}

// RTCP, RFC 3550 section 6.4. Every packet of a compound starts
//
//	|V=2|P|   RC    |      PT       |      length (words - 1)       |
//
// a sender report (PT 200) continues SSRC(4) NTP(8) RTP ts(4) packets(4)
// octets(4) and RC report blocks; a receiver report (PT 201) continues
// SSRC(4) and RC report blocks of 24 bytes each:
//
//	| SSRC of the source reported on                                |
//	| fraction lost |       cumulative packets lost (24)            |
//	| extended highest sequence number received                     |
//	| interarrival jitter                                           |
//	| last SR (LSR: middle 32 bits of its NTP time)                 |
//	| delay since last SR (DLSR, 1/65536 s)                         |
const (
	rtcpSR          = 200
	rtcpRR          = 201
	rtcpHeaderLen   = 4
	rtcpSRInfoLen   = 24 // sender SSRC + sender info
	rtcpRRInfoLen   = 4  // sender SSRC
	rtcpReportBlock = 24
)

// reportBlock is the part of an RTCP reception report voice uses.
type reportBlock struct {
	ssrc         uint32
	fractionLost uint8
	lsr, dlsr    uint32
}

// forReports calls fn for every reception report block in the compound
// RTCP packet b (in sender and receiver reports). It stops at the first
// malformed packet; it never reads past b and allocates nothing.
func forReports(b []byte, fn func(reportBlock)) {
	for off := 0; off+rtcpHeaderLen <= len(b); {
		if b[off]>>6 != 2 {
			return
		}
		end := off + 4*(int(b[off+2])<<8|int(b[off+3])+1)
		if end > len(b) {
			return
		}
		rc := int(b[off] & 0x1f)
		blocks := -1
		switch b[off+1] {
		case rtcpSR:
			blocks = off + rtcpHeaderLen + rtcpSRInfoLen
		case rtcpRR:
			blocks = off + rtcpHeaderLen + rtcpRRInfoLen
		}
		if blocks >= 0 && blocks+rc*rtcpReportBlock <= end {
			for i := 0; i < rc; i++ {
				r := b[blocks+i*rtcpReportBlock:]
				fn(reportBlock{
					ssrc:         be32(r),
					fractionLost: r[4],
					lsr:          be32(r[16:]),
					dlsr:         be32(r[20:]),
				})
			}
		}
		off = end
	}
}

// lastSenderReport returns the middle 32 bits of the NTP time of the last
// sender report in the compound RTCP packet b (what our receiver reports
// echo as LSR).
func lastSenderReport(b []byte) (ntpMid uint32, ok bool) {
	for off := 0; off+rtcpHeaderLen <= len(b); {
		if b[off]>>6 != 2 {
			return ntpMid, ok
		}
		end := off + 4*(int(b[off+2])<<8|int(b[off+3])+1)
		if end > len(b) {
			return ntpMid, ok
		}
		if b[off+1] == rtcpSR && off+rtcpHeaderLen+rtcpSRInfoLen <= end {
			ntpMid, ok = be32(b[off+10:]), true
		}
		off = end
	}
	return ntpMid, ok
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
