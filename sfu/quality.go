package sfu

import (
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"
)

// Voice RTCP.
//
// The SFU runs no pion interceptors: their per-PeerConnection tickers
// (sender and receiver reports every second, whether or not media flows)
// and the stats interceptor's per-stream goroutine (a hand-off for every
// packet received) were half the cost of a connected voice peer. Instead:
//
//   - the speaker's read loop keeps its microphone stream's reception
//     statistics (RFC 3550 appendix A.1 and A.8: extended highest
//     sequence number, packets received, interarrival jitter), allocation
//     free, as part of the per-packet work it already does;
//   - Run, every ReportInterval, sends each peer one compound RTCP packet
//     with a sender report per slot that sent media since the last one and
//     a receiver report on its microphone if it sent media since the last
//     one. A silent peer gets nothing and costs no timer of its own;
//   - one goroutine per RTCP stream the client can send on (its
//     microphone's sender reports, each slot's receiver reports) blocks in
//     a raw read and parses the few fields voice needs by hand: LSR for our
//     receiver reports' DLSR, and RTT and fraction lost from the reports on
//     the slots (RFC 3550 section 6.4). They wake only when the client
//     sends RTCP.

// ntpEpochOffset is the seconds from 1900 (NTP) to 1970 (Unix).
const ntpEpochOffset = 2208988800

// ntpMid32 is the middle 32 bits of the NTP timestamp of t (RFC 3550
// section 6.4.1: the unit of LSR and DLSR, 1/65536 s).
func ntpMid32(t time.Time) uint32 {
	sec := uint64(t.Unix()) + ntpEpochOffset
	frac := uint64(t.Nanosecond()) << 32 / 1e9
	return uint32(sec<<16) | uint32(frac>>16)
}

// ntp64 is the 64-bit NTP timestamp of t.
func ntp64(t time.Time) uint64 {
	sec := uint64(t.Unix()) + ntpEpochOffset
	frac := uint64(t.Nanosecond()) << 32 / 1e9
	return sec<<32 | frac
}

// inbound is the microphone stream's reception state (RFC 3550 A.1, A.8).
// The read loop owns the unexported fields and publishes the atomics for
// Run.
type inbound struct {
	started bool
	maxSeq  uint16
	cycles  uint32 // sequence number wraps, << 16
	base    uint32 // extended sequence number of the first packet
	t0      int64  // arrival of the first packet, unix ns
	transit uint32 // last relative transit time, RTP units (mod 2^32)
	jitter  uint32 // RFC 3550 A.8 estimate x 16, RTP units
}

// micStats is what the read loop publishes after each packet.
type micStats struct {
	received atomic.Uint64 // packets received
	expected atomic.Uint64 // extended highest seq - base + 1
	extMax   atomic.Uint32 // extended highest sequence number
	jitter   atomic.Uint32 // interarrival jitter, RTP timestamp units
}

// observeMic updates the reception state with one packet (seq, ts,
// arrival unix ns). Owned by the read loop.
func (p *peer) observeMic(seq uint16, ts uint32, at int64) {
	in := &p.in
	if !in.started {
		in.started = true
		in.maxSeq = seq
		in.base = uint32(seq)
		in.t0 = at
	} else if d := seq - in.maxSeq; d != 0 && d < 0x8000 {
		if seq < in.maxSeq {
			in.cycles += 1 << 16 // wrapped
		}
		in.maxSeq = seq
	}
	// Jitter: D = (Rj - Ri) - (Sj - Si) in RTP units, modulo 2^32;
	// J += (|D| - J)/16, kept x 16.
	arrival := uint32((at - in.t0) * opusClock / 1e9)
	transit := arrival - ts
	if p.mic.received.Load() > 0 {
		d := int64(int32(transit - in.transit))
		if d < 0 {
			d = -d
		}
		d = min(d, 1<<20) // a timestamp jump (DTX, a new source) is not jitter
		in.jitter += uint32(d) - ((in.jitter + 8) >> 4)
	}
	in.transit = transit
	ext := in.cycles + uint32(in.maxSeq)
	p.mic.received.Add(1)
	p.mic.extMax.Store(ext)
	p.mic.expected.Store(uint64(ext-in.base) + 1)
	p.mic.jitter.Store(in.jitter >> 4)
}

// reportState is what Run remembers per peer between reports, and the
// RTCP packets it reuses. Owned by Run.
type reportState struct {
	sent     []uint32 // per slot: packets at the last sender report
	expected uint64   // mic: at the last receiver report
	received uint64
	srs      []rtcp.SenderReport
	rr       rtcp.ReceiverReport
	block    [1]rtcp.ReceptionReport
	pkts     []rtcp.Packet
}

// sendReports writes, to each peer, one compound RTCP packet: a sender
// report for each slot that sent since the last round and a receiver
// report on its microphone if it sent since the last round. Silent peers
// get nothing.
func (s *SFU) sendReports() {
	s.mu.Lock()
	s.scratch = s.scratch[:0]
	for _, p := range s.peers {
		s.scratch = append(s.scratch, p)
	}
	peers := s.scratch
	s.mu.Unlock()
	now := s.now()
	for _, p := range peers {
		if pkts := p.reports(now); len(pkts) > 0 {
			_ = p.pc.WriteRTCP(pkts)
		}
	}
	clear(s.scratch) // no peer pinned by the scratch slice
}

// reports builds p's RTCP for this round into p's own reused packets.
// Called by Run only.
func (p *peer) reports(now time.Time) []rtcp.Packet {
	r := &p.rep
	if r.sent == nil {
		r.sent = make([]uint32, len(p.slots))
		r.srs = make([]rtcp.SenderReport, len(p.slots))
		r.pkts = make([]rtcp.Packet, 0, len(p.slots)+1)
	}
	pkts := r.pkts[:0]
	for i, st := range p.slots {
		b := st.bind.Load()
		n := st.sent.Load()
		if b == nil || n == r.sent[i] {
			continue
		}
		r.sent[i] = n
		elapsed := max(now.UnixNano()-st.lastAt.Load(), 0)
		sr := &r.srs[i]
		*sr = rtcp.SenderReport{
			SSRC:        b.ssrc,
			NTPTime:     ntp64(now),
			RTPTime:     st.lastTS.Load() + uint32(elapsed*opusClock/1e9),
			PacketCount: n,
			OctetCount:  st.octets.Load(),
		}
		pkts = append(pkts, sr)
	}
	if ssrc := p.micSSRC.Load(); ssrc != 0 {
		exp, rec := p.mic.expected.Load(), p.mic.received.Load()
		if rec != r.received {
			de, dr := exp-r.expected, rec-r.received
			var frac uint8
			if de > dr && de > 0 {
				frac = uint8((de - dr) << 8 / de)
			}
			lost := int64(exp) - int64(rec)
			lost = max(min(lost, 0x7fffff), -0x800000) // 24-bit signed
			var lsr, dlsr uint32
			if at := p.lsrAt.Load(); at != 0 {
				lsr = p.lsr.Load()
				dlsr = uint32(max(now.UnixNano()-at, 0) * 65536 / 1e9)
			}
			r.rr = rtcp.ReceiverReport{SSRC: p.reporterSSRC(), Reports: r.block[:1]}
			r.block[0] = rtcp.ReceptionReport{
				SSRC: ssrc, FractionLost: frac, TotalLost: uint32(lost) & 0xffffff,
				LastSequenceNumber: p.mic.extMax.Load(), Jitter: p.mic.jitter.Load(),
				LastSenderReport: lsr, Delay: dlsr,
			}
			r.expected, r.received = exp, rec
			pkts = append(pkts, &r.rr)
		}
	}
	r.pkts = pkts
	return pkts
}

// reporterSSRC is the sender SSRC of our receiver reports to p: its first
// slot's, or (no slot) a random one fixed at join.
func (p *peer) reporterSSRC() uint32 {
	if len(p.slots) > 0 {
		if b := p.slots[0].bind.Load(); b != nil {
			return b.ssrc
		}
	}
	return p.rtcpSSRC
}

// rtcpLoop reads the RTCP a listener sends about one slot (raw, no
// interceptor) and takes RTT and the listener's loss from the reception
// reports about the slot's SSRC, in receiver or sender reports: RTT = now
// - LSR - DLSR (RFC 3550 section 6.4.1).
func (s *SFU) rtcpLoop(p *peer, st *slotTrack, snd *webrtc.RTPSender) {
	buf := make([]byte, maxPacket)
	for {
		n, _, err := snd.Read(buf)
		if err != nil {
			return
		}
		b := st.bind.Load()
		if b == nil {
			continue
		}
		forReports(buf[:n], func(rb reportBlock) {
			if rb.ssrc != b.ssrc {
				return
			}
			p.slotLoss.Store(uint32(rb.fractionLost))
			if rb.lsr == 0 {
				return
			}
			d := ntpMid32(s.now()) - rb.lsr - rb.dlsr
			if int32(d) >= 0 {
				p.rttMicros.Store(int64(d) * 1e6 / 65536)
			}
		})
	}
}

// micRTCPLoop reads the RTCP the speaker sends about its microphone and
// keeps the last sender report's NTP time (LSR) and arrival, for the DLSR
// of our receiver reports.
func (s *SFU) micRTCPLoop(p *peer, rc *webrtc.RTPReceiver) {
	buf := make([]byte, maxPacket)
	for {
		n, _, err := rc.Read(buf)
		if err != nil {
			return
		}
		if ntp, ok := lastSenderReport(buf[:n]); ok {
			p.lsr.Store(ntp)
			p.lsrAt.Store(s.now().UnixNano())
		}
	}
}

// qualityCounters are the cumulative inbound counters at the previous
// sample, so loss is measured per interval. Owned by Run.
type qualityCounters struct {
	expected, received uint64
}

// sampleQuality reads every peer's RTCP-derived statistics (receiver
// reports on its slots give RTT and the listener's loss; its microphone
// stream gives inbound loss and jitter), exports them and flags peers over
// budget.
func (s *SFU) sampleQuality() {
	s.mu.Lock()
	s.scratch = s.scratch[:0]
	for _, p := range s.peers {
		s.scratch = append(s.scratch, p)
	}
	peers := s.scratch
	s.mu.Unlock()
	if cap(s.samples) < len(peers) {
		s.samples = make([]Quality, len(peers))
	}
	samples := s.samples[:len(peers)]
	for i, p := range peers {
		samples[i] = s.measure(p)
	}
	s.mu.Lock()
	for i, p := range peers {
		if s.peers[p.id] != p {
			continue
		}
		p.quality = samples[i]
		s.flagged[p] = s.overBudget(samples[i])
	}
	s.refreshFlaggedLocked()
	s.mu.Unlock()
	clear(s.scratch)
}

func (s *SFU) measure(p *peer) Quality {
	var q Quality
	haveRTT := false
	if us := p.rttMicros.Load(); us > 0 {
		haveRTT = true
		q.RTTMs = float64(us) / 1000
	}
	q.Loss = float64(p.slotLoss.Load()) / 256
	if rec := p.mic.received.Load(); rec > 0 {
		exp := p.mic.expected.Load()
		q.JitterMs = float64(p.mic.jitter.Load()) * 1000 / opusClock
		de, dr := int64(exp-p.qc.expected), int64(rec-p.qc.received)
		if de > dr && de > 0 {
			q.Loss = max(q.Loss, float64(de-dr)/float64(de))
		}
		p.qc = qualityCounters{exp, rec}
		s.m.jitter.Observe(q.JitterMs / 1000)
	}
	if haveRTT {
		s.m.rtt.Observe(q.RTTMs / 1000)
	}
	s.m.loss.Observe(q.Loss)
	f := s.overBudget(q)
	q.Flagged = f[0] || f[1]
	return q
}

// overBudget reports {latency, loss} against the regional budgets.
func (s *SFU) overBudget(q Quality) [2]bool {
	return [2]bool{q.RTTMs > float64(s.cfg.LatencyBudgetMs), q.Loss > s.cfg.LossBudget}
}

// refreshFlaggedLocked republishes egbe_sfu_peers_flagged. Guarded by mu.
func (s *SFU) refreshFlaggedLocked() {
	var lat, loss int
	for _, f := range s.flagged {
		if f[0] {
			lat++
		}
		if f[1] {
			loss++
		}
	}
	s.m.flagged.WithLabelValues("latency").Set(float64(lat))
	s.m.flagged.WithLabelValues("loss").Set(float64(loss))
}

// PeerQuality returns the last quality sample of a voice peer.
func (s *SFU) PeerQuality(voicePeerID string) (Quality, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.peers[voicePeerID]
	if p == nil {
		return Quality{}, false
	}
	return p.quality, true
}
