package edge

import (
	"net/http"
	"testing"
)

// TestCrossOrigin: negotiate, the WebRTC offer and voice answer CORS (a
// page on another edge of the fleet calls them), preflights included;
// with --allowed-origin set, other origins get no CORS grant.
func TestCrossOrigin(t *testing.T) {
	do := func(t *testing.T, method, url, origin string, preflight bool) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Origin", origin)
		if preflight {
			req.Header.Set("Access-Control-Request-Method", "POST")
			req.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	const page = "http://edge-b.example:8080"

	te := startEdge(t, nil)
	// negotiate too: the demo page sends it the access token (for its
	// ice_servers), which makes it a preflighted request.
	for _, path := range []string{"/v6/voice/session", "/v6/realtime/webrtc", "/v6/realtime/negotiate"} {
		resp := do(t, http.MethodOptions, te.httpURL(path), page, true)
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != page ||
			resp.Header.Get("Access-Control-Allow-Headers") != "Authorization, Content-Type" {
			t.Errorf("preflight %s: %d %v", path, resp.StatusCode, resp.Header)
		}
	}
	if resp := do(t, http.MethodGet, te.httpURL("/v6/realtime/negotiate"), page, false); resp.StatusCode != http.StatusOK ||
		resp.Header.Get("Access-Control-Allow-Origin") != page || resp.Header.Get("Access-Control-Expose-Headers") != "Link" {
		t.Errorf("negotiate: %d %v", resp.StatusCode, resp.Header)
	}
	// An unauthenticated voice join still fails as before, with the grant.
	if resp := do(t, http.MethodPost, te.httpURL("/v6/voice/session"), page, false); resp.StatusCode != http.StatusUnauthorized ||
		resp.Header.Get("Access-Control-Allow-Origin") != page {
		t.Errorf("voice join without a token: %d %v", resp.StatusCode, resp.Header)
	}

	listed := startEdge(t, func(c *Config) { c.AllowedOrigins = []string{"https://play.example"} })
	if resp := do(t, http.MethodOptions, listed.httpURL("/v6/voice/session"), page, true); resp.StatusCode == http.StatusNoContent ||
		resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from an origin not listed: %d %v", resp.StatusCode, resp.Header)
	}
	if resp := do(t, http.MethodOptions, listed.httpURL("/v6/voice/session"), "https://PLAY.example", true); resp.StatusCode != http.StatusNoContent {
		t.Errorf("preflight from a listed origin: %d %v", resp.StatusCode, resp.Header)
	}
}
