package bench

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
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

// A started edge's log stays out of the bench's output (stderr), and an
// edge that dies before it is ready says why in the error.
func TestStartEdgeLogKeptApart(t *testing.T) {
	script := filepath.Join(t.TempDir(), "edge")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'egbe-edge: config: the line the edge logged' >&2\nexit 2\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = StartEdgeWith(ctx, EdgeOptions{Bin: script})
	os.Stderr = saved
	w.Close()
	leaked, _ := io.ReadAll(r)
	r.Close()
	if !errors.Is(err, errEdgeExited) || !strings.Contains(err.Error(), "the line the edge logged") {
		t.Fatalf("error %v does not carry the edge's log", err)
	}
	if strings.Contains(string(leaked), "the line the edge logged") {
		t.Fatalf("the edge's log went to the bench's stderr: %q", leaked)
	}
}
