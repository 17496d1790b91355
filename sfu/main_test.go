package sfu

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package on leaked goroutines (every peer's loops are
// owned and waited for by leave/Close).
func TestMain(m *testing.M) {
	if os.Getenv(recvEnv) != "" {
		os.Exit(receiversMain()) // a benchmark's receiver process
	}
	goleak.VerifyTestMain(m)
}
