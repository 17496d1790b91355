package sfu

import (
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"
)

// rtcpSeeds are real compound packets as pion marshals them: a browser's
// speaker sends an SR with reception reports about our slots, a listener
// an RR, and both append SDES.
func rtcpSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	blocks := []rtcp.ReceptionReport{
		{SSRC: 0x1111, FractionLost: 12, TotalLost: 3, LastSequenceNumber: 70000, Jitter: 44, LastSenderReport: 0xabcd1234, Delay: 0x8000},
		{SSRC: 0x2222, FractionLost: 0, LastSequenceNumber: 9, Jitter: 1, LastSenderReport: 0, Delay: 0},
	}
	var out [][]byte
	for _, pkts := range [][]rtcp.Packet{
		{&rtcp.SenderReport{SSRC: 0x9999, NTPTime: 0x1122334455667788, RTPTime: 5, PacketCount: 6, OctetCount: 7, Reports: blocks}},
		{&rtcp.ReceiverReport{SSRC: 0x9999, Reports: blocks}},
		{&rtcp.ReceiverReport{SSRC: 0x9999, Reports: blocks[:1]}, &rtcp.SourceDescription{Chunks: []rtcp.SourceDescriptionChunk{{
			Source: 0x9999, Items: []rtcp.SourceDescriptionItem{{Type: rtcp.SDESCNAME, Text: "cname"}}}}}},
		{&rtcp.SourceDescription{}, &rtcp.SenderReport{SSRC: 1, NTPTime: 0x0102030405060708}},
		{&rtcp.PictureLossIndication{SenderSSRC: 1, MediaSSRC: 2}},
	} {
		b, err := rtcp.Marshal(pkts)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// pionBlocks is the oracle: the reception reports pion's parser finds.
func pionBlocks(b []byte) ([]reportBlock, bool) {
	pkts, err := rtcp.Unmarshal(b)
	if err != nil {
		return nil, false
	}
	var out []reportBlock
	for _, p := range pkts {
		var rs []rtcp.ReceptionReport
		switch p := p.(type) {
		case *rtcp.SenderReport:
			rs = p.Reports
		case *rtcp.ReceiverReport:
			rs = p.Reports
		}
		for _, r := range rs {
			out = append(out, reportBlock{ssrc: r.SSRC, fractionLost: r.FractionLost, lsr: r.LastSenderReport, dlsr: r.Delay})
		}
	}
	return out, true
}

func collectBlocks(b []byte) []reportBlock {
	var got []reportBlock
	forReports(b, func(rb reportBlock) { got = append(got, rb) })
	return got
}

func TestRTCPParse(t *testing.T) {
	seeds := rtcpSeeds(t)
	for i, b := range seeds {
		want, _ := pionBlocks(b)
		got := collectBlocks(b)
		if len(got) != len(want) {
			t.Fatalf("seed %d: %d blocks, pion finds %d", i, len(got), len(want))
		}
		for j := range got {
			if got[j] != want[j] {
				t.Fatalf("seed %d block %d: %+v, pion %+v", i, j, got[j], want[j])
			}
		}
	}
	if ntp, ok := lastSenderReport(seeds[0]); !ok || ntp != 0x33445566 {
		t.Fatalf("LSR of the SR: %x %v", ntp, ok)
	}
	if ntp, ok := lastSenderReport(seeds[3]); !ok || ntp != 0x03040506 {
		t.Fatalf("LSR after an SDES: %x %v", ntp, ok)
	}
	if _, ok := lastSenderReport(seeds[1]); ok {
		t.Fatal("an RR has no LSR")
	}
	// Truncations and a lying length never read past the buffer.
	for _, b := range seeds {
		for n := 0; n < len(b); n++ {
			collectBlocks(b[:n])
			lastSenderReport(b[:n])
		}
		bad := append([]byte(nil), b...)
		bad[2], bad[3] = 0xff, 0xff
		if len(collectBlocks(bad)) != 0 {
			t.Fatal("blocks from a packet longer than its buffer")
		}
	}
}

// FuzzRTCPReports: the hand parser agrees with pion's on every compound
// pion accepts, and never panics on anything else.
func FuzzRTCPReports(f *testing.F) {
	for _, b := range rtcpSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := collectBlocks(b)
		lastSenderReport(b)
		want, ok := pionBlocks(b)
		if !ok {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%d blocks, pion %d", len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("block %d: %+v, pion %+v", i, got[i], want[i])
			}
		}
	})
}

// TestReportsOnlyForActiveStreams: a peer whose microphone and slots
// carry nothing gets no RTCP; a round after media flowed carries an SR
// per active slot and an RR on the microphone with its reception state;
// the next quiet round carries nothing again.
func TestReportsOnlyForActiveStreams(t *testing.T) {
	st0 := &slotTrack{id: "slot0"}
	st1 := &slotTrack{id: "slot1"}
	st0.bind.Store(&binding{ssrc: 0x5001, pt: 111})
	st1.bind.Store(&binding{ssrc: 0x5002, pt: 111})
	p := &peer{slots: []*slotTrack{st0, st1}, rtcpSSRC: 7}
	now := time.Unix(1_800_000_000, 0)
	if pkts := p.reports(now); len(pkts) != 0 {
		t.Fatalf("silent peer got %d RTCP packets", len(pkts))
	}
	// Slot 1 sends; the microphone delivers seq 10..19 with 12 missing.
	st1.sent.Store(5)
	st1.octets.Store(300)
	st1.lastTS.Store(9600)
	st1.lastAt.Store(now.Add(-20 * time.Millisecond).UnixNano())
	p.micSSRC.Store(0xabc)
	at := now.Add(-time.Second).UnixNano()
	for seq := uint16(10); seq < 20; seq++ {
		if seq == 12 {
			continue
		}
		p.observeMic(seq, uint32(seq)*opusFrame, at+int64(seq)*20e6)
	}
	p.lsr.Store(0x12345678)
	p.lsrAt.Store(now.Add(-500 * time.Millisecond).UnixNano())
	pkts := p.reports(now)
	if len(pkts) != 2 {
		t.Fatalf("got %d packets, want an SR for slot 1 and an RR", len(pkts))
	}
	sr, ok := pkts[0].(*rtcp.SenderReport)
	if !ok || sr.SSRC != 0x5002 || sr.PacketCount != 5 || sr.OctetCount != 300 || sr.RTPTime != 9600+960 {
		t.Fatalf("SR %+v", pkts[0])
	}
	rr, ok := pkts[1].(*rtcp.ReceiverReport)
	if !ok || rr.SSRC != 0x5001 || len(rr.Reports) != 1 {
		t.Fatalf("RR %+v", pkts[1])
	}
	r := rr.Reports[0]
	if r.SSRC != 0xabc || r.LastSequenceNumber != 19 || r.TotalLost != 1 || r.FractionLost != 256/10 ||
		r.LastSenderReport != 0x12345678 || r.Delay != 65536/2 {
		t.Fatalf("reception report %+v", r)
	}
	if _, err := rtcp.Marshal(pkts); err != nil {
		t.Fatal(err)
	}
	if pkts := p.reports(now.Add(time.Second)); len(pkts) != 0 {
		t.Fatalf("quiet round after media: %d packets", len(pkts))
	}
}

// TestVoiceRTCP: through the real edge, a speaking client gets receiver
// reports on its microphone that echo its own sender reports (so the
// browser can compute RTT and adapt Opus FEC to loss), and its slot's
// sender reports carry what was forwarded.
func TestVoiceRTCP(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.joinAll(2, tm{id: 1, room: "r"}, tm{id: 2, room: "r"})
	expectHearing(t, cs, map[*client][]byte{cs[0]: {2}, cs[1]: {1}})
	var mic *webrtc.RTPSender
	for _, tr := range cs[0].pc.GetTransceivers() {
		if s := tr.Sender(); s != nil && s.Track() == cs[0].mic {
			mic = s
		}
	}
	if mic == nil {
		t.Fatal("no microphone sender")
	}
	micSSRC := uint32(mic.GetParameters().Encodings[0].SSRC)
	got := make(chan rtcp.ReceptionReport, 1)
	cs[0].wg.Add(1) // ends when the client closes
	go func() {
		defer cs[0].wg.Done()
		for {
			pkts, _, err := mic.ReadRTCP()
			if err != nil {
				return
			}
			for _, p := range pkts {
				if rr, ok := p.(*rtcp.ReceiverReport); ok {
					for _, r := range rr.Reports {
						if r.SSRC == micSSRC && r.LastSenderReport != 0 {
							select {
							case got <- r:
							default:
							}
						}
					}
				}
			}
		}
	}()
	select {
	case r := <-got:
		if r.FractionLost != 0 || r.LastSequenceNumber == 0 {
			t.Fatalf("reception report on the microphone %+v", r)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no receiver report echoing the client's sender report")
	}
	// RTT on the slots comes from the client's reports on our SRs.
	testwait.Within(t, 15*time.Second, "RTT from the slot's reports", func() bool {
		q, ok := e.sfu.PeerQuality(cs[1].peerID)
		return ok && q.RTTMs > 0
	})
}
