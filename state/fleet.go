package state

import (
	"context"
	"time"
)

// FleetBoard is where every edge of a fleet publishes a small snapshot of
// its own figures (for the operator dashboard), and where any edge reads
// the whole fleet's. A snapshot shows while its edge is a live member of
// the fleet (members.go) and has published within the snapshot's ttl.
type FleetBoard interface {
	Publish(ctx context.Context, edgeID string, snapshot []byte, ttl time.Duration) error
	// Snapshots returns the live snapshots by edge id.
	Snapshots(ctx context.Context) (map[string][]byte, error)
}
