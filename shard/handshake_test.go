package shard

import (
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
)

func TestHandshakeRefusals(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.HandshakeTimeout = 300 * time.Millisecond },
		shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 10})
	other, err := auth.New([]byte("another-secret-another-secret-xx"), nil)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := other.IssueAccess(auth.Access{Subject: "ada"}, time.Hour)
	expired, _ := e.signer.IssueAccess(auth.Access{Subject: "ada"}, -time.Minute)
	pxTok, _ := e.signer.IssuePxSession(auth.PxSession{SessionID: "x", StreamerID: "st", POP: "p", Codec: "H264"}, time.Minute)
	encode := func(env *codec.ClientEnvelope) []byte {
		b, err := codec.EncodeClient(nil, env, false)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	withHello := func(mut func(h *codec.ClientHello)) []byte {
		h := e.hello("ada", "orun-grove")
		mut(h)
		return encode(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: h}})
	}
	cases := []struct {
		name  string
		first []byte // nil: send nothing; []byte(nil) in "oversized" is sent as the too-large marker
		want  codec.Code
	}{
		{"garbage", []byte{0xff, 0xff, 0xff, 0x01, 0x02}, codec.CodeBadMessage},
		{"oversized", []byte(nil), codec.CodeFrameTooLarge},
		{"wrong type", encode(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{}}}), codec.CodeHelloRequired},
		{"timeout", nil, codec.CodeHandshakeTimeout},
		{"forged token", withHello(func(h *codec.ClientHello) { h.AccessToken = forged }), codec.CodeTokenInvalid},
		{"expired token", withHello(func(h *codec.ClientHello) { h.AccessToken = expired }), codec.CodeTokenExpired},
		{"wrong audience", withHello(func(h *codec.ClientHello) { h.AccessToken = pxTok }), codec.CodeTokenAudience},
		{"unknown version", withHello(func(h *codec.ClientHello) { h.ProtocolVersion = 99 }), codec.CodeUnsupportedVersion},
		{"unknown instance", withHello(func(h *codec.ClientHello) { h.InstanceId = "nowhere" }), codec.CodeInstanceNotFound},
		{"forged resume", withHello(func(h *codec.ClientHello) { h.ResumeToken = forged }), codec.CodeResumeInvalid},
	}
	// A healthy session runs alongside every refusal, untouched.
	bystander := e.serve("websocket", false)
	bystander.handshake(e.hello("bea", "orun-grove"))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := e.serve("websocket", false)
			c.t = t
			if tc.first != nil || tc.want == codec.CodeFrameTooLarge {
				c.sendRaw(tc.first)
			}
			got, closeCode := c.expectError()
			if codec.Code(got.Code) != tc.want || closeCode != tc.want.CloseCode() {
				t.Fatalf("got %q close %d, want %q close %d", got.Code, closeCode, tc.want, tc.want.CloseCode())
			}
		})
	}
	bystander.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: 7}}})
	bystander.until("pong", func(env *codec.ServerEnvelope) bool { return env.GetPong().GetClientTimeMs() == 7 })
}

func TestDegradedNegotiation(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 50})
	c := e.serve("websocket", false)
	h := e.hello("ada", "orun-grove")
	h.Capabilities = []string{"action-acks"} // no deltas, no unreliable lane
	sh := c.handshake(h)
	if sh.Acceptance != codec.Acceptance_DEGRADED || len(sh.DroppedFeatures) == 0 {
		t.Fatalf("want DEGRADED with dropped features, got %v %v", sh.Acceptance, sh.DroppedFeatures)
	}
	n := 0
	c.until("full snapshots", func(env *codec.ServerEnvelope) bool {
		if env.GetDelta() != nil {
			t.Fatal("delta sent to a client without the deltas capability")
		}
		if env.GetSnapshot() != nil {
			n++
		}
		return n >= 3
	})
}
