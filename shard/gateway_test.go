package shard

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/oshun/egbe-edge/codec"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(childShardEnv); addr != "" {
		os.Exit(runChildShard(addr))
	}
	goleak.VerifyTestMain(m)
}

func TestSessionEndToEnd(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 200})
	tc := e.serve("webtransport", true)
	h := tc.handshake(e.hello("ada", "orun-grove"))
	if h.SessionId == "" || h.ResumeToken == "" || h.ShardId != "s1" || h.Acceptance != codec.Acceptance_ACCEPTED ||
		h.PresenceHz != 20 || h.EntityId == 0 || h.Transport != "webtransport" || h.Resumed {
		t.Fatalf("bad hello %+v", h)
	}
	tc.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Presence{Presence: &codec.PresencePacket{Seq: 1, Position: &codec.Vec3{XMm: 1000}}}})
	// Snapshots arrive (full first, then deltas against acked state).
	deltas := 0
	tc.until("deltas", func(env *codec.ServerEnvelope) bool {
		if env.GetDelta() != nil {
			deltas++
		}
		return deltas >= 3
	})
	// Actions are applied in order and acknowledged.
	tc.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Actions{Actions: &codec.ActionBatch{Actions: []*codec.Action{{ActionId: 1, Kind: "wave"}, {ActionId: 2, Kind: "sit"}}}}})
	tc.until("ack 2", func(env *codec.ServerEnvelope) bool { return env.GetActionAck().GetActionId() == 2 })
	tc.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: 42}}})
	pong := tc.until("pong", func(env *codec.ServerEnvelope) bool { return env.GetPong() != nil }).GetPong()
	if pong.ClientTimeMs != 42 || pong.ServerTimeMs == 0 {
		t.Fatalf("bad pong %+v", pong)
	}
	if got := e.shards["s1"].Applied(h.SessionId); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("applied %v", got)
	}
	_ = tc.c.Close(1000, "bye")
	waitFor(t, "session gone", func() bool { return e.g.Sessions() == 0 })
}

// TestOversizeSnapshotsGoReliable: a snapshot too big for one datagram
// reaches a client with an unreliable lane on its reliable lane; nothing
// over the limit is ever sent as a datagram.
func TestOversizeSnapshotsGoReliable(t *testing.T) {
	const limit = 300
	e := newTestEnv(t, func(c *Config) { c.MaxDatagramBytes = limit },
		shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 200})
	c := e.serve("webtransport", true)
	c.handshake(e.hello("ada", "orun-grove"))
	reliableFull, datagrams := 0, 0
	for reliableFull == 0 || datagrams < 3 {
		select {
		case b := <-c.c.dgram:
			if len(b) > limit {
				t.Fatalf("%d-byte datagram over the %d limit", len(b), limit)
			}
			datagrams++
			c.c.dgram <- b // let next() decode and apply it
		default:
		}
		env, unrel := c.next()
		c.apply(env)
		if env.GetSnapshot() != nil && !unrel {
			reliableFull++
		}
		if datagrams == 0 && reliableFull > 0 && e.g.m.oversizeReliable != nil {
			// Deltas of a 200-agent window at 20 Hz are small: keep reading.
		}
	}
}
