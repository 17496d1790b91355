package sfu

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oshun/egbe-edge/auth"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportFwd reports forwarded packets per wall second and per CPU second.
func reportFwd(b *testing.B, fwd int64, wall, cpu time.Duration) {
	b.ReportMetric(float64(fwd)/wall.Seconds(), "fwd/s")
	if cpu > 0 {
		b.ReportMetric(float64(fwd)/cpu.Seconds(), "fwd/cpu-s")
	}
}

// BenchmarkForward is the SFU's own per-packet path: parse, audio level,
// and the fan-out to L listener slots, each rewriting SSRC/seq/ts, into a
// discarding TrackLocalWriter. One op is one incoming packet (L forwards).
func BenchmarkForward(b *testing.B) {
	for _, n := range []int{1, 10, 100, 500} {
		b.Run(fmt.Sprintf("listeners=%d", n), func(b *testing.B) {
			s := bareSFU(b, nil)
			sp := &peer{room: "r"}
			sp.speaking.Store(true)
			sp.loud.Store(127 - 30)
			ls := make([]*peer, n)
			for i := range ls {
				ls[i] = bareListener(s, &sinkWriter{})
			}
			wire(sp, ls)
			raw := opusPacket(1)
			pk := new(packet)
			b.ReportAllocs()
			b.ResetTimer()
			c0, t0 := cpuTime(), time.Now()
			for i := 0; i < b.N; i++ {
				seq := uint16(i + 2)
				raw[2], raw[3] = byte(seq>>8), byte(seq)
				s.ingest(sp, pk, raw)
			}
			wall, cpu := time.Since(t0), cpuTime()-c0
			b.StopTimer()
			reportFwd(b, int64(b.N)*int64(n), wall, cpu)
		})
	}
}

// loopbackAPI is a pion API with default codecs and interceptors, allowed
// to use loopback (the only change from default settings).
func loopbackAPI(b *testing.B) *webrtc.API {
	me := &webrtc.MediaEngine{}
	if err := me.RegisterDefaultCodecs(); err != nil {
		b.Fatal(err)
	}
	ir := &interceptor.Registry{}
	if err := webrtc.RegisterDefaultInterceptors(me, ir); err != nil {
		b.Fatal(err)
	}
	var se webrtc.SettingEngine
	se.SetIncludeLoopbackCandidate(true)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetInterfaceFilter(func(name string) bool { return name == "lo" })
	return webrtc.NewAPI(webrtc.WithMediaEngine(me), webrtc.WithInterceptorRegistry(ir), webrtc.WithSettingEngine(se))
}

// countTracks reads every remote track of pc and counts packets.
func countTracks(pc *webrtc.PeerConnection, total, mine *atomic.Int64) {
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		buf := make([]byte, 1500)
		for {
			if _, _, err := tr.Read(buf); err != nil {
				return
			}
			total.Add(1)
			mine.Add(1)
		}
	})
}

var pionListeners = []int{1, 10, 50, 100}

// warm sends until the receiver process has counted at least want.
func warm(b testing.TB, r *receivers, want int64, send func()) {
	deadline := time.Now().Add(15 * time.Second)
	for r.count(b) < want {
		if time.Now().After(deadline) {
			b.Fatalf("receivers got %d of %d warm-up packets", r.count(b), want)
		}
		for range 5 {
			send()
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkBarePion is the baseline: a bare pion forwarder with default
// settings (default codecs and interceptors), one TrackLocalStaticRTP per
// speaker per listener, one PeerConnection per listener. One op is one
// incoming packet written to L tracks. Receivers run in a child process;
// fwd/cpu-s counts this process's CPU only, as in BenchmarkForwardPion.
func BenchmarkBarePion(b *testing.B) {
	for _, n := range pionListeners {
		b.Run(fmt.Sprintf("listeners=%d", n), func(b *testing.B) {
			api := loopbackAPI(b)
			tracks := make([]*webrtc.TrackLocalStaticRTP, n)
			pcs := make([]*webrtc.PeerConnection, n)
			r := startReceivers(b, n, func(i int, offer string) string {
				fw, err := api.NewPeerConnection(webrtc.Configuration{})
				if err != nil {
					b.Fatal(err)
				}
				pcs[i] = fw
				if err := fw.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: offer}); err != nil {
					b.Fatal(err)
				}
				tracks[i], err = webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "audio", "speaker")
				if err != nil {
					b.Fatal(err)
				}
				snd, err := fw.AddTrack(tracks[i])
				if err != nil {
					b.Fatal(err)
				}
				go func() { // RTCP in, as any pion forwarder must
					buf := make([]byte, 1500)
					for {
						if _, _, err := snd.Read(buf); err != nil {
							return
						}
					}
				}()
				answer, err := fw.CreateAnswer(nil)
				if err != nil {
					b.Fatal(err)
				}
				g := webrtc.GatheringCompletePromise(fw)
				if err := fw.SetLocalDescription(answer); err != nil {
					b.Fatal(err)
				}
				<-g
				return fw.LocalDescription().SDP
			})
			defer func() {
				for _, pc := range pcs {
					_ = pc.Close()
				}
			}()
			pkt := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111, SSRC: 1}, Payload: make([]byte, 60)}
			send := func() {
				pkt.SequenceNumber++
				pkt.Timestamp += opusFrame
				for _, tr := range tracks {
					_ = tr.WriteRTP(pkt)
				}
			}
			warm(b, r, int64(n)*20, send)
			before := r.count(b)
			b.ReportAllocs()
			b.ResetTimer()
			c0, t0 := cpuTime(), time.Now()
			for i := 0; i < b.N; i++ {
				send()
			}
			wall, cpu := time.Since(t0), cpuTime()-c0
			b.StopTimer()
			reportFwd(b, int64(b.N)*int64(n), wall, cpu)
			time.Sleep(200 * time.Millisecond) // let the last packets land
			b.ReportMetric(100*(1-float64(r.count(b)-before)/float64(int64(b.N)*int64(n))), "rx-loss%")
		})
	}
}

// BenchmarkForwardPion is the SFU's send side end to end: listeners in a
// child process joined through POST /v6/voice/session; one speaker's
// packets injected at the read loop's per-packet step (parse, level,
// fan-out), each rewritten onto the listener's slot and sent through pion
// (SRTP, shared ICE-lite UDP port, batched writes) before ingest returns.
func BenchmarkForwardPion(b *testing.B) {
	for _, n := range pionListeners {
		b.Run(fmt.Sprintf("listeners=%d", n), func(b *testing.B) {
			e := newEnvB(b)
			ids := make([]string, n)
			r := startReceivers(b, n, func(i int, offer string) string {
				sid := fmt.Sprintf("b%d", i)
				tok := e.session(sid, "u"+sid, "r", uint32(100+i), auth.Access{})
				resp, body := e.post(tok, JoinRequest{SessionID: sid, SDP: offer})
				if resp.StatusCode != 201 {
					b.Fatalf("join: %d %s", resp.StatusCode, body)
				}
				var jr JoinResponse
				mustJSON(b, body, &jr)
				ids[i] = jr.VoicePeerID
				return jr.SDP
			})
			var ls []*peer
			e.sfu.mu.Lock()
			for _, id := range ids {
				ls = append(ls, e.sfu.peers[id])
			}
			e.sfu.mu.Unlock()
			sp := &peer{room: "bench"}
			sp.speaking.Store(true)
			sp.loud.Store(127 - 30)
			wire(sp, ls)
			raw := opusPacket(1)
			pk := new(packet)
			seq := uint16(1)
			send := func() {
				seq++
				raw[2], raw[3] = byte(seq>>8), byte(seq)
				e.sfu.ingest(sp, pk, raw)
			}
			warm(b, r, int64(n)*20, send)
			before, st0 := r.count(b), e.port.Stats()
			b.ReportAllocs()
			b.ResetTimer()
			c0, t0 := cpuTime(), time.Now()
			for i := 0; i < b.N; i++ {
				send()
			}
			wall, cpu := time.Since(t0), cpuTime()-c0
			b.StopTimer()
			reportFwd(b, int64(b.N)*int64(n), wall, cpu)
			st := e.port.Stats()
			if p := st.Packets - st0.Packets; p > 0 {
				b.ReportMetric(float64(p)/float64(st.Syscalls-st0.Syscalls), "pkt/syscall")
			}
			if h := st.Held - st0.Held; h > 0 {
				// The batching's added latency: a batch's first packet's
				// wait for its sendmmsg (mean, and the longest).
				b.ReportMetric(float64(st.HoldNanos-st0.HoldNanos)/float64(h)/1e3, "hold-us")
				b.ReportMetric(float64(st.HoldMaxNanos)/1e3, "hold-max-us")
			}
			time.Sleep(200 * time.Millisecond)
			b.ReportMetric(100*(1-float64(r.count(b)-before)/float64(int64(b.N)*int64(n))), "rx-loss%")
			for reason, c := range e.sfu.m.dropped {
				if v := testutil.ToFloat64(c); v > 0 {
					b.ReportMetric(v, "drop-"+reason)
				}
			}
		})
	}
}
