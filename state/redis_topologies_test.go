package state

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
)

// TestRedisTopologies runs the Redis contracts (queue, leases, budgets, KV,
// streamer registry, inbox, membership) and the fleet board and voice-room
// table on a real three-master Redis Cluster and on a master found through
// a real Sentinel, each opened from its URL by OpenRedis. On
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
			for _, k := range []string{queueTag + "meta", leaseTag + "x", edgesAlive, pxIDsKey, budgetSpace + "x", "test:kv:k"} {
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
		open := func(t *testing.T) *Redis {
			t.Helper()
			r, err := OpenRedis(tc.url, RedisOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close() })
			return r
		}
		b := redisBackend(tc.name, open)
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, open(t).Client())
			t.Run("queue", func(t *testing.T) { queueContract(t, b) })
			t.Run("leases", func(t *testing.T) { leasesContract(t, b) })
			t.Run("budgets", func(t *testing.T) { budgetsContract(t, b) })
			t.Run("kv", func(t *testing.T) { kvContract(t, NewRedisKV(open(t), "test:kv:")) })
			t.Run("streamers", func(t *testing.T) { streamersContract(t, b) })
			t.Run("inbox", func(t *testing.T) { inboxContract(t, b) })
			t.Run("members", func(t *testing.T) { membersContract(t, b) })
			t.Run("scripts", func(t *testing.T) { scriptReload(t, open(t)) })
			t.Run("fleetboard", func(t *testing.T) {
				ctx := context.Background()
				r := open(t)
				fb := NewRedisFleetBoard(r)
				for _, id := range []string{"edge-a", "edge-b", "edge-c"} {
					m, err := NewRedisMembers(r, Member{ID: id}, time.Minute)
					if err != nil {
						t.Fatal(err)
					}
					if err := m.Beat(ctx); err != nil {
						t.Fatal(err)
					}
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
				r := open(t)
				if err := flushAll(ctx, r.Client()); err != nil {
					t.Fatal(err)
				}
				a := NewRedisVoiceRooms(mustMembers(t, r, Member{ID: "edge-a", URL: "http://a"}), 0)
				z := NewRedisVoiceRooms(mustMembers(t, r, Member{ID: "edge-z", URL: "http://z"}), 0)
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
