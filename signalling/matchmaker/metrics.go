package matchmaker

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics: counters updated on the match path, gauges read from the live
// registry at scrape time (a Collector, so no background goroutine).
type metrics struct {
	m        *Matchmaker
	matches  *prometheus.CounterVec // pop, codec
	refusals *prometheus.CounterVec // reason

	sessions, util, maxSessions, quota, headroom, streamers *prometheus.Desc
}

func newMetrics(m *Matchmaker) *metrics {
	pop := []string{"pop"}
	return &metrics{
		m: m,
		matches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egbe_pxstream_pop_matches_total", Help: "Pixel Streaming matches per POP and codec.",
		}, []string{"pop", "codec"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egbe_pxstream_pop_match_refusals_total", Help: "Refused Pixel Streaming match requests by reason.",
		}, []string{"reason"}),
		sessions:    prometheus.NewDesc("egbe_pxstream_pop_sessions", "Leased plus streaming streamers per POP.", pop, nil),
		util:        prometheus.NewDesc("egbe_pxstream_pop_utilisation_ratio", "Sessions / max sessions per POP.", pop, nil),
		maxSessions: prometheus.NewDesc("egbe_pxstream_pop_max_sessions", "Session capacity per POP (topology).", pop, nil),
		quota:       prometheus.NewDesc("egbe_pxstream_pop_gpu_quota", "GPU node quota per POP (topology).", pop, nil),
		headroom:    prometheus.NewDesc("egbe_pxstream_pop_gpu_quota_headroom", "GPU quota minus nodes in use per POP.", pop, nil),
		streamers:   prometheus.NewDesc("egbe_pxstream_pop_streamers", "Registered streamers per POP and state.", []string{"pop", "state"}, nil),
	}
}

func (x *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{x.matches, x.refusals, x} {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("matchmaker: register metrics: %w", err)
		}
	}
	return nil
}

func (x *metrics) matched(pop, codec string) { x.matches.WithLabelValues(pop, codec).Inc() }
func (x *metrics) refused(reason Reason)     { x.refusals.WithLabelValues(string(reason)).Inc() }

// Describe implements prometheus.Collector.
func (x *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{x.sessions, x.util, x.maxSessions, x.quota, x.headroom, x.streamers} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (x *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, p := range x.m.Dashboard().POPs {
		g := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{p.ID}, labels...)...)
		}
		g(x.sessions, float64(p.Sessions))
		g(x.util, float64(p.UtilisationBP)/10_000)
		g(x.maxSessions, float64(p.MaxSessions))
		g(x.quota, float64(p.GPUQuota))
		g(x.headroom, float64(p.QuotaHeadroom))
		for state, n := range p.Streamers {
			g(x.streamers, float64(n), state)
		}
	}
}

var _ prometheus.Collector = (*metrics)(nil)
