// Package testwait is how the project's tests wait: poll a condition until
// it holds, or fail the test, naming what was awaited, once a deadline
// passes. Tests never sleep to synchronise; this is the one polling loop
// they share. Only _test files import it.
package testwait

import (
	"testing"
	"time"
)

// Timeout is For's deadline: generous, so only a hang fails (a loaded CI
// machine is slow, not stuck), and short of the test binary's own timeout,
// so a hang fails with the name of what it waited for.
const Timeout = 20 * time.Second

// maxInterval bounds the pause between checks: short enough that a
// condition is seen soon after it holds, long enough that a long wait does
// not spin on a shared CPU.
const maxInterval = 20 * time.Millisecond

// For polls cond until it holds; after Timeout it fails t with what.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, Timeout, what, cond)
}

// Within polls cond until it holds; after d it fails t with what. The
// first checks follow each other closely (a condition usually holds within
// milliseconds), then every maxInterval.
func Within(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	pause := 100 * time.Microsecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
			return
		}
		time.Sleep(pause) // the poll interval, not a wait for the condition
		pause = min(2*pause, maxInterval)
	}
}
