package redisstate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/state"
)

// TestRedisTopologies runs every store's contract (redisContracts) and the
// fleet board on a real three-master Redis Cluster and on a master found
// through a real Sentinel, each opened from its URL by Open. On the
// Cluster every multi-key script and transaction must stay in one hash
// slot (keys.go), or Redis refuses it (CROSSSLOT, or a script touching a
// key of another slot) and the contract fails.
func TestRedisTopologies(t *testing.T) {
	seeds := redistest.StartCluster(t)
	sentinel, master, _ := redistest.StartSentinel(t)
	for _, tc := range []struct {
		name, url string
		check     func(t *testing.T, c redis.UniversalClient)
	}{
		{"cluster", "redis+cluster://" + strings.Join(seeds, ",") + "/?max_redirects=3", func(t *testing.T, c redis.UniversalClient) {
			cc, ok := c.(*redis.ClusterClient)
			if !ok {
				t.Fatalf("client %T, want a cluster client", c)
			}
			// The tags of the different stores land on different masters,
			// so the suite really crosses nodes.
			nodes := map[string]bool{}
			for _, k := range []string{queueTag + "meta", leaseTag + "x", seatKey("x", "SFU"), edgesAlive, pxIDsKey, shardsIndex, budgetSpace + "x", "test:kv:k"} {
				m, err := cc.MasterForKey(context.Background(), k)
				if err != nil {
					t.Fatal(err)
				}
				nodes[m.Options().Addr] = true
			}
			if len(nodes) < 2 {
				t.Fatalf("every store on one master (%v): the cluster run proves nothing", nodes)
			}
		}},
		{"sentinel", "redis+sentinel://" + sentinel + "/" + master + "/0", func(t *testing.T, c redis.UniversalClient) {
			if _, ok := c.(*redis.Client); !ok {
				t.Fatalf("client %T, want a failover client", c)
			}
		}},
	} {
		open := func(t *testing.T) *Conn {
			t.Helper()
			r, err := Open(tc.url, Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close() })
			return r
		}
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, open(t).Client())
			redisContracts(t, open)
			t.Run("fleetboard", func(t *testing.T) {
				ctx := context.Background()
				r := open(t)
				fb := NewFleetBoard(r)
				for _, id := range []string{"edge-a", "edge-b", "edge-c"} {
					if err := mustMembers(t, r, state.Member{ID: id}).Beat(ctx); err != nil {
						t.Fatal(err)
					}
					if err := fb.Publish(ctx, id, []byte(id+"!"), time.Minute); err != nil {
						t.Fatal(err)
					}
				}
				got, err := fb.Snapshots(ctx)
				if err != nil || len(got) < 3 || string(got["edge-b"]) != "edge-b!" {
					t.Fatalf("snapshots %q %v", got, err)
				}
			})
		})
	}
}
