package admission

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oshun/egbe-edge/state"
)

// Meter measures what the surge plan watches, on this edge and for the
// fleet: Pixel Streaming session starts (success, per POP), cold joins
// (match to a streamer ready to stream), and the answers and latency of
// the admission routes (launch, match, queue). Each observation goes to
// Prometheus at once and to a per-minute state.Tallies key on Flush, so
// the surge controller of any edge reads the fleet's trailing windows.
//
// A latency's p95 is read from counts above fixed bounds (latencyBounds):
// "p95 > 500 ms" holds exactly when more than 5 % of the samples took
// longer than 500 ms, so the thresholds of the reference (500 ms, 5 s,
// 8 s) are bounds and their checks are exact.
type Meter struct {
	tallies state.Tallies    // immutable after New
	now     func() time.Time // immutable after New
	prom    *meterMetrics    // immutable after New; nil: none

	mu      sync.Mutex
	pending map[int64]map[string]int64 // guarded by mu: minute -> field -> delta
}

// latencyBounds are the bounds (ms) latencies are counted above.
var latencyBounds = []int64{100, 250, 500, 1000, 2500, 5000, 8000, 15000, 30000}

// Tally fields of a minute.
const (
	fStartOK   = "start.ok"
	fStartFail = "start.fail"
	fColdN     = "cold.n"
	fColdGT    = "cold.gt:"
	fHTTPN     = "http.n"
	fHTTP5xx   = "http.5xx"
	fLaunchN   = "launch.n"
	fLaunchGT  = "launch.gt:"
)

// meterTTL keeps a minute's tally past the longest window read (10 min).
const meterTTL = 30 * time.Minute

type meterMetrics struct {
	starts   *prometheus.CounterVec   // pop, outcome
	coldJoin *prometheus.HistogramVec // pop
	httpDur  *prometheus.HistogramVec // route
	httpResp *prometheus.CounterVec   // route, code
}

// NewMeter returns a Meter writing to tallies; reg (may be nil) receives
// egbe_admission_session_starts_total, egbe_admission_cold_join_seconds,
// egbe_admission_http_duration_seconds and egbe_admission_http_responses_total.
func NewMeter(tallies state.Tallies, now func() time.Time, reg prometheus.Registerer) (*Meter, error) {
	if now == nil {
		now = time.Now
	}
	mt := &Meter{tallies: tallies, now: now, pending: map[int64]map[string]int64{}}
	if reg == nil {
		return mt, nil
	}
	secs := make([]float64, len(latencyBounds))
	for i, b := range latencyBounds {
		secs[i] = float64(b) / 1000
	}
	pm := &meterMetrics{
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_session_starts_total",
			Help: "Pixel Streaming session starts by POP and outcome (started: the streamer's offer reached the player before the session token lapsed; failed: it did not, or the offer was refused)."}, []string{"pop", "outcome"}),
		coldJoin: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "egbe_admission_cold_join_seconds",
			Help: "Cold join: from the match answer to the streamer's offer reaching the player, by POP.", Buckets: secs}, []string{"pop"}),
		httpDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "egbe_admission_http_duration_seconds",
			Help: "Latency of the admission routes (launch, match, queue) by route.", Buckets: secs}, []string{"route"}),
		httpResp: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_http_responses_total",
			Help: "Answers of the admission routes by route and status class (2xx, 4xx, 5xx)."}, []string{"route", "code"}),
	}
	for _, c := range []prometheus.Collector{pm.starts, pm.coldJoin, pm.httpDur, pm.httpResp} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	mt.prom = pm
	return mt, nil
}

func minuteOf(t time.Time) int64 { return t.Unix() / 60 }

func (mt *Meter) add(fields map[string]int64) {
	min := minuteOf(mt.now())
	mt.mu.Lock()
	defer mt.mu.Unlock()
	p := mt.pending[min]
	if p == nil {
		p = map[string]int64{}
		mt.pending[min] = p
	}
	for f, d := range fields {
		p[f] += d
	}
}

func overBounds(prefix string, d time.Duration, into map[string]int64) {
	ms := d.Milliseconds()
	for _, b := range latencyBounds {
		if ms > b {
			into[prefix+strconv.FormatInt(b, 10)]++
		}
	}
}

// Start records a Pixel Streaming session start at pop: ok when the
// streamer's offer reached the player.
func (mt *Meter) Start(pop string, ok bool) {
	outcome, f := "started", fStartOK
	if !ok {
		outcome, f = "failed", fStartFail
	}
	if mt.prom != nil {
		mt.prom.starts.WithLabelValues(pop, outcome).Inc()
	}
	mt.add(map[string]int64{f: 1, f + ":" + pop: 1})
}

// ColdJoin records one cold join at pop.
func (mt *Meter) ColdJoin(pop string, d time.Duration) {
	if mt.prom != nil {
		mt.prom.coldJoin.WithLabelValues(pop).Observe(d.Seconds())
	}
	f := map[string]int64{fColdN: 1}
	overBounds(fColdGT, d, f)
	mt.add(f)
}

// HTTP records one answer of an admission route ("launch", "match",
// "queue").
func (mt *Meter) HTTP(route string, status int, d time.Duration) {
	class := strconv.Itoa(status/100) + "xx"
	if mt.prom != nil {
		mt.prom.httpDur.WithLabelValues(route).Observe(d.Seconds())
		mt.prom.httpResp.WithLabelValues(route, class).Inc()
	}
	f := map[string]int64{fHTTPN: 1}
	if status >= 500 {
		f[fHTTP5xx] = 1
	}
	if route == "launch" {
		f[fLaunchN] = 1
		overBounds(fLaunchGT, d, f)
	}
	mt.add(f)
}

// Flush writes what was observed to the shared tallies. Minutes that fail
// to write stay pending for the next flush.
func (mt *Meter) Flush(ctx context.Context) error {
	mt.mu.Lock()
	pending := mt.pending
	mt.pending = map[int64]map[string]int64{}
	mt.mu.Unlock()
	var firstErr error
	for min, f := range pending {
		if err := mt.tallies.Add(ctx, "surge:"+strconv.FormatInt(min, 10), f, meterTTL, mt.now()); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("%w: %w", ErrStateUnavailable, err)
			}
			mt.mu.Lock()
			p := mt.pending[min]
			if p == nil {
				p = map[string]int64{}
				mt.pending[min] = p
			}
			for k, v := range f {
				p[k] += v
			}
			mt.mu.Unlock()
		}
	}
	return firstErr
}

// Window is the fleet's samples over a trailing window.
type Window map[string]int64

// Window sums the fleet's minutes covering the trailing d (the current
// minute included).
func (mt *Meter) Window(ctx context.Context, d time.Duration) (Window, error) {
	now := mt.now()
	last := minuteOf(now)
	n := max(int64(d/time.Minute), 1)
	keys := make([]string, 0, n)
	for m := last - n + 1; m <= last; m++ {
		keys = append(keys, "surge:"+strconv.FormatInt(m, 10))
	}
	rows, err := mt.tallies.Read(ctx, now, keys...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStateUnavailable, err)
	}
	w := Window{}
	for _, r := range rows {
		for f, v := range r {
			w[f] += v
		}
	}
	return w, nil
}

// StartSuccessBP is the start success in basis points at pop ("" = all
// POPs) and the sample count.
func (w Window) StartSuccessBP(pop string) (bp int, n int64) {
	ok, fail := w[fStartOK], w[fStartFail]
	if pop != "" {
		ok, fail = w[fStartOK+":"+pop], w[fStartFail+":"+pop]
	}
	n = ok + fail
	if n == 0 {
		return 0, 0
	}
	return int(ok * 10000 / n), n
}

// ServerErrorsBP is the share of 5xx answers of the admission routes.
func (w Window) ServerErrorsBP() (bp int, n int64) {
	n = w[fHTTPN]
	if n == 0 {
		return 0, 0
	}
	return int(w[fHTTP5xx] * 10000 / n), n
}

// p95 is the smallest latency bound that at most 5 % of the samples
// exceed (the p95 is at most that), or -1 past the largest bound.
func (w Window) p95(nField, gtPrefix string) (ms, n int64) {
	n = w[nField]
	for _, b := range latencyBounds {
		if w[gtPrefix+strconv.FormatInt(b, 10)]*10000 <= n*500 {
			return b, n
		}
	}
	return -1, n
}

// ColdJoinP95Ms is the cold join's p95 bound (see p95) and the count.
func (w Window) ColdJoinP95Ms() (ms, n int64) { return w.p95(fColdN, fColdGT) }

// LaunchP95Ms is the launch route's p95 bound (see p95) and the count.
func (w Window) LaunchP95Ms() (ms, n int64) { return w.p95(fLaunchN, fLaunchGT) }

// over reports whether a p95 bound exceeds limit (-1 exceeds every limit).
func over(p95, limit int64) bool { return p95 < 0 || p95 > limit }
