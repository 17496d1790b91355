package edge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/egbeclient"
)

func (te *testEdge) dial(t *testing.T, kind string, json bool) *egbeclient.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := egbeclient.Dial(ctx, egbeclient.Options{Kind: kind, HTTPBase: te.httpURL(""), H3Base: te.h3Base(), CertHash: te.CertHash(), JSON: json})
	if err != nil {
		t.Fatalf("dial %s: %v", kind, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func helloFor(tok string) *codec.ClientHello {
	return &codec.ClientHello{AccessToken: tok, InstanceId: "orun-grove", AuthorityKind: codec.AuthorityKind_UE_CLIENT,
		ProtocolVersion: codec.ProtocolVersion, Capabilities: codec.ServerCapabilities}
}

// TestRealtimeEveryTransport opens a session over each transport, completes
// the handshake, and exchanges traffic on both lanes: presence and acks up
// (unreliable where there is a lane), snapshots or deltas down, and a
// ping/pong round trip on the reliable lane.
func TestRealtimeEveryTransport(t *testing.T) {
	te := startEdge(t, nil)
	for _, tc := range []struct {
		name string
		kind string
		json bool
	}{
		{"websocket", "websocket", false},
		{"websocket-json", "websocket", true},
		{"webtransport", "webtransport", false},
		{"webrtc", "webrtc", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := te.dial(t, tc.kind, tc.json)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			h, err := c.Hello(ctx, helloFor(te.devToken(t, "user-"+tc.name)))
			if err != nil {
				t.Fatal(err)
			}
			if h.GetSessionId() == "" || h.GetResumeToken() == "" || h.GetShardId() != DevShardName || h.GetAcceptance() != codec.Acceptance_ACCEPTED {
				t.Fatalf("hello: %v", h)
			}
			if h.GetTransport() != tc.kind {
				t.Errorf("hello names transport %q, want %q", h.GetTransport(), tc.kind)
			}
			if err := c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Presence{Presence: &codec.PresencePacket{Seq: 1, Position: &codec.Vec3{XMm: 1000, YMm: 2000}}}}, true); err != nil {
				t.Fatal(err)
			}
			if err := c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: 42}}}, false); err != nil {
				t.Fatal(err)
			}
			var pongs, world int
			for pongs == 0 || world < 3 {
				env, err := c.Recv(ctx)
				if err != nil {
					t.Fatalf("after %d pongs, %d world messages: %v", pongs, world, err)
				}
				switch m := env.Msg.(type) {
				case *codec.ServerEnvelope_Pong:
					if m.Pong.GetClientTimeMs() != 42 {
						t.Fatalf("pong echoes %d", m.Pong.GetClientTimeMs())
					}
					pongs++
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
		})
	}
}

func ack(t *testing.T, c *egbeclient.Conn, seq uint64) {
	t.Helper()
	if err := c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ack{Ack: &codec.Ack{SnapshotSequence: seq}}}, true); err != nil {
		t.Fatal(err)
	}
}

// TestBadHandshakes: each bad first message gets a typed refusal and a
// close, is counted, and leaves a healthy session on the same edge alone.
func TestBadHandshakes(t *testing.T) {
	te := startEdge(t, func(c *Config) {})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	bystander := te.dial(t, "websocket", false)
	if _, err := bystander.Hello(ctx, helloFor(te.devToken(t, "bystander"))); err != nil {
		t.Fatal(err)
	}

	good := te.devToken(t, "mallory")
	expired, _ := te.Signer().IssueAccess(accessFor("mallory"), -time.Minute)
	resume, _ := te.Signer().IssueResume(resumeFor(), time.Minute)
	cases := []struct {
		name string
		send func(c *egbeclient.Conn) error
		want codec.Code
	}{
		{"garbage", func(c *egbeclient.Conn) error { return c.SendRaw([]byte{0xff, 0xff, 0xff}, false) }, codec.CodeBadMessage},
		{"oversized", func(c *egbeclient.Conn) error { return c.SendRaw(make([]byte, codec.MaxMessageSize+1), false) }, codec.CodeFrameTooLarge},
		{"wrong type", func(c *egbeclient.Conn) error {
			return c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{}}}, false)
		}, codec.CodeHelloRequired},
		{"forged token", func(c *egbeclient.Conn) error { return c.Send(helloEnv(good[:len(good)-4]+"AAAA"), false) }, codec.CodeTokenInvalid},
		{"expired token", func(c *egbeclient.Conn) error { return c.Send(helloEnv(expired), false) }, codec.CodeTokenExpired},
		{"resume token as access token", func(c *egbeclient.Conn) error { return c.Send(helloEnv(resume), false) }, codec.CodeTokenInvalid},
		{"unknown instance", func(c *egbeclient.Conn) error {
			h := helloFor(good)
			h.InstanceId = "atlantis"
			return c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: h}}, false)
		}, codec.CodeInstanceNotFound},
		{"unknown protocol version", func(c *egbeclient.Conn) error {
			h := helloFor(good)
			h.ProtocolVersion = 99
			return c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: h}}, false)
		}, codec.CodeUnsupportedVersion},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := te.dial(t, "websocket", false)
			if err := tc.send(c); err != nil {
				t.Fatal(err)
			}
			code, closeCode := refusal(t, ctx, c)
			if code != tc.want && closeCode != int(tc.want.CloseCode()) {
				t.Fatalf("got error %q / close %d, want %q (%d)", code, closeCode, tc.want, tc.want.CloseCode())
			}
		})
	}
	// The bystander still gets world updates and pongs.
	if err := bystander.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: 7}}}, false); err != nil {
		t.Fatal(err)
	}
	for {
		env, err := bystander.Recv(ctx)
		if err != nil {
			t.Fatalf("bystander disturbed: %v", err)
		}
		if env.GetPong().GetClientTimeMs() == 7 {
			break
		}
	}
}

// refusal reads until the edge refuses: the Error code and the close code.
func refusal(t *testing.T, ctx context.Context, c *egbeclient.Conn) (codec.Code, int) {
	t.Helper()
	var code codec.Code
	for {
		env, err := c.Recv(ctx)
		if err != nil {
			var ce *egbeclient.CloseError
			if errors.As(err, &ce) {
				return code, ce.Code
			}
			if code != "" {
				return code, 0
			}
			t.Fatalf("no refusal: %v", err)
		}
		if e := env.GetError(); e != nil {
			code = codec.Code(e.GetCode())
		}
	}
}

func helloEnv(tok string) *codec.ClientEnvelope {
	return &codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: helloFor(tok)}}
}
