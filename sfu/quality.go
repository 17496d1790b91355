package sfu

import (
	"time"

	"github.com/pion/interceptor/pkg/stats"
	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"
)

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

// sendSenderReports writes an RTCP sender report for every slot that has
// sent media (RFC 3550 section 6.4.1). Slot senders are built outside the
// PeerConnection's interceptor chain (so the per-packet send path skips
// it); the SFU reports for them itself, once per second, which gives the
// listener the LSR/DLSR its receiver reports echo for RTT.
func (s *SFU) sendSenderReports() {
	s.mu.Lock()
	peers := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		peers = append(peers, p)
	}
	s.mu.Unlock()
	now := s.now()
	for _, p := range peers {
		var pkts []rtcp.Packet
		for _, st := range p.slots {
			b := st.bind.Load()
			n := st.sent.Load()
			if b == nil || n == 0 {
				continue
			}
			elapsed := max(now.UnixNano()-st.lastAt.Load(), 0)
			pkts = append(pkts, &rtcp.SenderReport{
				SSRC:        b.ssrc,
				NTPTime:     ntp64(now),
				RTPTime:     st.lastTS.Load() + uint32(elapsed*opusClock/1e9),
				PacketCount: n,
				OctetCount:  st.octets.Load(),
			})
		}
		if len(pkts) > 0 {
			_ = p.pc.WriteRTCP(pkts)
		}
	}
}

// rtcpLoop reads RTCP for one slot sender (feeding pion's interceptors)
// and takes RTT and the listener's loss from receiver reports about the
// slot's SSRC: RTT = now - LSR - DLSR (RFC 3550 section 6.4.1).
func (s *SFU) rtcpLoop(p *peer, st *slotTrack, snd *webrtc.RTPSender) {
	for {
		pkts, _, err := snd.ReadRTCP()
		if err != nil {
			return
		}
		b := st.bind.Load()
		if b == nil {
			continue
		}
		for _, pkt := range pkts {
			rr, ok := pkt.(*rtcp.ReceiverReport)
			if !ok {
				continue
			}
			for _, r := range rr.Reports {
				if r.SSRC != b.ssrc {
					continue
				}
				p.slotLoss.Store(uint32(r.FractionLost))
				if r.LastSenderReport == 0 {
					continue
				}
				d := ntpMid32(s.now()) - r.LastSenderReport - r.Delay
				if int32(d) >= 0 {
					p.rttMicros.Store(int64(d) * 1e6 / 65536)
				}
			}
		}
	}
}

// qualityCounters are the cumulative inbound counters at the previous
// sample, so loss is measured per interval. Owned by Run.
type qualityCounters struct {
	recv uint64
	lost int64
}

// sampleQuality reads every peer's RTCP-derived statistics (pion's stats
// interceptor: receiver reports on its slots give RTT and the listener's
// loss; its microphone stream gives inbound loss and jitter), exports them
// and flags peers over budget.
func (s *SFU) sampleQuality() {
	s.mu.Lock()
	peers := make([]*peer, 0, len(s.peers))
	for _, p := range s.peers {
		peers = append(peers, p)
	}
	s.mu.Unlock()
	samples := make([]Quality, len(peers))
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
}

func (s *SFU) measure(p *peer) Quality {
	var q Quality
	haveRTT := false
	if us := p.rttMicros.Load(); us > 0 {
		haveRTT = true
		q.RTTMs = float64(us) / 1000
	}
	q.Loss = float64(p.slotLoss.Load()) / 256
	if in, ok := p.micStats(); ok {
		q.JitterMs = in.Jitter * 1000
		dr := int64(in.PacketsReceived - p.qc.recv)
		dl := in.PacketsLost - p.qc.lost
		if dr+dl > 0 && dl > 0 {
			q.Loss = max(q.Loss, float64(dl)/float64(dr+dl))
		}
		p.qc = qualityCounters{in.PacketsReceived, in.PacketsLost}
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

// micStats returns the microphone stream's inbound statistics, once it
// has sent something.
func (p *peer) micStats() (stats.InboundRTPStreamStats, bool) {
	ssrc := p.micSSRC.Load()
	if p.stats == nil || ssrc == 0 {
		return stats.InboundRTPStreamStats{}, false
	}
	st := p.stats.Get(ssrc)
	if st == nil || st.InboundRTPStreamStats.PacketsReceived == 0 {
		return stats.InboundRTPStreamStats{}, false
	}
	return st.InboundRTPStreamStats, true
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
