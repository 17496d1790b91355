package testwait

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a testing.TB that records a failure instead of ending the
// test, so the failure path can be checked.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

// TestWithin: a condition that comes to hold ends the wait without a
// failure; one that never holds fails once the deadline has passed, not
// before, naming what was awaited.
func TestWithin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		go func() { time.Sleep(3 * time.Second); n.Store(1) }()
		r := &recorder{TB: t}
		start := time.Now()
		Within(r, 5*time.Second, "the flag", func() bool { return n.Load() == 1 })
		if r.failed != "" {
			t.Fatalf("a condition that came to hold failed the test: %s", r.failed)
		}
		if waited := time.Since(start); waited < 3*time.Second || waited > 3*time.Second+maxInterval {
			t.Fatalf("the wait ended %v after it began, want within %v of 3s", waited, maxInterval)
		}

		start = time.Now()
		checks := 0
		Within(r, 5*time.Second, "the impossible", func() bool { checks++; return false })
		if !strings.Contains(r.failed, "waiting for the impossible") {
			t.Fatalf("failure message %q does not name what was awaited", r.failed)
		}
		if waited := time.Since(start); waited < 5*time.Second || waited > 5*time.Second+maxInterval {
			t.Fatalf("failed %v after the wait began, want within %v of the 5s deadline", waited, maxInterval)
		}
		if checks > int(5*time.Second/maxInterval)+20 {
			t.Fatalf("%d checks in 5s: the poll spins", checks)
		}
	})
}

// TestForHolds: For returns as soon as the condition holds.
func TestForHolds(t *testing.T) {
	calls := 0
	For(t, "the third call", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}
