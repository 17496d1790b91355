package sfu

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/oshun/egbe-edge/auth"
)

// joinChildren joins n child-process clients through the HTTP API (room
// "r", every session in squad "s") and waits until every peer is
// connected (ICE and DTLS up, SRTP ready). It returns the edge's peers in
// offer order.
func joinChildren(tb testing.TB, e *testEnv, n int, env ...string) (*receivers, []*peer) {
	tb.Helper()
	ids := make([]string, n)
	r := startReceivers(tb, n, func(i int, offer string) string {
		sid := fmt.Sprintf("c%d", i)
		tok := e.session(sid, "u"+sid, "r", uint32(100+i), auth.Access{})
		if err := e.sfu.Control(sid, joinSquad("s")); err != nil {
			tb.Fatal(err)
		}
		resp, body := e.post(tok, JoinRequest{SessionID: sid, SDP: offer})
		if resp.StatusCode != 201 {
			tb.Fatalf("join: %d %s", resp.StatusCode, body)
		}
		var jr JoinResponse
		mustJSON(tb, body, &jr)
		ids[i] = jr.VoicePeerID
		return jr.SDP
	}, env...)
	ps := make([]*peer, n)
	deadline := time.Now().Add(30 * time.Second)
	for {
		bound := 0
		e.sfu.mu.Lock()
		for i, id := range ids {
			ps[i] = e.sfu.peers[id]
			if ps[i] != nil && len(ps[i].slots) > 0 && ps[i].slots[0].bind.Load() != nil &&
				ps[i].pc.ConnectionState() == webrtc.PeerConnectionStateConnected {
				bound++
			}
		}
		e.sfu.mu.Unlock()
		if bound == n {
			return r, ps
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d peers connected", bound, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkIdlePeers is what N joined but silent voice peers cost the
// edge per second: each client joins as a browser does (a sendrecv
// microphone m-line and 3 recvonly slots; in a child process, so only the
// edge's CPU counts) and then nobody sends media. The SFU runs with its
// default configuration (Run's timers included). One op is one second;
// cpu-ms/s is the process's CPU per wall second, allocs/s its heap
// allocations per second.
//
// clients=pion: pion's defaults (RTCP every second, a consent check every
// 2 s); clients=browser: what Chrome sends (RTCP on audio every 5 s, a
// consent check every 2.5 s). Everything left once the edge's own timers
// are gone is the answer to what the clients send.
func BenchmarkIdlePeers(b *testing.B) {
	for _, c := range []struct {
		name string
		n    int
		env  []string
	}{
		{"clients=pion/peers=100", 100, []string{slotsEnv + "=4"}},
		{"clients=browser/peers=100", 100, []string{slotsEnv + "=4", browserEnv + "=1"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := newEnv(b, func(c *Config) { c.StatsInterval = Default().StatsInterval })
			joinChildren(b, e, c.n, c.env...)
			time.Sleep(2 * time.Second) // joins, DTLS and first reports settle
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			b.ResetTimer()
			c0, t0 := cpuTime(), time.Now()
			time.Sleep(time.Duration(b.N) * time.Second)
			cpu, wall := cpuTime()-c0, time.Since(t0)
			b.StopTimer()
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(cpu.Microseconds())/1000/wall.Seconds(), "cpu-ms/s")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/wall.Seconds(), "allocs/s")
		})
	}
}
