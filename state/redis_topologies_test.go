package state

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
)

// TestRedisTopologies runs the Redis contracts (queue, leases, budgets, KV)
// and the fleet board and voice-room table on a real three-master Redis Cluster and on a master
// found through a real Sentinel, each opened from its URL by OpenRedis. On
// the Cluster every multi-key script and transaction must stay in one hash
// slot, or Redis refuses it (CROSSSLOT, or a script touching a key of
// another slot) and the contract fails.
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
			for _, k := range []string{queueTag + "meta", leaseTag + "x", seatKey("x", "SFU"), fleetIndex, budgetSpace + "x", "test:kv:k"} {
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
		open := func(t *testing.T) redis.UniversalClient {
			t.Helper()
			c, err := OpenRedis(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
		b := redisBackend(tc.name, open)
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, open(t))
			t.Run("queue", func(t *testing.T) { queueContract(t, b) })
			t.Run("leases", func(t *testing.T) { leasesContract(t, b) })
			t.Run("budgets", func(t *testing.T) { budgetsContract(t, b) })
			t.Run("seats", func(t *testing.T) { seatsContract(t, b) })
			t.Run("kv", func(t *testing.T) { kvContract(t, NewRedisKV(open(t), "test:kv:")) })
			t.Run("fleetboard", func(t *testing.T) {
				ctx := context.Background()
				fb := NewRedisFleetBoard(open(t))
				for _, id := range []string{"edge-a", "edge-b", "edge-c"} {
					if err := fb.Publish(ctx, id, []byte(id+"!"), time.Minute); err != nil {
						t.Fatal(err)
					}
				}
				got, err := fb.Snapshots(ctx)
				if err != nil || len(got) != 3 || string(got["edge-b"]) != "edge-b!" {
					t.Fatalf("snapshots %q %v", got, err)
				}
			})
			t.Run("voicerooms", func(t *testing.T) {
				ctx := context.Background()
				c := open(t)
				if err := flushAll(ctx, c); err != nil {
					t.Fatal(err)
				}
				a := NewRedisVoiceRooms(c, "edge-a", "http://a", VoiceRoomTimes{})
				z := NewRedisVoiceRooms(c, "edge-z", "http://z", VoiceRoomTimes{})
				if _, mine, err := a.Claim(ctx, "grove"); !mine || err != nil {
					t.Fatalf("first claim: %v %v", mine, err)
				}
				if h, mine, err := z.Claim(ctx, "grove"); mine || err != nil || h.EdgeID != "edge-a" {
					t.Fatalf("second edge: %+v %v %v", h, mine, err)
				}
				if lost, err := z.Heartbeat(ctx, []string{"shore", "grove"}); err != nil || len(lost) != 1 || lost[0] != "grove" {
					t.Fatalf("heartbeat over two rooms: %q %v", lost, err)
				}
				if err := a.Release(ctx, "grove"); err != nil {
					t.Fatal(err)
				}
				if _, mine, err := z.Claim(ctx, "grove"); !mine || err != nil {
					t.Fatalf("claim after release: %v %v", mine, err)
				}
			})
		})
	}
}
