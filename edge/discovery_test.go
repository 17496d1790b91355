package edge

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/shard/shardsim"
)

// TestDiscoverShardAcrossFleet: two edges share one Redis; only edge A is
// configured with the shard (--shard), edge B has none. A announces the
// shard in the fleet's directory, B discovers it and links to it, and a
// client on B completes a realtime session for the shard's instance.
func TestDiscoverShardAcrossFleet(t *testing.T) {
	// An edge with --redis-url, no --shard and no dev shard is a valid
	// configuration: it takes its shards from the fleet.
	cfg, err := Load([]string{"--redis-url", "redis://127.0.0.1:1/0", "--dev-shard=false"}, nil, io.Discard)
	if err != nil || len(cfg.Shards) != 0 || cfg.DevShard {
		t.Fatalf("redis-only config: %+v %v", cfg.Shards, err)
	}

	rds := redistest.StartServer(t)
	sim, err := shardsim.Start(context.Background(), shardsim.Config{Listen: "127.0.0.1:0", ShardID: "fleet-s1", Instances: []string{"orun-grove"}, Agents: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	secret := strings.Repeat("discovery-secret", 3)
	fleet := func(shards map[string]string) func(*Config) {
		return func(c *Config) {
			c.RedisURL = "redis://" + rds.Addr + "/0"
			c.JWTSecret = secret
			c.DevShard = false
			c.Shards = shards
			if len(shards) > 0 {
				c.Instances = map[string]string{"orun-grove": "fleet-s1"}
			}
		}
	}
	a := startEdge(t, fleet(map[string]string{"fleet-s1": sim.Addr()}))
	b := startEdge(t, fleet(nil))
	testwait.Within(t, 20*time.Second, "edge A's link to the shard", func() bool { return a.rt.gw.LinkUp("fleet-s1") })
	testwait.Within(t, 20*time.Second, "edge B to discover the shard and link to it", func() bool { return b.rt.gw.LinkUp("fleet-s1") })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := b.dial(t, "websocket", false)
	h, err := c.Hello(ctx, helloFor(b.devToken(t, "fleet-player")))
	if err != nil {
		t.Fatal(err)
	}
	if h.GetShardId() != "fleet-s1" || h.GetAcceptance() != codec.Acceptance_ACCEPTED {
		t.Fatalf("hello on edge B: %v", h)
	}
	for world := 0; world < 2; {
		env, err := c.Recv(ctx)
		if err != nil {
			t.Fatalf("after %d world messages: %v", world, err)
		}
		switch m := env.Msg.(type) {
		case *codec.ServerEnvelope_Snapshot:
			world++
			ack(t, c, m.Snapshot.GetSequence())
		case *codec.ServerEnvelope_Delta:
			world++
			ack(t, c, m.Delta.GetSequence())
		case *codec.ServerEnvelope_Error:
			t.Fatalf("error: %v", m.Error)
		}
	}
	if got, links := sim.Sessions(), sim.Links(); got < 1 || links != 2 {
		t.Fatalf("the shard holds %d sessions on %d links, want >= 1 on 2 (one per edge)", got, links)
	}
}
