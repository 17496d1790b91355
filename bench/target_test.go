package bench

import (
	"context"
	"errors"
	"testing"
	"time"
)

// An edge that exits before it is ready (a port taken between picking and
// binding) is reported at once and retried, not waited on for 30 s.
func TestStartEdgeExitedEarly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := StartEdgeWith(ctx, EdgeOptions{Bin: "false"})
	if !errors.Is(err, errEdgeExited) {
		t.Fatalf("StartEdgeWith(false): %v, want errEdgeExited", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("took %v: the exit was not noticed", time.Since(start))
	}
}
