package bench

import (
	"context"
	"os"
	"testing"
	"time"
)

// childEnv makes this test binary one of the pxsfu scenario's children
// (its receivers or the bare forwarder) instead of running tests.
const childEnv = "EGBE_BENCH_PXSFU_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		ctx := context.Background()
		var err error
		switch os.Args[1] {
		case "pxsfu-receivers":
			err = PxSFUReceiversCommand(ctx, os.Args[2:])
		case "pxsfu-bare":
			err = PxSFUBareCommand(ctx, os.Args[2:])
		}
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestPxSFUScenario runs the pxsfu scenario at tiny scale against a built
// edge: three players (one per layer) play through the Go SFU and through
// the bare pion forwarder, and the report has figures for both.
func TestPxSFUScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the edge binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	tg, err := StartEdgeWith(ctx, EdgeOptions{Bin: buildEdge(t), Extra: []string{"--pxsfu", "1", "--dev-shard=false"}})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Stop()
	rep, err := RunPxSFU(ctx, tg, PxSFUOptions{Players: []int{3}, Duration: 4 * time.Second, Warmup: time.Second,
		Layers: []int{0, 1, 2}, Self: os.Args[0], ChildEnv: []string{childEnv + "=1"}, Bare: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if len(rep.Runs) != 2 {
		t.Fatalf("%d runs", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		if r.Err != "" || r.Playing != 3 || r.Forwarded == 0 || r.Received == 0 || r.CPU <= 0 {
			t.Fatalf("%s: %+v", r.Kind, r)
		}
		// The players' count and the forwarder's counter are read one after
		// the other; a frame is a burst of up to 41 packets, so at three
		// players a window edge inside a burst moves the count by a frame.
		if r.Loss() > 0.30 {
			t.Fatalf("%s: loss %.1f%%", r.Kind, 100*r.Loss())
		}
	}
}
