package bench

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// buildBinary builds the command at pkg into dir.
func buildBinary(t *testing.T, dir, pkg string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// TestWorldScenario runs the world scenario against the real edge and
// shard binaries at a tiny scale.
func TestWorldScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the edge and shard binaries")
	}
	dir := t.TempDir()
	edge := buildBinary(t, dir, "github.com/oshun/egbe-edge/cmd/egbe-edge")
	shard := buildBinary(t, dir, "github.com/oshun/egbe-edge/cmd/egbe-shard")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := RunWorld(ctx, WorldOptions{EdgeBin: edge, ShardBin: shard, Transport: "websocket",
		Clients: 5, Instances: 2, Agents: 50, Warmup: time.Second, Duration: 2 * time.Second, DialWorkers: 5})
	if err != nil {
		t.Fatalf("%v\n%s", err, rep)
	}
	t.Logf("\n%s", rep)
	if rep.Connected != 5 || rep.Snapshots+rep.Deltas == 0 || rep.Latency.N == 0 {
		t.Fatalf("want 5 connected clients receiving snapshots with latency samples:\n%s", rep)
	}
	if rep.OverBudget != 0 || rep.MaxKbps > BudgetKbps {
		t.Fatalf("a client exceeded %d kbit/s:\n%s", BudgetKbps, rep)
	}
	if rep.MaxEntities == 0 || rep.EdgeErrors != 0 || rep.Disconnects != 0 {
		t.Fatalf("unexpected errors or empty world:\n%s", rep)
	}
}

// TestWorldBaselineScenario drives the bare relay (egbe-bench
// serve-baseline-world as a child process) with the world scenario's
// clients at a tiny scale: every client gets a snapshot per tick.
func TestWorldBaselineScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the egbe-bench binary")
	}
	bin := buildBinary(t, t.TempDir(), "github.com/oshun/egbe-edge/cmd/egbe-bench")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := RunWorldBaseline(ctx, WorldOptions{BenchBin: bin, Clients: 5, Warmup: time.Second, Duration: 2 * time.Second, DialWorkers: 5})
	if err != nil {
		t.Fatalf("%v\n%s", err, rep)
	}
	t.Logf("\n%s", rep)
	if rep.Connected != 5 || rep.Snapshots == 0 || rep.Latency.N == 0 || rep.MaxEntities != baselineWorldEntities {
		t.Fatalf("want 5 connected clients receiving full snapshots with latency samples:\n%s", rep)
	}
	if rep.EdgeCPU <= 0 || rep.EdgeErrors != 0 || rep.Disconnects != 0 {
		t.Fatalf("no server CPU measured, or errors:\n%s", rep)
	}
}
