package edge

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
						te.adm.px.sessions.Release(m.SessionID)
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

// rtHook counts a client's Redis round trips: one per command sent alone,
// one per pipeline.
type rtHook struct{ n atomic.Int64 }

func (h *rtHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *rtHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *rtHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}

// BenchmarkConcertSeatMatch (issue 14 point 3) is a concert match (a seat
// on one of four SFUs) against a match that leases a streamer, through the
// same edge's admitted matchmaker on real Redis. Subjects are paid (no
// budget read, no walk-up slot), new each time on a new /24, and released
// at once. Reports the edge's Redis round trips per match and per match
// plus release (a hook on its client: a command sent alone or a pipeline
// is one) and the server's
// commands (INFO commandstats, scripts' commands included); both include
// the registry's background heartbeats.
func BenchmarkConcertSeatMatch(b *testing.B) {
	rds := redistest.StartServer(b)
	start := time.Now().Add(-time.Hour)
	events := filepath.Join(b.TempDir(), "events.json")
	doc := fmt.Sprintf(`{"version":1,"events":[{"id":"gala","pop":"us-east-1","start":%q,"end":%q,"walkUpSlots":0,`+
		`"concert":{"codec":"H264","sfus":[{"id":"SFU","seats":1000000},{"id":"SFU2","seats":1000000},{"id":"SFU3","seats":1000000},{"id":"SFU4","seats":1000000}]}}]}`,
		start.Format(time.RFC3339), start.Add(48*time.Hour).Format(time.RFC3339))
	if err := os.WriteFile(events, []byte(doc), 0o600); err != nil {
		b.Fatal(err)
	}
	te := startEdge(b, func(c *Config) {
		c.PxstreamAuth, c.RedisURL, c.PxstreamEvents = "token", "redis://"+rds.Addr+"/0", events
	})
	te.rawStreamers(b, "ue-", "us-east-1", 32)
	hook := &rtHook{}
	te.redis.Client().AddHook(hook)
	for _, mode := range []string{"streamer", "seat"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			calls, rts := redisCalls(b, rds), hook.n.Load()
			var matchRTs int64
			i := 0
			for b.Loop() {
				i++
				sub := "bench-" + mode + strconv.Itoa(i)
				req := matchmaker.Request{ClientRegion: "us-east", Codecs: []string{"H264"}, Entitlement: "paid", Subject: sub,
					Access:     &auth.Access{Subject: sub, Region: "us-east", Tenant: "tara-studio", Entitlement: "paid"},
					RemoteAddr: netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), 1})}
				if mode == "seat" {
					req.EventID = "gala"
				}
				before := hook.n.Load()
				m, err := te.px.mm.Match(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				matchRTs += hook.n.Load() - before
				if (m.Seat != nil) != (mode == "seat") {
					b.Fatalf("%s match %+v", mode, m)
				}
				te.px.mm.Release(m.SessionID)
				te.adm.px.sessions.Release(m.SessionID)
			}
			b.ReportMetric(float64(matchRTs)/float64(b.N), "redis-rt/match")
			b.ReportMetric(float64(hook.n.Load()-rts)/float64(b.N), "redis-rt/op")
			b.ReportMetric(float64(redisCalls(b, rds)-calls)/float64(b.N), "redis-cmds/op")
		})
	}
}
