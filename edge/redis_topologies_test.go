package edge

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/state/redisstate"
)

// TestRedisTopologies: an edge whose --redis-url names a Redis Cluster's
// seeds (redis+cluster://), and one whose URL names a Sentinel and its
// master (redis+sentinel://), each complete a realtime session: hello, an
// accepted ServerHello (the handshake takes its concurrency leases in that
// Redis), and a ping on the session. The session's leases and shard pin,
// and the waiting room's meta, are then found in the Redis behind the URL.
func TestRedisTopologies(t *testing.T) {
	seeds := redistest.StartCluster(t)
	sentinel, master, _ := redistest.StartSentinel(t)
	for _, tc := range []struct {
		name, url string
		direct    func() redis.UniversalClient // reads the data behind the URL
	}{
		{"cluster", "redis+cluster://" + strings.Join(seeds, ","), func() redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds})
		}},
		{"sentinel", "redis+sentinel://" + sentinel + "/" + master + "/0", func() redis.UniversalClient {
			return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: []string{sentinel}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			te := startEdge(t, func(c *Config) { c.RedisURL = tc.url })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c := te.dial(t, "websocket", false)
			h, err := c.Hello(ctx, helloFor(te.devToken(t, "topology-"+tc.name)))
			if err != nil {
				t.Fatal(err)
			}
			if h.GetSessionId() == "" || h.GetAcceptance() != codec.Acceptance_ACCEPTED {
				t.Fatalf("hello: %v", h)
			}
			pingPong(t, ctx, c, 1)

			rdb := tc.direct()
			defer rdb.Close()
			var (
				mu   sync.Mutex
				keys []string
			)
			scan := func(ctx context.Context, m *redis.Client) error { // per master, concurrently
				ks, err := m.Keys(ctx, "*").Result()
				mu.Lock()
				keys = append(keys, ks...)
				mu.Unlock()
				return err
			}
			if cc, ok := rdb.(*redis.ClusterClient); ok {
				err = cc.ForEachMaster(ctx, scan)
			} else {
				err = scan(ctx, rdb.(*redis.Client))
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"{egbel}:rt:user:topology-" + tc.name, "egbe:pin:" + h.GetSessionId(), "{egbeq}:meta"} {
				if !slices.Contains(keys, want) {
					t.Errorf("no %s behind %s; keys %q", want, tc.url, keys)
				}
			}
		})
	}
}

// TestRedisURLRefused: a --redis-url the edge cannot use stops New with a
// configuration error that names the URL without its password.
func TestRedisURLRefused(t *testing.T) {
	for _, url := range []string{
		"redis+sentinel://app:Sekr1t-pw@127.0.0.1:26379", // no master name
		"redis+cluster://app:Sekr1t-pw@127.0.0.1:7000/2", // a cluster has no database
		"sentinel://app:Sekr1t-pw@127.0.0.1:26379/mm",    // unknown scheme
	} {
		cfg := testConfig()
		cfg.RedisURL = url
		e, err := New(cfg, nil)
		if err == nil {
			e.closeAll()
			t.Fatalf("%s: accepted", url)
		}
		if !errors.Is(err, ErrConfig) || !errors.Is(err, redisstate.ErrBadURL) || strings.Contains(err.Error(), "Sekr1t") ||
			!strings.Contains(err.Error(), "app:xxxxx@") {
			t.Fatalf("%s: %v, want ErrConfig and ErrBadURL naming the redacted URL", url, err)
		}
	}
}
