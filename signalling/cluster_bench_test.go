package signalling

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// BenchmarkClusterHandshake is BenchmarkHandshake across edges: the
// streamers are on edge B, the players on edge A, one redis-server between
// them. redis-rt/op counts Redis round trips of both edges (a pipeline is
// one; blocking inbox reads included); cpu-us/op is this process (both
// edges and the clients), not redis-server.
func BenchmarkClusterHandshake(b *testing.B) {
	addr, _ := redistest.Start(b)
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprintf("pairs=%d", par), func(b *testing.B) {
			conn, ops := redisConn(b, addr)
			ea, _ := edge(b, conn, "bench-a-"+strconv.Itoa(par), Default(), Deps{}, 0)
			eb, _ := edge(b, conn, "bench-b-"+strconv.Itoa(par), Default(), Deps{}, 0)
			offer := ueOffer(b)
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(par)
			b.ResetTimer()
			cpu0, rt0 := cpuTime(), ops.Load()
			b.RunParallel(func(pb *testing.PB) {
				id := "X" + strconv.Itoa(par) + "-" + strconv.FormatInt(n.Add(1), 10)
				st := benchDial(b, wsURL(eb.streamer, "/"))
				defer st.Close()
				benchRead(b, st) // identify
				benchRead(b, st) // config
				benchWrite(b, st, `{"type":"endpointId","id":"`+id+`"}`)
				benchRead(b, st)
				testwait.For(b, "registered", func() bool { _, ok := ea.srv.Registry().Get(id); return ok })
				for pb.Next() {
					benchHandshake(b, ea, st, id, offer)
				}
			})
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-us/op")
			b.ReportMetric(float64(ops.Load()-rt0)/float64(b.N), "redis-rt/op")
		})
	}
}
