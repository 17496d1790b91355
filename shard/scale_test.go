package shard

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// TestScaleWorld is a load run, not a CI test: EGBE_SCALE=N clients
// (EGBE_SCALE_INSTANCES instances of 500 agents, default 10) with presence
// at 20 Hz for EGBE_SCALE_SECONDS (default 10). It logs shard->client
// snapshot latency, bytes per client per second and process CPU (the shard,
// the edge and the clients share the process).
func TestScaleWorld(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("EGBE_SCALE"))
	if n == 0 {
		t.Skip("set EGBE_SCALE=N to run")
	}
	instances := envInt("EGBE_SCALE_INSTANCES", 10)
	secs := envInt("EGBE_SCALE_SECONDS", 10)
	var ids []string
	for i := range instances {
		ids = append(ids, fmt.Sprintf("inst-%d", i))
	}
	e := newTestEnv(t, func(c *Config) { c.ControlQueue = 64 }, shardSpec{id: "s1", instances: ids, agents: 500})

	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	type stat struct {
		lags  []time.Duration
		bytes int
	}
	stats := make([]stat, n)
	var measuring atomic.Bool
	var hs []time.Duration
	for i := range n {
		tc := e.serve("webtransport", true)
		h0 := time.Now()
		tc.handshake(e.hello(fmt.Sprintf("u%d", i), ids[i%instances]))
		hs = append(hs, time.Since(h0))
		wg.Add(2)
		go func() { // presence at 20 Hz
			defer wg.Done()
			tk := time.NewTicker(50 * time.Millisecond)
			defer tk.Stop()
			var seq uint64
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
				}
				seq++
				tc.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Presence{Presence: &codec.PresencePacket{Seq: seq,
					Position: &codec.Vec3{XMm: int32(i*7919%180_000 - 90_000), YMm: int32(seq*100%180_000) - 90_000}}}})
			}
		}()
		go func() {
			defer wg.Done()
			st := &stats[i]
			states := map[uint64][]codec.Entity{}
			for {
				var b []byte
				select {
				case <-stop:
					return
				case b = <-tc.c.dgram:
				case b = <-tc.c.out:
				}
				var env codec.ServerEnvelope
				if codec.DecodeServer(b, false, &env) != nil {
					continue
				}
				var seq uint64
				switch m := env.Msg.(type) {
				case *codec.ServerEnvelope_Snapshot:
					var w codec.World
					w.FromSnapshot(m.Snapshot)
					seq = m.Snapshot.Sequence
					states[seq] = w.Entities
					if measuring.Load() {
						st.lags = append(st.lags, time.Since(time.UnixMilli(int64(m.Snapshot.ServerTimeMs))))
					}
				case *codec.ServerEnvelope_Delta:
					ups := make([]codec.Entity, len(m.Delta.Upserts))
					for k, u := range m.Delta.Upserts {
						ups[k] = codec.EntityFromProto(u)
					}
					seq = m.Delta.Sequence
					states[seq] = codec.Apply(nil, states[m.Delta.BaseSequence], ups, m.Delta.RemovedIds)
					if measuring.Load() {
						st.lags = append(st.lags, time.Since(time.UnixMilli(int64(m.Delta.ServerTimeMs))))
					}
				default:
					continue
				}
				if measuring.Load() {
					st.bytes += len(b)
				}
				for k := range states { // keep the window of possible bases small
					if k+40 < seq {
						delete(states, k)
					}
				}
				tc.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ack{Ack: &codec.Ack{SnapshotSequence: seq}}})
			}
		}()
	}
	setup := time.Since(start)
	var ru1, ru2 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	t0 := time.Now()
	measuring.Store(true)
	time.Sleep(time.Duration(secs) * time.Second) // a load run's duration, not synchronisation
	measuring.Store(false)
	elapsed := time.Since(t0)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru2)
	close(stop)
	wg.Wait()
	cpu := time.Duration((ru2.Utime.Nano()+ru2.Stime.Nano())-(ru1.Utime.Nano()+ru1.Stime.Nano())) * time.Nanosecond
	var lags []time.Duration
	maxBps := 0.0
	total := 0
	for _, st := range stats {
		lags = append(lags, st.lags...)
		total += st.bytes
		maxBps = max(maxBps, float64(st.bytes*8)/elapsed.Seconds())
	}
	slices.Sort(hs)
	t.Logf("handshakes under growing load: p50 %s p99 %s max %s", hs[len(hs)/2], hs[len(hs)*99/100], hs[len(hs)-1])
	slices.Sort(lags)
	if len(lags) == 0 {
		t.Fatal("no snapshots")
	}
	t.Logf("%d clients, %d instances x 500 agents, %s: %d snapshots, latency p50 %s p99 %s max %s; per client avg %.0f bit/s, max %.0f bit/s; process CPU %.2f cores (setup %s)",
		n, instances, elapsed.Round(time.Millisecond), len(lags), lags[len(lags)/2], lags[len(lags)*99/100], lags[len(lags)-1],
		float64(total*8)/elapsed.Seconds()/float64(n), maxBps, cpu.Seconds()/elapsed.Seconds(), setup.Round(time.Millisecond))
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestScaleLinkSessions opens EGBE_SCALE_LINK sessions over one shard link
// (spread over EGBE_SCALE_INSTANCES instances of 10 agents, default 50:
// every session is also a player entity in its instance; clients drain
// their lanes) and logs the handshake rate and the process's heap and
// goroutines per session.
func TestScaleLinkSessions(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("EGBE_SCALE_LINK"))
	if n == 0 {
		t.Skip("set EGBE_SCALE_LINK=N to run")
	}
	var ids []string
	for i := range envInt("EGBE_SCALE_INSTANCES", 50) {
		ids = append(ids, fmt.Sprintf("inst-%d", i))
	}
	e := newTestEnv(t, func(c *Config) { c.ControlQueue = 16 }, shardSpec{id: "s1", instances: ids, agents: 10})
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	var hwg sync.WaitGroup
	sem := make(chan struct{}, 64) // 64 handshakes in flight
	for i := range n {
		sem <- struct{}{}
		hwg.Add(1)
		go func() {
			defer hwg.Done()
			tc := e.serve("webtransport", true)
			tc.t = &fatalT{TB: t}
			tc.handshake(e.hello(fmt.Sprintf("u%d", i), ids[i%len(ids)]))
			<-sem
			wg.Add(1)
			go func() { // drain the lanes
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-tc.c.dgram:
					case <-tc.c.out:
					}
				}
			}()
		}()
	}
	hwg.Wait()
	took := time.Since(start)
	testwait.For(t, "all sessions on the shard", func() bool { return e.shards["s1"].Sessions() == n })
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	g1 := runtime.NumGoroutine()
	t.Logf("%d sessions on one link: handshakes %.0f/s; heap in use %.1f KiB/session (edge + shard + test clients); goroutines %.1f/session",
		n, float64(n)/took.Seconds(), float64(m1.HeapInuse-m0.HeapInuse+m1.StackInuse-m0.StackInuse)/1024/float64(n), float64(g1-g0)/float64(n))
	close(stop)
	wg.Wait()
}
