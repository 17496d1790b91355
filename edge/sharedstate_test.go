package edge

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/opsboard"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// TestFleetMembershipOnStop: two edges on one Redis are members of one
// fleet, and the operator page's fleet view (which shows an edge while it
// is a live member) counts both. A clean stop leaves the membership: right
// after B has stopped, A's fleet view counts one edge, without waiting for
// B's membership to lapse (3 s after its last beat).
func TestFleetMembershipOnStop(t *testing.T) {
	rds := redistest.StartServer(t)
	url := "redis://" + rds.Addr + "/0"
	a := startEdge(t, func(c *Config) { c.RedisURL = url })
	b := startEdge(t, func(c *Config) { c.RedisURL = url })
	edges := func() int {
		t.Helper()
		resp, err := http.Get(a.adminURL("/ops/metrics.json?scope=fleet"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var snap opsboard.Snapshot
		if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil || snap.Fleet == nil {
			t.Fatalf("fleet view: %d %v %+v", resp.StatusCode, err, snap)
		}
		return snap.Fleet.Edges
	}
	testwait.Within(t, 10*time.Second, "both edges in A's fleet view", func() bool { return edges() == 2 })
	b.stop(t)
	if n := edges(); n != 1 {
		t.Fatalf("A's fleet view right after B stopped counts %d edges, want 1 (B left the membership)", n)
	}
}
