package edge

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/shard/shardsim"
)

// lockedBuffer collects a logger's output across goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestShardLinkToken: EGBE_LINK_TOKEN reaches the shard link, so a shard
// that checks tokens (egbe-shard --token) serves an edge that presents
// it and refuses one that does not.
func TestShardLinkToken(t *testing.T) {
	const token = "Lk7pQ2vX9mR4tW8zN3cB6hJ1"
	logs := &lockedBuffer{}
	sim, err := shardsim.Start(context.Background(), shardsim.Config{Listen: "127.0.0.1:0", ShardID: "ref", Instances: []string{"orun-grove"},
		Agents: 10, Seed: 1, LinkToken: token, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })

	// The token comes from the environment, as the binary reads it.
	loaded, err := Load([]string{"--shard", "ref=" + sim.Addr(), "--instance", "orun-grove=ref", "--dev-shard=false"},
		[]string{"EGBE_LINK_TOKEN=" + token}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	withToken := startEdge(t, func(c *Config) {
		c.LinkToken, c.Shards, c.Instances, c.DevShard = loaded.LinkToken, loaded.Shards, loaded.Instances, loaded.DevShard
	})
	testwait.Within(t, 20*time.Second, "the link with the token", func() bool { return withToken.rt.gw.LinkUp("ref") })
	c := withToken.dial(t, "websocket", false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := c.Hello(ctx, helloFor(withToken.devToken(t, "linked")))
	if err != nil || h.GetShardId() != "ref" {
		t.Fatalf("a session through the authenticated link: %v %v", h, err)
	}

	without := startEdgeUnready(t, func(c *Config) {
		c.Shards, c.Instances, c.DevShard = loaded.Shards, loaded.Instances, false
	})
	testwait.Within(t, 20*time.Second, "the shard to refuse the edge without the token", func() bool {
		return strings.Contains(logs.String(), "link refused: bad token") && strings.Contains(logs.String(), without.edgeID)
	})
	if without.rt.gw.LinkUp("ref") {
		t.Fatal("the link without the token is up")
	}
	if !withToken.rt.gw.LinkUp("ref") {
		t.Fatal("the refusal of another edge dropped the authenticated link")
	}
}
