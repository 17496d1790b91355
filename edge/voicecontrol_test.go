package edge

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/codec"
)

// TestVoiceControlErrors: a client's voice-control mistakes, sent over a
// real realtime WebSocket to the running edge, are answered with client
// codes from the one error table (never internal) and the session goes
// on: the next valid control applies and a ping is answered.
func TestVoiceControlErrors(t *testing.T) {
	te := startEdge(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := te.dial(t, "websocket", false)
	h, err := c.Hello(ctx, helloFor(te.devToken(t, "squad-hopper")))
	if err != nil {
		t.Fatal(err)
	}
	if h.GetAcceptance() != codec.Acceptance_ACCEPTED {
		t.Fatalf("hello %v: voice must be negotiated", h)
	}
	voice := func(vc *codec.VoiceControl) {
		t.Helper()
		if err := c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Voice{Voice: vc}}, false); err != nil {
			t.Fatal(err)
		}
	}
	join := func(id string) *codec.VoiceControl {
		return &codec.VoiceControl{Op: &codec.VoiceControl_JoinSquad{JoinSquad: id}}
	}
	// expect reads until an Error arrives (snapshots and voice events
	// pass by) and checks its code.
	expect := func(what string, want codec.Code) {
		t.Helper()
		for {
			env, err := c.Recv(ctx)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if e := env.GetError(); e != nil {
				if e.GetCode() != string(want) {
					t.Fatalf("%s: error %q (%s), want %q", what, e.GetCode(), e.GetMessage(), want)
				}
				return
			}
		}
	}
	for i := range 16 {
		voice(join("squad-" + strings.Repeat("x", i)))
	}
	voice(join("squad-17"))
	expect("a 17th squad", codec.CodeVoiceControlLimit)
	voice(join(strings.Repeat("s", 129)))
	expect("a 129-byte squad id", codec.CodeVoiceControlInvalid)
	voice(&codec.VoiceControl{})
	expect("an empty operation", codec.CodeVoiceControlInvalid)
	voice(&codec.VoiceControl{Op: &codec.VoiceControl_MuteEntityId{MuteEntityId: 0}})
	expect("a mute of entity 0", codec.CodeVoiceControlInvalid)

	// The session goes on: leaving a squad frees a place, the 17th join
	// now succeeds (no error before the pong), and pings are answered.
	voice(&codec.VoiceControl{Op: &codec.VoiceControl_LeaveSquad{LeaveSquad: "squad-"}})
	voice(join("squad-17"))
	if err := c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: 42}}}, false); err != nil {
		t.Fatal(err)
	}
	for {
		env, err := c.Recv(ctx)
		if err != nil {
			t.Fatalf("after the refusals: %v", err)
		}
		if e := env.GetError(); e != nil {
			t.Fatalf("valid controls refused: %v", e)
		}
		if p := env.GetPong(); p != nil {
			if p.GetClientTimeMs() != 42 {
				t.Fatalf("pong %v", p)
			}
			return
		}
	}
}
