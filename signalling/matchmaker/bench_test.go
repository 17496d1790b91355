package matchmaker

import (
	"context"
	"testing"

	"github.com/oshun/egbe-edge/auth"
)

// BenchmarkMatch: match decisions over the 7 GA POPs with 1,000 registered
// streamers (in-memory Fleet), each match released again so the pool stays
// steady. Regions rotate over every residency scope.
func BenchmarkMatch(b *testing.B) {
	split := map[string]int{ // 1,000 streamers, roughly by capacity
		"us-east-1": 300, "us-west-2": 200, "eu-west-1": 200, "ap-northeast-1": 80,
		"ap-south-1": 80, "ap-southeast-2": 70, "sa-east-1": 70,
	}
	regions := []string{"us-east", "us-west", "gb", "de", "in", "jp", "au", "br"}
	for _, tc := range []struct {
		name  string
		busy  float64 // fraction of each POP's streamers streaming
		codec []string
	}{
		{"idle", 0, []string{"H264"}},
		{"half-busy", 0.5, []string{"AV1", "H264"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := newRig(b, nil, nil)
			for pop, n := range split {
				r.fleet.add(pop, n, "H264", "AV1")
				r.fleet.occupy(pop, int(float64(n)*tc.busy))
			}
			if n := len(r.fleet.Streamers()); n != 1000 {
				b.Fatalf("%d streamers", n)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				m, err := r.m.Match(ctx, req(regions[i%len(regions)], "paid", false, tc.codec...))
				i++
				if err != nil {
					b.Fatal(err)
				}
				r.fleet.Release(m.SessionID)
			}
			b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

func BenchmarkMatchCached(b *testing.B) {
	r := newRig(b, nil, nil)
	cfg := Default()
	m, err := New(cfg, Deps{Fleet: r.fleet, Signer: r.signer, Now: r.clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	for pop, n := range map[string]int{"us-east-1": 300, "us-west-2": 200, "eu-west-1": 200, "ap-northeast-1": 80, "ap-south-1": 80, "ap-southeast-2": 70, "sa-east-1": 70} {
		r.fleet.add(pop, n, "H264", "AV1")
	}
	regions := []string{"us-east", "us-west", "gb", "de", "in", "jp", "au", "br"}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%500 == 0 {
			// Every lease lapses and the next match takes a fresh snapshot:
			// one registry snapshot per 500 decisions.
			r.clock.Advance(auth.PxSessionDefaultTTL)
		}
		res, err := m.Match(ctx, req(regions[i%len(regions)], "paid", false, "H264"))
		i++
		if err != nil {
			b.Fatal(err)
		}
		_ = res
	}
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "decisions/s")
}
