package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// revoke posts body (nil: none) to the operator endpoint of te.
func (te *testEdge) revoke(t *testing.T, sessionID string, body []byte) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, _ := http.NewRequest(http.MethodPost, te.adminURL("/ops/sessions/"+sessionID+"/revoke"), rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+te.operator(t))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

type revokeAnswer struct {
	SessionID    string    `json:"session_id"`
	RevokedUntil time.Time `json:"revoked_until"`
	ClosedHere   bool      `json:"closed_here"`
}

func (te *testEdge) mustRevoke(t *testing.T, sessionID string, body []byte) revokeAnswer {
	t.Helper()
	code, out := te.revoke(t, sessionID, body)
	if code != http.StatusOK {
		t.Fatalf("revoke %s: %d %s", sessionID, code, out)
	}
	var a revokeAnswer
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil || a.SessionID != sessionID {
		t.Fatalf("revoke answer %s: %v", out, err)
	}
	return a
}

// resumeRefused opens a connection to te, resumes with tok and wants
// resume_token_revoked, as the Error and as the close code.
func (te *testEdge) resumeRefused(t *testing.T, ctx context.Context, access, tok string) {
	t.Helper()
	c := te.dial(t, "websocket", false)
	h := helloFor(access)
	h.ResumeToken = tok
	if err := c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: h}}, false); err != nil {
		t.Fatal(err)
	}
	code, closeCode := refusal(t, ctx, c)
	if code != codec.CodeResumeRevoked || closeCode != int(codec.CodeResumeRevoked.CloseCode()) {
		t.Fatalf("resume of a revoked session: %q close %d, want %q close %d", code, closeCode, codec.CodeResumeRevoked, codec.CodeResumeRevoked.CloseCode())
	}
}

// TestRevokeEndpoint: an operator revokes a live session on the edge that
// holds it; the client gets the typed close at once and its resume is
// refused; a bystander goes on; bad requests get a typed 400.
func TestRevokeEndpoint(t *testing.T) {
	te := startEdge(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	bystander := te.dial(t, "websocket", false)
	if _, err := bystander.Hello(ctx, helloFor(te.devToken(t, "bystander"))); err != nil {
		t.Fatal(err)
	}
	tok := te.devToken(t, "mallory")
	victim := te.dial(t, "websocket", false)
	h, err := victim.Hello(ctx, helloFor(tok))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("bad requests", func(t *testing.T) {
		for _, tc := range []struct {
			name, id string
			body     []byte
		}{
			{"not json", h.GetSessionId(), []byte("reason=abuse")},
			{"unknown field", h.GetSessionId(), []byte(`{"reason":"x","ttl":5}`)},
			{"wrong type", h.GetSessionId(), []byte(`{"reason":5}`)},
			{"trailing data", h.GetSessionId(), []byte(`{"reason":"x"}{}`)},
			{"reason too long", h.GetSessionId(), []byte(`{"reason":"` + strings.Repeat("x", maxRevokeReason+1) + `"}`)},
			{"body too large", h.GetSessionId(), []byte(`{"reason":"` + strings.Repeat("x", maxRevokeBody) + `"}`)},
			{"bad session id", "s%7Bx%7D", nil},
			{"session id too long", strings.Repeat("s", maxSessionID+1), nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, out := te.revoke(t, tc.id, tc.body)
				var e apiError
				if code != http.StatusBadRequest || json.Unmarshal(out, &e) != nil || e.Code != "bad_request" || e.Message == "" {
					t.Fatalf("got %d %s, want 400 bad_request", code, out)
				}
			})
		}
		resp, err := http.Get(te.adminURL("/ops/sessions/" + h.GetSessionId() + "/revoke"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("GET: %d, want 405", resp.StatusCode)
		}
		if _, ok := te.rt.gw.Session(h.GetSessionId()); !ok {
			t.Fatal("a refused request ended the session")
		}
	})

	t.Run("live session", func(t *testing.T) {
		before := time.Now()
		a := te.mustRevoke(t, h.GetSessionId(), []byte(`{"reason":"abuse report 42"}`))
		if !a.ClosedHere {
			t.Fatal("closed_here is false for a session live on this edge")
		}
		// Until the longest-lived resume token (ServerHello's, 1 h) lapses.
		if d := a.RevokedUntil.Sub(before); d < 59*time.Minute || d > time.Hour+time.Minute {
			t.Fatalf("revoked_until %v is %v from now, want about an hour", a.RevokedUntil, d)
		}
		code, closeCode := refusal(t, ctx, victim)
		if code != codec.CodeResumeRevoked || closeCode != int(codec.CodeResumeRevoked.CloseCode()) {
			t.Fatalf("live session ended with %q close %d, want %q close %d", code, closeCode, codec.CodeResumeRevoked, codec.CodeResumeRevoked.CloseCode())
		}
		te.resumeRefused(t, ctx, tok, h.GetResumeToken())
	})

	t.Run("no body, not live here", func(t *testing.T) {
		if a := te.mustRevoke(t, "s_0123456789abcdef", nil); a.ClosedHere {
			t.Fatal("closed_here for a session this edge does not hold")
		}
	})

	// The bystander is untouched.
	pingPong(t, ctx, bystander, 7)
}

// TestRevokeFleet: two edges share one Redis. A session of edge A that
// dropped is revoked through edge B (which does not hold it); its resume is
// refused on both.
func TestRevokeFleet(t *testing.T) {
	rds := redistest.StartServer(t)
	secret := strings.Repeat("revoke-fleet-secret-", 3)
	fleet := func(c *Config) {
		c.RedisURL = "redis://" + rds.Addr + "/0"
		c.JWTSecret = secret
	}
	a := startEdge(t, fleet)
	b := startEdge(t, fleet)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tok := a.devToken(t, "roamer")
	c := a.dial(t, "websocket", false)
	h, err := c.Hello(ctx, helloFor(tok))
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	testwait.Within(t, 20*time.Second, "the session gone from edge A", func() bool {
		_, ok := a.rt.gw.Session(h.GetSessionId())
		return !ok
	})

	if ans := b.mustRevoke(t, h.GetSessionId(), []byte(`{"reason":"fleet test"}`)); ans.ClosedHere {
		t.Fatal("edge B claims to have closed a session it never held")
	}
	a.resumeRefused(t, ctx, tok, h.GetResumeToken())
	b.resumeRefused(t, ctx, tok, h.GetResumeToken())

	// A session live on edge A, revoked through edge B, is ended by A at
	// once (a Redis notice), well before A's periodic check (every 20 s).
	live := a.dial(t, "websocket", false)
	hl, err := live.Hello(ctx, helloFor(a.devToken(t, "live-roamer")))
	if err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	if ans := b.mustRevoke(t, hl.GetSessionId(), nil); ans.ClosedHere {
		t.Fatal("edge B claims to have closed a session live on edge A")
	}
	nctx, ncancel := context.WithTimeout(ctx, 5*time.Second)
	code, _ := refusal(t, nctx, live)
	ncancel()
	if code != codec.CodeResumeRevoked {
		t.Fatalf("live session on A revoked via B ended with %q, want %q", code, codec.CodeResumeRevoked)
	}
	t.Logf("edge A closed the session %v after edge B revoked it", time.Since(revoked).Round(time.Millisecond))

	// A session nobody revoked still resumes across the fleet.
	c2 := a.dial(t, "websocket", false)
	h2, err := c2.Hello(ctx, helloFor(tok))
	if err != nil {
		t.Fatal(err)
	}
	_ = c2.Close()
	testwait.Within(t, 20*time.Second, "the second session gone from edge A", func() bool {
		_, ok := a.rt.gw.Session(h2.GetSessionId())
		return !ok
	})
	c3 := b.dial(t, "websocket", false)
	hello := helloFor(tok)
	hello.ResumeToken = h2.GetResumeToken()
	if got, err := c3.Hello(ctx, hello); err != nil || got.GetSessionId() != h2.GetSessionId() || !got.GetResumed() {
		t.Fatalf("resume of a session not revoked: %v %v", got, err)
	}
}

// TestRevokeEveryTransport: a live session revoked by the operator gets the
// typed Error and, where the transport carries one, the close code, on
// every transport.
func TestRevokeEveryTransport(t *testing.T) {
	te := startEdge(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, kind := range []string{"webtransport", "webrtc", "websocket"} {
		t.Run(kind, func(t *testing.T) {
			c := te.dial(t, kind, false)
			h, err := c.Hello(ctx, helloFor(te.devToken(t, "revoked-"+kind)))
			if err != nil {
				t.Fatal(err)
			}
			te.mustRevoke(t, h.GetSessionId(), nil)
			code, closeCode := refusal(t, ctx, c)
			if code != codec.CodeResumeRevoked {
				t.Fatalf("%s: ended with Error %q (close %d), want %q", kind, code, closeCode, codec.CodeResumeRevoked)
			}
			// A data channel has no close code; the others carry it.
			if kind != "webrtc" && closeCode != int(codec.CodeResumeRevoked.CloseCode()) {
				t.Fatalf("%s: close code %d, want %d", kind, closeCode, codec.CodeResumeRevoked.CloseCode())
			}
		})
	}
}
