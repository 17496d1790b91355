package edge

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/oshun/egbe-edge/admission"
)

// TestFallbackURL: the default fallback URL every refusal carries is served
// (the demo page stands in for the Tier-2 client), and --fallback-url
// replaces it in the matchmaker's refusals and the waiting room's answers
// alike.
func TestFallbackURL(t *testing.T) {
	te := startEdge(t, nil)
	code, body := te.match(t, "")
	var refusal struct {
		FallbackURL string `json:"fallback_url"`
	}
	if err := json.Unmarshal(body, &refusal); err != nil || code == http.StatusOK || refusal.FallbackURL != admission.FallbackURL {
		t.Fatalf("match without streamers: %d %s", code, body)
	}
	resp, err := http.Get(te.httpURL(refusal.FallbackURL))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "<title>egbe-edge demo</title>") {
		t.Fatalf("GET %s: %d", refusal.FallbackURL, resp.StatusCode)
	}

	const tier2 = "https://tier2.example.net/play"
	other := startEdge(t, func(c *Config) { c.FallbackURL = tier2 })
	code, body = other.match(t, "")
	if err := json.Unmarshal(body, &refusal); err != nil || code == http.StatusOK || refusal.FallbackURL != tier2 {
		t.Fatalf("match refusal with --fallback-url: %d %s", code, body)
	}
	if code, st := other.call(t, http.MethodPost, "/api/v1/queue/join", "", map[string]any{"clientRegion": "gb"}); code != http.StatusOK || st["fallbackUrl"] != tier2 {
		t.Fatalf("queue join with --fallback-url: %d %v", code, st)
	}
	if code, st := other.call(t, http.MethodPost, "/api/v1/queue/arm", other.operator(t), map[string]any{"armed": true}); code != http.StatusOK {
		t.Fatalf("arm: %d %v", code, st)
	}
	if code, st := other.call(t, http.MethodPost, "/api/v3/lilith/launch", "", map[string]any{}); code != http.StatusTooManyRequests || st["fallbackUrl"] != tier2 {
		t.Fatalf("launch at the armed room's guard: %d %v", code, st)
	}
}
