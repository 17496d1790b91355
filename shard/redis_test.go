package shard

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/state/redisstate"
)

// TestResumeOnAnotherEdgeOverRedis: two edges share pins through a real
// Redis; a session started on edge A resumes on edge B (its edge died or
// drained) with the same id and shard, and its acknowledged actions are not
// applied twice.
func TestResumeOnAnotherEdgeOverRedis(t *testing.T) {
	addr, _ := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	conn := redisstate.New(rdb, redisstate.Options{})
	pins := func() PinStore { return NewStatePins(redisstate.NewKV(conn, redisstate.KVPins), time.Minute, nil) }

	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 10})
	a := e.newGateway(t, Deps{Pins: pins()})
	b := e.newGateway(t, Deps{Pins: pins()})

	c1 := e.serveOn(a, "webtransport", true)
	h1 := c1.handshake(e.hello("ada", "orun-grove"))
	c1.sendActions(1, 3)
	c1.until("ack 3", func(env *codec.ServerEnvelope) bool { return env.GetActionAck().GetActionId() == 3 })
	_ = c1.c.Close(1006, "edge A lost")
	testwait.For(t, "session gone from A", func() bool { return a.Sessions() == 0 })

	c2 := e.serveOn(b, "websocket", false)
	h := e.hello("ada", "")
	h.ResumeToken = h1.ResumeToken
	if h2 := c2.handshake(h); h2.SessionId != h1.SessionId || h2.ShardId != "s1" || !h2.Resumed {
		t.Fatalf("resume on edge B: %+v", h2)
	}
	c2.sendActions(2, 4)
	c2.until("ack 4", func(env *codec.ServerEnvelope) bool { return env.GetActionAck().GetActionId() == 4 })
	if got := e.shards["s1"].Applied(h1.SessionId); len(got) != 4 || got[3] != 4 {
		t.Fatalf("applied %v", got)
	}
}
