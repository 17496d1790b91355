package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/egbeclient"
	"github.com/oshun/egbe-edge/internal/testwait"
)

func TestLaunchThroughTheEdge(t *testing.T) {
	te := startEdge(t, nil)
	req := map[string]any{
		"v1UserId": "u-1", "tenantId": "tara-studio", "clientRegion": "gb",
		"nativeClient": map[string]any{"installed": false},
		"browser":      map[string]any{"webRtc": true, "codecs": []string{"H264"}, "webGpu": true, "webGl2": true},
		"network":      map[string]any{"sustainedDownlinkMbps": 2, "probeDurationMs": 3000},
		"region":       map[string]any{"pixelStreamingRestricted": false},
		"pops":         []any{},
	}
	resp, body := postJSON(t, te.httpURL("/api/v3/lilith/launch"), req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("launch: %d %s", resp.StatusCode, body)
	}
	var d struct {
		DecisionID string   `json:"decisionId"`
		Surface    string   `json:"selectedSurface"`
		Reasons    []string `json:"reasonCodes"`
		Target     struct {
			Kind     string `json:"kind"`
			Fidelity string `json:"fidelity"`
		} `json:"target"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d.DecisionID, "launch:") || d.Surface != "fallback" || d.Target.Kind != "fallback-browser" || d.Target.Fidelity != "reduced" {
		t.Fatalf("decision %s", body)
	}
	// A closed region short-circuits to the waitlist before any probing.
	req["clientRegion"] = "ru"
	resp, body = postJSON(t, te.httpURL("/api/v3/lilith/launch"), req)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"sanctions-prohibited"`) {
		t.Fatalf("ru: %d %s", resp.StatusCode, body)
	}
	// Unknown fields are refused with the field named.
	req["clientRegion"] = "gb"
	req["surprise"] = 1
	resp, body = postJSON(t, te.httpURL("/api/v3/lilith/launch"), req)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "surprise") {
		t.Fatalf("unknown field: %d %s", resp.StatusCode, body)
	}
}

func TestPolicyCheckCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := PolicyCheck(nil, &out, &errOut); code != 0 {
		t.Fatalf("default policy: exit %d: %s %s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), `"ok": true`) {
		t.Fatalf("report: %s", out.String())
	}
	if code := PolicyCheck([]string{writeFile(t, `{"nonsense": true}`)}, &out, &errOut); code != 2 {
		t.Fatalf("invalid policy file: exit %d, want 2", code)
	}
}

// TestRealtimeUserCap: one user's sessions beyond the policy cap are
// refused with user_session_cap; closing one frees a place.
func TestRealtimeUserCap(t *testing.T) {
	te := startEdge(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok := te.devToken(t, "greedy")
	capN := te.adm.policy.Realtime.UserSessionCap
	var open []*egbeclient.Conn
	for i := 0; i < capN; i++ {
		c := te.dial(t, "websocket", false)
		if _, err := c.Hello(ctx, helloFor(tok)); err != nil {
			t.Fatalf("session %d: %v", i+1, err)
		}
		open = append(open, c)
	}
	extra := te.dial(t, "websocket", false)
	if err := extra.Send(helloEnv(tok), false); err != nil {
		t.Fatal(err)
	}
	if code, cc := refusal(t, ctx, extra); code != codec.CodeUserCap && cc != int(codec.CodeUserCap.CloseCode()) {
		t.Fatalf("session %d: got %q/%d, want user_session_cap", capN+1, code, cc)
	}
	open[0].Close()
	testwait.Within(t, 10*time.Second, "a place to free up", func() bool {
		c := te.dial(t, "websocket", false)
		defer c.Close()
		_, err := c.Hello(ctx, helloFor(tok))
		return err == nil
	})
}

// TestPxstreamUserCap: a user's third concurrent Pixel Streaming match is
// refused (cap 2) with a typed reason and the fallback URL.
func TestPxstreamUserCap(t *testing.T) {
	te := startEdge(t, func(c *Config) { c.DevStreamers = 3 })
	tok := te.devToken(t, "streamer-fan")
	match := func() (int, string) { code, body := te.match(t, tok); return code, string(body) }
	testwait.Within(t, 20*time.Second, "three idle dev streamers", func() bool {
		return te.px.mm.Dashboard().Totals.Idle >= 3
	})
	for i := 0; i < 2; i++ {
		if code, body := match(); code != http.StatusOK {
			t.Fatalf("match %d: %d %s", i+1, code, body)
		}
	}
	code, body := match()
	if code != http.StatusConflict || !strings.Contains(body, "fallback_url") {
		t.Fatalf("third match: %d %s, want 409 with a fallback", code, body)
	}
}
