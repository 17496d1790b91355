package bench

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Latencies collects samples from many goroutines.
type Latencies struct {
	mu sync.Mutex
	s  []time.Duration // guarded by mu
}

// Add records one sample.
func (l *Latencies) Add(d time.Duration) {
	l.mu.Lock()
	l.s = append(l.s, d)
	l.mu.Unlock()
}

// Summary is a latency distribution.
type Summary struct {
	N             int
	P50, P99, Max time.Duration
}

// Summary sorts a copy of the samples.
func (l *Latencies) Summary() Summary {
	q := quantiles(samples(l))
	return Summary{N: q.N, P50: q.P50, P99: q.P99, Max: q.Max}
}

func (s Summary) String() string {
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", s.N, s.P50.Round(time.Microsecond), s.P99.Round(time.Microsecond), s.Max.Round(time.Microsecond))
}

// Quantiles is a latency distribution with p90.
type Quantiles struct {
	N                  int
	P50, P90, P99, Max time.Duration
}

// samples copies l's samples.
func samples(l *Latencies) []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.s)
}

func quantiles(s []time.Duration) Quantiles {
	if len(s) == 0 {
		return Quantiles{}
	}
	s = slices.Clone(s)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return Quantiles{N: len(s), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: s[len(s)-1]}
}

func (q Quantiles) String() string {
	r := func(d time.Duration) time.Duration {
		if d >= 10*time.Millisecond {
			return d.Round(time.Millisecond)
		}
		return d.Round(10 * time.Microsecond)
	}
	return fmt.Sprintf("n=%d p50=%v p90=%v p99=%v max=%v", q.N, r(q.P50), r(q.P90), r(q.P99), r(q.Max))
}
