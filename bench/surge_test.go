package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/admission"
	"github.com/oshun/egbe-edge/internal/redistest"
)

func TestBucketExcess(t *testing.T) {
	b := admission.Bucket{PerMinute: 60, Burst: 2} // 1 per second
	for _, tc := range []struct {
		name string
		ts   []int64
		want int
	}{
		{"empty", nil, 0},
		{"burst", []int64{0, 0}, 0},
		{"burst+1", []int64{0, 0, 0}, 1},
		{"refilled", []int64{0, 0, 1000}, 0},
		{"sustained", []int64{0, 0, 1000, 2000, 3000}, 0},
		{"late burst", []int64{0, 0, 1000, 1000, 1000}, 2},
		{"fast middle", []int64{0, 5000, 5000, 5000, 5100}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bucketExcess(b, tc.ts); got != tc.want {
				t.Fatalf("bucketExcess(%v) = %d, want %d", tc.ts, got, tc.want)
			}
		})
	}
}

// TestSurgeScenario runs a tiny storm against the real edge binary and a
// real redis-server, with buckets small enough that the ceilings bind.
func TestSurgeScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the edge binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "egbe-edge")
	build := exec.Command("go", "build", "-o", bin, "github.com/oshun/egbe-edge/cmd/egbe-edge")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	p := admission.DefaultPolicy()
	p.WaitingRoom.Global = admission.Bucket{PerMinute: 120, Burst: 8}
	for reg := range p.WaitingRoom.Regions {
		p.WaitingRoom.Regions[reg] = admission.Bucket{PerMinute: 30, Burst: 2}
	}
	pb, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(policyFile, pb, 0o600); err != nil {
		t.Fatal(err)
	}
	rs := redistest.StartServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tg, err := StartEdge(ctx, bin, "--redis-url", "redis://"+rs.Addr+"/0", "--policy", policyFile)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Stop()

	rep, err := RunSurge(ctx, tg, 0, SurgeOptions{Rate: 1200, Duration: 4 * time.Second, PollEvery: 200 * time.Millisecond, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if rep.Errors != 0 {
		t.Fatalf("errors: %v", rep.FirstErrs)
	}
	if rep.Admits == 0 || rep.Launches != rep.Admits {
		t.Fatalf("admits=%d launches=%d, want admits > 0, all launched", rep.Admits, rep.Launches)
	}
	if rep.Admits >= rep.Users || rep.Leaves == 0 {
		t.Fatalf("admits=%d users=%d leaves=%d: the ceilings should have held some users back", rep.Admits, rep.Users, rep.Leaves)
	}
	if n := rep.TotalOverAdmits(); n != 0 {
		t.Fatalf("over-admissions=%d: %v", n, rep.OverAdmits)
	}

	rep, err = RunSurge(ctx, tg, 0, SurgeOptions{Max: true, Workers: 4, MaxPolls: 2, Duration: 2 * time.Second, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if rep.Errors != 0 || rep.Polls == 0 || rep.TotalOverAdmits() != 0 {
		t.Fatalf("max: errors=%d %v polls=%d over=%v", rep.Errors, rep.FirstErrs, rep.Polls, rep.OverAdmits)
	}
}
