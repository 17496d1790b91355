package shard

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/shard/shardsim"
)

func TestTwoShardsRouting(t *testing.T) {
	e := newTestEnv(t, nil,
		shardSpec{id: "east", instances: []string{"orun-grove", "orun-market"}, agents: 20},
		shardSpec{id: "west", instances: []string{"aye-shore"}, agents: 20})
	for inst, want := range map[string]string{"orun-grove": "east", "orun-market": "east", "aye-shore": "west"} {
		c := e.serve("websocket", false)
		if h := c.handshake(e.hello("ada", inst)); h.ShardId != want {
			t.Fatalf("%s landed on %s, want %s", inst, h.ShardId, want)
		}
		c.until("snapshot of "+inst, func(env *codec.ServerEnvelope) bool {
			return env.GetSnapshot().GetInstanceId() == inst || env.GetDelta().GetInstanceId() == inst
		})
	}
	c := e.serve("websocket", false)
	c.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: e.hello("ada", "nowhere")}})
	if got, _ := c.expectError(); codec.Code(got.Code) != codec.CodeInstanceNotFound {
		t.Fatalf("unknown instance: got %q", got.Code)
	}
	routes := e.g.Directory().Routes()
	if len(routes) != 3 || !routes[0].Healthy {
		t.Fatalf("routes %+v", routes)
	}
}

// sendActions sends actions [from, to] in one batch.
func (tc *tclient) sendActions(from, to uint64) {
	b := &codec.ActionBatch{}
	for id := from; id <= to; id++ {
		b.Actions = append(b.Actions, &codec.Action{ActionId: id, Kind: "step"})
	}
	tc.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Actions{Actions: b}})
}

func TestResumeOtherTransportExactlyOnce(t *testing.T) {
	e := newTestEnv(t, nil,
		shardSpec{id: "east", instances: []string{"orun-grove"}, agents: 20},
		shardSpec{id: "west", instances: []string{"aye-shore"}, agents: 20})
	c1 := e.serve("webtransport", true)
	h1 := c1.handshake(e.hello("ada", "aye-shore"))
	c1.sendActions(1, 10)
	c1.until("ack 10", func(env *codec.ServerEnvelope) bool { return env.GetActionAck().GetActionId() == 10 })
	// Actions 11..15 go out; the connection dies before (or after) the shard
	// acknowledges them: the client cannot know which.
	c1.sendActions(11, 15)
	_ = c1.c.Close(1006, "network lost")
	testwait.For(t, "old session gone", func() bool { return e.g.Sessions() == 0 })

	e.clock.Add(30 * time.Second) // well inside the 60 s retention
	start := time.Now()
	c2 := e.serve("websocket", false)
	h := e.hello("ada", "")
	h.ResumeToken = h1.ResumeToken
	h2 := c2.handshake(h)
	resumeTook := time.Since(start)
	if h2.SessionId != h1.SessionId || h2.ShardId != "west" || !h2.Resumed || h2.EntityId != h1.EntityId || h2.Transport != "websocket" {
		t.Fatalf("resume: got %+v, first %+v", h2, h1)
	}
	// The client resends everything it has not seen acknowledged.
	c2.sendActions(11, 20)
	c2.until("ack 20", func(env *codec.ServerEnvelope) bool { return env.GetActionAck().GetActionId() == 20 })
	got := e.shards["west"].Applied(h1.SessionId)
	want := make([]uint64, 20)
	for i := range want {
		want[i] = uint64(i + 1)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("applied %v, want each of 1..20 once, in order", got)
	}
	t.Logf("resume handshake took %s (budget 3 s)", resumeTook)

	// Past the retention, the same token is refused with a typed error.
	_ = c2.c.Close(1006, "gone again")
	testwait.For(t, "session gone", func() bool { return e.g.Sessions() == 0 })
	e.clock.Add(61 * time.Second)
	c3 := e.serve("webrtc", true)
	c3.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: h}})
	if got, _ := c3.expectError(); codec.Code(got.Code) != codec.CodeResumeExpired {
		t.Fatalf("after 61 s: got %q, want %q", got.Code, codec.CodeResumeExpired)
	}
}

func TestResumeRefusals(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 10})
	c1 := e.serve("websocket", false)
	h1 := c1.handshake(e.hello("ada", "orun-grove"))
	_ = c1.c.Close(1006, "")
	testwait.For(t, "session gone", func() bool { return e.g.Sessions() == 0 })

	expiredTok, _ := e.signer.IssueResume(auth.Resume{SessionID: h1.SessionId, ShardID: "s1", InstanceID: "orun-grove", Subject: "ada"}, -time.Minute)
	unknownTok, _ := e.signer.IssueResume(auth.Resume{SessionID: "s_nope", ShardID: "s1", InstanceID: "orun-grove", Subject: "ada"}, time.Minute)
	cases := []struct {
		name, sub, tok string
		want           codec.Code
	}{
		{"foreign user", "mallory", h1.ResumeToken, codec.CodeResumeInvalid},
		{"expired token", "ada", expiredTok, codec.CodeResumeExpired},
		{"unknown session", "ada", unknownTok, codec.CodeResumeExpired},
		{"garbage", "ada", "not.a.token", codec.CodeResumeInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := e.serve("websocket", false)
			c.t = t
			h := e.hello(tc.sub, "orun-grove")
			h.ResumeToken = tc.tok
			c.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: h}})
			if got, _ := c.expectError(); codec.Code(got.Code) != tc.want {
				t.Fatalf("got %q, want %q", got.Code, tc.want)
			}
			if e.g.Sessions() != 0 {
				t.Fatal("a refused resume created a session")
			}
		})
	}
}

func TestResumeTakesOverLiveConnection(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 10})
	c1 := e.serve("websocket", false)
	h1 := c1.handshake(e.hello("ada", "orun-grove"))
	c2 := e.serve("webtransport", true)
	h := e.hello("ada", "orun-grove")
	h.ResumeToken = h1.ResumeToken
	if h2 := c2.handshake(h); h2.SessionId != h1.SessionId {
		t.Fatalf("takeover: %s != %s", h2.SessionId, h1.SessionId)
	}
	<-c1.c.done
	if e.g.Sessions() != 1 {
		t.Fatalf("sessions %d", e.g.Sessions())
	}
}

func TestShardLossAndReconnect(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.ReconnectMax = 200 * time.Millisecond },
		shardSpec{id: "east", instances: []string{"orun-grove"}, agents: 20},
		shardSpec{id: "west", instances: []string{"aye-shore"}, agents: 20})
	victim := e.serve("webtransport", true)
	vh := victim.handshake(e.hello("ada", "orun-grove"))
	bystander := e.serve("websocket", false)
	bystander.handshake(e.hello("bea", "aye-shore"))

	addr := e.shards["east"].Addr()
	start := time.Now()
	_ = e.shards["east"].Close()
	got, closeCode := victim.expectError()
	took := time.Since(start)
	if codec.Code(got.Code) != codec.CodeShardUnavailable || got.ResumeToken == "" || closeCode != codec.CodeShardUnavailable.CloseCode() {
		t.Fatalf("got %+v close %d", got, closeCode)
	}
	t.Logf("shard loss reached the client in %s", took)
	// One dead shard of two: its link is down, the edge stays ready for the
	// instances it can still serve.
	testwait.For(t, "east link down", func() bool { return !e.g.LinkUp("east") })
	if !e.g.Ready() {
		t.Fatal("edge went unready with one of its two shards still up")
	}

	// The other shard's session is untouched.
	bystander.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: 9}}})
	bystander.until("pong", func(env *codec.ServerEnvelope) bool { return env.GetPong().GetClientTimeMs() == 9 })
	seq := bystander.lastSeq
	bystander.until("new snapshot", func(*codec.ServerEnvelope) bool { return bystander.lastSeq > seq+2 })

	// The shard returns on the same address; the link reconnects and the
	// victim resumes its session with the token from the Error.
	s, err := shardsim.Start(context.Background(), shardsim.Config{Listen: addr, ShardID: "east", Instances: []string{"orun-grove"}, Agents: 20})
	if err != nil {
		t.Fatal(err)
	}
	e.shards["east"] = s
	testwait.For(t, "link back up", func() bool { return e.g.LinkUp("east") && e.g.Ready() })
	c := e.serve("websocket", false)
	h := e.hello("ada", "")
	h.ResumeToken = got.ResumeToken
	if rh := c.handshake(h); rh.SessionId != vh.SessionId || rh.ShardId != "east" {
		t.Fatalf("resume after shard return: %+v", rh)
	}
}
