package shard

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quic-go/quic-go"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/shard/internal/linkio"
	"github.com/oshun/egbe-edge/shard/shardsim"
)

type capAdmitter struct {
	mu        sync.Mutex
	live      map[string]int
	released  atomic.Int32
	sawResume atomic.Bool
}

func (a *capAdmitter) Admit(_ context.Context, r AdmitRequest) (func(), error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.Resume {
		a.sawResume.Store(true)
	}
	if a.live[r.Access.Subject] >= 1 {
		return nil, codec.Errorf(codec.CodeUserCap, "one session per user")
	}
	a.live[r.Access.Subject]++
	return func() {
		a.mu.Lock()
		a.live[r.Access.Subject]--
		a.mu.Unlock()
		a.released.Add(1)
	}, nil
}

type voiceRec struct {
	mu       sync.Mutex
	presence int
	controls []*codec.VoiceControl
	closed   []string
}

func (v *voiceRec) OnPresence(string, int32, int32, int32) { v.mu.Lock(); v.presence++; v.mu.Unlock() }
func (v *voiceRec) OnControl(_ string, c *codec.VoiceControl) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.controls = append(v.controls, c)
	return nil
}
func (v *voiceRec) OnClose(id string) { v.mu.Lock(); v.closed = append(v.closed, id); v.mu.Unlock() }

// newGatewayFor builds a second gateway on e's shards with other deps.
func (e *testEnv) newGateway(t *testing.T, d Deps) *Gateway {
	d.Signer, d.Now = e.signer, e.clock.Now
	g, err := NewGateway(e.g.cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); _ = g.Run(e.ctx) }()
	testwait.For(t, "gateway linked", g.Ready)
	return g
}

func (e *testEnv) serveOn(g *Gateway, transport string, unreliable bool) *tclient {
	c := newMemConn(transport, unreliable)
	e.wg.Add(1)
	go func() { defer e.wg.Done(); g.Serve(e.ctx, c) }()
	return &tclient{t: e.t, c: c, states: map[uint64][]codec.Entity{}}
}

func TestAdmissionAndVoiceSeams(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 10})
	adm := &capAdmitter{live: map[string]int{}}
	voice := &voiceRec{}
	g := e.newGateway(t, Deps{Admit: adm, Voice: voice})

	c1 := e.serveOn(g, "webrtc", true)
	h1 := c1.handshake(e.hello("ada", "orun-grove"))
	info, ok := g.Session(h1.SessionId)
	if !ok || info.Subject != "ada" || info.ShardID != "s1" || info.EntityID != h1.EntityId || info.Transport != "webrtc" {
		t.Fatalf("session info %+v %v", info, ok)
	}
	// Admission refusals carry their own code.
	c2 := e.serveOn(g, "websocket", false)
	c2.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: e.hello("ada", "orun-grove")}})
	if got, _ := c2.expectError(); codec.Code(got.Code) != codec.CodeUserCap {
		t.Fatalf("got %q", got.Code)
	}
	// Voice: presence reaches the hook, controls too; events go out.
	c1.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Presence{Presence: &codec.PresencePacket{Position: &codec.Vec3{XMm: 5}}}})
	c1.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Voice{Voice: &codec.VoiceControl{Op: &codec.VoiceControl_MuteEntityId{MuteEntityId: 7}}}})
	testwait.For(t, "voice hooks", func() bool {
		voice.mu.Lock()
		defer voice.mu.Unlock()
		return voice.presence > 0 && len(voice.controls) == 1
	})
	if !g.SendVoiceEvent(h1.SessionId, &codec.VoiceEvent{SlotEntityIds: []uint32{7}}) {
		t.Fatal("voice event refused")
	}
	c1.until("voice event", func(env *codec.ServerEnvelope) bool { return env.GetVoice() != nil })
	if g.SendVoiceEvent("s_nope", &codec.VoiceEvent{}) {
		t.Fatal("voice event to an unknown session accepted")
	}
	// A bad message mid-session is answered and counted; the session lives on.
	c1.sendRaw([]byte{0xff, 0xff})
	c1.until("bad_message", func(env *codec.ServerEnvelope) bool { return env.GetError().GetCode() == string(codec.CodeBadMessage) })
	c1.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: 3}}})
	c1.until("pong", func(env *codec.ServerEnvelope) bool { return env.GetPong().GetClientTimeMs() == 3 })

	// Session end releases admission and tells the SFU; a resume is flagged.
	_ = c1.c.Close(1006, "")
	testwait.For(t, "released", func() bool { return adm.released.Load() == 1 })
	voice.mu.Lock()
	closed := append([]string(nil), voice.closed...)
	voice.mu.Unlock()
	if len(closed) != 1 || closed[0] != h1.SessionId {
		t.Fatalf("voice closed %v", closed)
	}
	c3 := e.serveOn(g, "websocket", false)
	h := e.hello("ada", "")
	h.ResumeToken = h1.ResumeToken
	c3.handshake(h)
	if !adm.sawResume.Load() {
		t.Fatal("admission did not see the resume")
	}
}

// TestHeartbeatLoss: a shard that stops answering pings (but whose QUIC
// stack is alive) is declared down and redialled.
func TestHeartbeatLoss(t *testing.T) {
	tlsConf, err := linkio.SelfSigned(time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", tlsConf, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var accepted atomic.Int32
	wg.Add(1)
	go func() { // a mute shard: says hello, then never pongs
		defer wg.Done()
		var cwg sync.WaitGroup
		defer cwg.Wait()
		for {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			accepted.Add(1)
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				defer conn.CloseWithError(0, "")
				st, err := conn.AcceptStream(ctx)
				if err != nil {
					return
				}
				r := linkio.NewReader(st)
				var f codec.LinkEdgeFrame
				if r.ReadEdge(&f) != nil {
					return
				}
				b, _ := linkio.Frame(&codec.LinkShardFrame{Msg: &codec.LinkShardFrame_Hello{Hello: &codec.LinkShardHello{Version: linkio.Version, ShardId: "mute", Instances: []string{"quiet"}}}})
				_, _ = st.Write(b)
				for r.ReadEdge(&f) == nil {
				}
			}()
		}
	}()
	defer func() { cancel(); _ = ln.Close(); wg.Wait() }()

	signer, _ := auth.New([]byte("0123456789abcdef0123456789abcdef"), nil)
	cfg := DefaultConfig()
	cfg.Shards = map[string]string{"mute": ln.Addr().String()}
	cfg.HeartbeatInterval, cfg.HeartbeatTimeout = 20*time.Millisecond, 100*time.Millisecond
	cfg.ReconnectMin, cfg.ReconnectMax = 10*time.Millisecond, 50*time.Millisecond
	g, err := NewGateway(cfg, Deps{Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	gctx, gcancel := context.WithCancel(context.Background())
	var gwg sync.WaitGroup
	gwg.Add(1)
	go func() { defer gwg.Done(); _ = g.Run(gctx) }()
	defer func() { gcancel(); gwg.Wait() }()
	testwait.For(t, "link up", func() bool { return g.LinkUp("mute") })
	if r, err := g.Directory().RouteFor("quiet"); err != nil || r.ShardID != "mute" {
		t.Fatalf("registration: %+v %v", r, err)
	}
	// Both ends count the second connection, each when its side of the
	// handshake completes (not at the same instant).
	testwait.For(t, "link declared down and redialled", func() bool {
		return accepted.Load() >= 2 && testutil.ToFloat64(g.m.linkConnects.WithLabelValues("mute", "ok")) >= 2
	})
}

func TestMetricsRegistered(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 10})
	c := e.serve("websocket", false)
	c.handshake(e.hello("ada", "orun-grove"))
	c.until("snapshot", func(env *codec.ServerEnvelope) bool { return env.GetSnapshot() != nil })
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range []string{"egbe_shard_sessions", "egbe_shard_handshakes_total", "egbe_shard_link_up",
		"egbe_shard_link_connects_total", "egbe_shard_snapshots_projected_total", "egbe_shard_replication_bytes_total"} {
		if !have[name] {
			t.Errorf("metric %s missing", name)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []func(*Config){
		func(c *Config) { c.HandshakeTimeout = 0 },
		func(c *Config) { c.PresenceHz = 0 },
		func(c *Config) { c.Instances["x"] = "nope" },
		func(c *Config) { c.Shards["s"] = "" },
		func(c *Config) { c.ReconnectMin = time.Hour },
		func(c *Config) { c.ControlQueue = 1 },
	}
	for i, mut := range bad {
		c := DefaultConfig()
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("case %d: invalid config accepted", i)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLinkToken(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sim, err := shardsim.Start(ctx, shardsim.Config{Listen: "127.0.0.1:0", ShardID: "locked", Instances: []string{"vault"}, Agents: 5, LinkToken: "sesame"})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	signer, _ := auth.New([]byte("0123456789abcdef0123456789abcdef"), nil)
	start := func(token string) (*Gateway, func()) {
		cfg := DefaultConfig()
		cfg.Shards = map[string]string{"locked": sim.Addr()}
		cfg.LinkToken = token
		cfg.ReconnectMin, cfg.ReconnectMax = 10*time.Millisecond, 20*time.Millisecond
		g, err := NewGateway(cfg, Deps{Signer: signer})
		if err != nil {
			t.Fatal(err)
		}
		gctx, gcancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = g.Run(gctx) }()
		return g, func() { gcancel(); wg.Wait() }
	}
	bad, stopBad := start("guess")
	good, stopGood := start("sesame")
	defer stopGood()
	testwait.For(t, "the keyed link up", func() bool { return good.LinkUp("locked") })
	testwait.For(t, "the unkeyed edge retried", func() bool {
		return testutil.ToFloat64(bad.m.linkConnects.WithLabelValues("locked", "ok")) >= 3
	})
	if bad.LinkUp("locked") {
		t.Fatal("a link with the wrong token came up")
	}
	stopBad()
}

func TestSquadRelay(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 5})
	a := e.serve("webtransport", true)
	ha := a.handshake(e.hello("ada", "orun-grove"))
	b := e.serve("websocket", false)
	b.handshake(e.hello("bea", "orun-grove"))
	for i := uint64(1); i <= 3; i++ {
		a.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Squad{Squad: &codec.SquadCommsMessage{SquadId: "red", Seq: i, Text: "hi", FromSessionId: "forged"}}})
	}
	var got []uint64
	b.until("3 squad messages", func(env *codec.ServerEnvelope) bool {
		if sq := env.GetSquad(); sq != nil {
			if sq.FromSessionId != ha.SessionId {
				t.Fatalf("from %q, want the sender's session", sq.FromSessionId)
			}
			got = append(got, sq.Seq)
		}
		return len(got) == 3
	})
	if got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Fatalf("order %v", got)
	}
}
