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
	l.mu.Lock()
	s := slices.Clone(l.s)
	l.mu.Unlock()
	if len(s) == 0 {
		return Summary{}
	}
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return Summary{N: len(s), P50: at(0.50), P99: at(0.99), Max: s[len(s)-1]}
}

func (s Summary) String() string {
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", s.N, s.P50.Round(time.Microsecond), s.P99.Round(time.Microsecond), s.Max.Round(time.Microsecond))
}
