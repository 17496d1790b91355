package edge

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/signalling/matchmaker"
)

// BenchmarkLiveMatchAdmission is what the live admission adds to a Pixel
// Streaming match: the same edge's matchmaker and registry, with the edge's
// admission (waiting room check, abuse observation and score, caps,
// budget, the session record) and without any (bare), on memory and on
// real Redis state. Each match is released at once; every one is a new
// subject on a new /24, so caps never refuse.
func BenchmarkLiveMatchAdmission(b *testing.B) {
	for _, backend := range []string{"memory", "redis"} {
		b.Run(backend, func(b *testing.B) {
			mutate := func(c *Config) { c.PxstreamAuth = "token" }
			var rds *redistest.Server
			if backend == "redis" {
				rds = redistest.StartServer(b)
				mutate = func(c *Config) { c.PxstreamAuth = "token"; c.RedisURL = "redis://" + rds.Addr + "/0" }
			}
			te := startEdge(b, mutate)
			te.rawStreamers(b, "ue-", "us-east-1", 32)
			bare, err := matchmaker.New(matchmaker.Default(), matchmaker.Deps{Fleet: &matchmaker.RegistryFleet{Reg: te.px.srv.Registry()},
				Signer: te.Signer(), Topology: te.px.mm.Topology()})
			if err != nil {
				b.Fatal(err)
			}
			for _, mode := range []string{"bare", "admitted"} {
				b.Run(mode, func(b *testing.B) {
					mm := te.px.mm
					if mode == "bare" {
						mm = bare
					}
					ctx := context.Background()
					b.ReportAllocs()
					calls := redisCalls(b, rds)
					i := 0
					for b.Loop() {
						i++
						sub := "bench-" + strconv.Itoa(i)
						req := matchmaker.Request{ClientRegion: "us-east", Codecs: []string{"H264"}, Entitlement: "free", Subject: sub,
							Access:     &auth.Access{Subject: sub, Region: "us-east", Tenant: "tara-studio"},
							RemoteAddr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), 1})}
						m, err := mm.Match(ctx, req)
						if err != nil {
							b.Fatal(err)
						}
						mm.Release(m.SessionID)
						te.adm.px.release(m.SessionID)
					}
					if rds != nil {
						// Background traffic (registry heartbeats, fleet board) is
						// in it too: a small overcount.
						b.ReportMetric(float64(redisCalls(b, rds)-calls)/float64(b.N), "redis-cmds/op")
					}
				})
			}
		})
	}
}

// redisCalls is the server's total command count (INFO commandstats).
func redisCalls(b *testing.B, rds *redistest.Server) int64 {
	if rds == nil {
		return 0
	}
	c := redis.NewClient(&redis.Options{Addr: rds.Addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		if _, rest, ok := strings.Cut(line, "calls="); ok {
			v, _, _ := strings.Cut(rest, ",")
			k, _ := strconv.ParseInt(v, 10, 64)
			n += k
		}
	}
	return n
}
