package shard

import (
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
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
	testwait.For(t, "session gone", func() bool { return e.g.Sessions() == 0 })
}

// TestSnapshotLaneBySize: snapshots go on the unreliable lane when they fit
// a datagram, and on the reliable lane when they do not.
func TestSnapshotLaneBySize(t *testing.T) {
	for _, tc := range []struct {
		name          string
		limit, agents int
		wantUnrel     bool
	}{
		{"fits a datagram", 1100, 3, true},
		{"too big for one", 100, 50, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, func(c *Config) { c.MaxDatagramBytes = tc.limit },
				shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: tc.agents})
			c := e.serve("webtransport", true)
			c.t = t
			c.handshake(e.hello("ada", "orun-grove"))
			for n := 0; n < 5; {
				env, unrel := c.next()
				c.apply(env)
				if env.GetSnapshot() == nil && env.GetDelta() == nil {
					continue
				}
				n++
				if unrel != tc.wantUnrel {
					t.Fatalf("state on unreliable=%v, want %v", unrel, tc.wantUnrel)
				}
			}
			if got := testutil.ToFloat64(e.g.m.oversizeReliable); (got > 0) == tc.wantUnrel {
				t.Fatalf("oversize counter %v", got)
			}
		})
	}
}
