package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/bench"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/egbeclient"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// TestRedisOutage: with Redis gone, a live session keeps working, a new
// handshake (which needs the shared caps) is refused with a typed
// state_unavailable, and the Pixel Streaming matchmaker answers a typed 503.
// Redis comes back empty (its queue state lost): the waiting room fails
// closed — new sessions are still refused, typed — until an operator
// re-arms it; then the edge serves new sessions again, without a restart.
func TestRedisOutage(t *testing.T) {
	rds := redistest.StartServer(t)
	te := startEdge(t, func(c *Config) {
		c.RedisURL = "redis://" + rds.Addr + "/0"
		c.JWTSecret = strings.Repeat("outage-secret-", 3)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	live := te.dial(t, "websocket", false)
	if _, err := live.Hello(ctx, helloFor(te.devToken(t, "steady"))); err != nil {
		t.Fatal(err)
	}
	// A second live session that will try to join voice during the outage.
	voicer, err := bench.NewVoiceMember(1, te.devToken(t, "voicer"), "orun-grove", "wolves")
	if err != nil {
		t.Fatal(err)
	}
	defer voicer.Close()
	if err := voicer.Connect(ctx, te.httpURL("")); err != nil {
		t.Fatal(err)
	}

	rds.Kill()

	pingPong(t, ctx, live, 1)
	fresh := te.dial(t, "websocket", false)
	if err := fresh.Send(helloEnv(te.devToken(t, "newcomer")), false); err != nil {
		t.Fatal(err)
	}
	if code, cc := refusal(t, ctx, fresh); code != codec.CodeStateUnavailable && cc != int(codec.CodeStateUnavailable.CloseCode()) {
		t.Fatalf("hello during the outage: %q/%d, want state_unavailable", code, cc)
	}
	// The matchmaker needs the shared registry and caps: a typed 503.
	body, _ := json.Marshal(map[string]any{"client_region": "us-east", "codecs": []string{"H264"}, "entitlement": "paid"})
	resp, err := http.Post(te.httpURL("/api/v6/pxstream/match"), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var refusalBody struct {
		Reason      string `json:"reason"`
		FallbackURL string `json:"fallback_url"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&refusalBody)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || refusalBody.FallbackURL == "" {
		t.Fatalf("match during the outage: %d %+v, want 503 with a fallback", resp.StatusCode, refusalBody)
	}

	// Voice rooms are pinned in Redis: a join is refused, typed.
	var ve *bench.VoiceError
	if err := voicer.JoinVoice(ctx); !errors.As(err, &ve) || ve.Status != http.StatusServiceUnavailable || ve.Code != "state_unavailable" {
		t.Fatalf("voice join during the outage: %v, want 503 state_unavailable", err)
	}

	rds.Restart()

	pingPong(t, ctx, live, 2)
	closed := te.dial(t, "websocket", false)
	if err := closed.Send(helloEnv(te.devToken(t, "too-early")), false); err != nil {
		t.Fatal(err)
	}
	if code, _ := refusal(t, ctx, closed); code == "" {
		t.Fatalf("a new session was admitted before the operator re-armed the emptied waiting room")
	} else {
		t.Logf("after Redis came back empty, before re-arm: %s", code)
	}
	opTok, err := te.Signer().IssueAccess(auth.Access{Subject: "ops-1", Roles: []string{"operator"}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	operator := func(path, body string) func() bool {
		return func() bool {
			req, _ := http.NewRequest(http.MethodPost, te.httpURL(path), strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+opTok)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}
	}
	// Re-arming restores the room (armed, as after any state loss); the
	// operator then opens it again.
	testwait.Within(t, 20*time.Second, "the operator's re-arm", operator("/api/v1/queue/rearm", `{"reason":"redis restarted empty"}`))
	testwait.Within(t, 20*time.Second, "the operator's disarm", operator("/api/v1/queue/arm", `{"region":"","armed":false}`))
	var lastErr error
	defer func() {
		if t.Failed() {
			t.Logf("last hello error: %v", lastErr)
		}
	}()
	testwait.Within(t, 30*time.Second, "new sessions after the re-arm", func() bool {
		c, err := egbeclient.Dial(ctx, egbeclient.Options{Kind: "websocket", HTTPBase: te.httpURL("")})
		if err != nil {
			return false
		}
		defer c.Close()
		_, err = c.Hello(ctx, helloFor(te.devToken(t, "after-outage")))
		lastErr = err
		return err == nil
	})
}

func pingPong(t *testing.T, ctx context.Context, c *egbeclient.Conn, id uint64) {
	t.Helper()
	if err := c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: id}}}, false); err != nil {
		t.Fatalf("live session: %v", err)
	}
	for {
		env, err := c.Recv(ctx)
		if err != nil {
			t.Fatalf("live session lost: %v", err)
		}
		if env.GetPong().GetClientTimeMs() == id {
			return
		}
	}
}
