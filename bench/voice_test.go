package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// buildEdge builds cmd/egbe-edge into a temporary directory, or returns
// $EGBE_EDGE_BIN when set (skips the build, most of this test's time).
func buildEdge(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("EGBE_EDGE_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "egbe-edge")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/egbe-edge")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build edge: %v", err)
	}
	return bin
}

// TestVoiceScenario runs the voice scenario at tiny scale against a built
// edge: packets flow to every listener and loss stays bounded.
func TestVoiceScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the edge binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	policy, err := filepath.Abs("loadtest-policy.json")
	if err != nil {
		t.Fatal(err)
	}
	tg, err := StartEdge(ctx, buildEdge(t), "--policy", policy)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Stop()
	rep, err := RunVoice(ctx, tg, VoiceOptions{Speakers: 2, Listeners: 2, Duration: 2 * time.Second, Warmup: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if rep.Joined != 4 || rep.JoinErrors != 0 {
		t.Fatalf("joined=%d errors=%d %v", rep.Joined, rep.JoinErrors, rep.FirstErrs)
	}
	// 2 speakers x 50 pps x 2 s, heard by 2 listeners (2 each) and by the
	// other speaker (1 each): about 600 forwarded packets.
	if rep.Sent < 150 || rep.ListenerReceived == 0 || rep.Latency.N == 0 {
		t.Fatalf("no packets flowed:\n%s", rep)
	}
	if rep.Loss() > 0.10 {
		t.Fatalf("loss %.1f%% > 10%%:\n%s", 100*rep.Loss(), rep)
	}
}
