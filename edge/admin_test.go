package edge

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// adminDo sends one request to te's admin listener with the given headers
// ("Host" sets the Host header) and returns the status and the body's code.
func (te *testEdge) adminDo(t *testing.T, method, path, body string, hdr ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, te.adminURL(path), rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e struct{ Code string }
	_ = json.Unmarshal(raw, &e)
	return resp.StatusCode, e.Code
}

// TestAdminRefusesUnauthenticatedAndCrossSite: the admin listener's changes
// need an operator token; a browser's cross-site request (the issue's
// text/plain POST to revoke) and a rebound Host are refused before any
// handler runs; reads stay open to tools; the waiting room's operator API
// answers on the admin listener under the same scheme.
func TestAdminRefusesUnauthenticatedAndCrossSite(t *testing.T) {
	te := startEdge(t, nil)
	c := te.dial(t, "websocket", false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := c.Hello(ctx, helloFor(te.devToken(t, "victim")))
	if err != nil {
		t.Fatal(err)
	}
	sid := h.GetSessionId()
	op := "Bearer " + te.operator(t)
	user := "Bearer " + te.devToken(t, "not-an-operator")
	revoke := "/ops/sessions/" + sid + "/revoke"

	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		code                     string
	}{
		{"revoke without a token", "POST", revoke, "", nil, 401, "token_invalid"},
		{"revoke with a forged token", "POST", revoke, "", []string{"Authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.e30.x"}, 401, "token_invalid"},
		{"revoke by a non-operator", "POST", revoke, "", []string{"Authorization", user}, 403, "operator_role_required"},
		{"cross-site text/plain revoke", "POST", revoke, `{"reason":"csrf"}`,
			[]string{"Content-Type", "text/plain", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors"}, 403, "cross_site_request"},
		{"cross-site revoke even with a token", "POST", revoke, "",
			[]string{"Authorization", op, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}, 403, "cross_site_request"},
		{"Origin of another host (no Sec-Fetch-Site)", "POST", revoke, "", []string{"Authorization", op, "Origin", "http://evil.example"}, 403, "cross_site_request"},
		{"same-site, another port", "POST", revoke, "", []string{"Authorization", op, "Sec-Fetch-Site", "same-site"}, 403, "cross_site_request"},
		{"rebound DNS name", "GET", "/metrics", "", []string{"Host", "evil.example:9090"}, 403, "host_not_allowed"},
		{"cross-site fetch of a profile", "GET", "/debug/pprof/cmdline", "", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "no-cors"}, 403, "cross_site_request"},
		{"queue arm without a token", "POST", "/api/v1/queue/arm", `{"armed":true}`, nil, 401, "token_invalid"},
		{"queue freeze cross-site", "POST", "/api/v1/queue/freeze", `{"frozen":true}`,
			[]string{"Authorization", op, "Content-Type", "text/plain", "Sec-Fetch-Site", "cross-site"}, 403, "cross_site_request"},
		{"queue state without a token", "GET", "/api/v1/queue/state", "", nil, 401, "token_invalid"},
		{"sessions without a token", "GET", "/ops/sessions", "", nil, 401, "token_invalid"},
		{"any other POST", "POST", "/debug/pprof/symbol", "0x1", nil, 401, "token_invalid"},
		{"DELETE", "DELETE", "/ops/", "", nil, 401, "token_invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, code := te.adminDo(t, tc.method, tc.path, tc.body, tc.hdr...)
			if status != tc.status || code != tc.code {
				t.Fatalf("%s %s: %d %q, want %d %q", tc.method, tc.path, status, code, tc.status, tc.code)
			}
		})
	}
	if _, ok := te.rt.gw.Session(sid); !ok {
		t.Fatal("a refused request ended the session")
	}
	if st := te.queueState(t); st["armedGlobal"] != false || st["frozen"] != false {
		t.Fatalf("a refused request changed the room: %v", st)
	}

	// The main listener's operator routes: the same scheme.
	if code, st := te.call(t, http.MethodPost, "/api/v1/queue/arm", te.operator(t), map[string]any{"armed": true},
		"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden || st["code"] != "cross_site_request" {
		t.Fatalf("main listener cross-site arm: %d %v", code, st)
	}

	// Reads stay open to tools and to a navigation from elsewhere.
	for _, tc := range []struct {
		path string
		hdr  []string
	}{
		{"/metrics", nil}, {"/healthz", nil}, {"/readyz", nil}, {"/ops/metrics.json", nil},
		{"/ops/", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate"}},
		{"/healthz", []string{"Host", "localhost:9090"}}, {"/healthz", []string{"Host", "[::1]:9090"}},
	} {
		if status, _ := te.adminDo(t, "GET", tc.path, "", tc.hdr...); status != http.StatusOK {
			t.Errorf("GET %s %v: %d", tc.path, tc.hdr, status)
		}
	}

	// An operator, same-origin as the page sends it, gets through: the
	// waiting room's controls and state on the admin listener, the
	// session list, and the revoke.
	same := []string{"Authorization", op, "Content-Type", "application/json", "Origin", "http://" + te.addrs.Admin, "Sec-Fetch-Site", "same-origin"}
	if status, code := te.adminDo(t, "POST", "/api/v1/queue/freeze", `{"frozen":true}`, same...); status != http.StatusOK {
		t.Fatalf("operator freeze on admin: %d %q", status, code)
	}
	if st := te.queueState(t); st["frozen"] != true {
		t.Fatalf("freeze on the admin listener did not reach the room: %v", st)
	}
	if status, code := te.adminDo(t, "POST", "/api/v1/queue/freeze", `{"frozen":false}`, same...); status != http.StatusOK {
		t.Fatalf("operator unfreeze: %d %q", status, code)
	}
	list := te.opsSessions(t)
	found := false
	for _, s := range list.Sessions {
		found = found || s.SessionID == sid && s.Subject == "victim" && s.Transport == "websocket" && s.Instance == "orun-grove"
	}
	if !found || list.Total < 1 {
		t.Fatalf("GET /ops/sessions: %+v, want %s", list, sid)
	}
	if status, code := te.adminDo(t, "POST", revoke, `{"reason":"admin test"}`, same...); status != http.StatusOK {
		t.Fatalf("operator revoke: %d %q", status, code)
	}
	testwait.Within(t, 10*time.Second, "the revoked session to end", func() bool { _, ok := te.rt.gw.Session(sid); return !ok })
}

// opsSessions reads GET /ops/sessions as an operator.
func (te *testEdge) opsSessions(t *testing.T) opsSessionsResponse {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, te.adminURL("/ops/sessions"), nil)
	req.Header.Set("Authorization", "Bearer "+te.operator(t))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out opsSessionsResponse
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if resp.StatusCode != http.StatusOK || dec.Decode(&out) != nil {
		t.Fatalf("GET /ops/sessions: %d", resp.StatusCode)
	}
	return out
}

// TestAdminHostAllowList: --admin-host names a host the admin listener
// answers to; others stay refused.
func TestAdminHostAllowList(t *testing.T) {
	te := startEdge(t, func(c *Config) { c.AdminHosts = []string{"edge-admin.internal"} })
	if status, _ := te.adminDo(t, "GET", "/healthz", "", "Host", "edge-admin.internal:9090"); status != http.StatusOK {
		t.Fatalf("allowed host: %d", status)
	}
	if status, code := te.adminDo(t, "GET", "/healthz", "", "Host", "other.internal:9090"); status != http.StatusForbidden || code != "host_not_allowed" {
		t.Fatalf("other host: %d %q", status, code)
	}
}

// TestOpsDevToken: in dev the operator page gets an operator token from
// its own listener (same-origin only); prod has no such endpoint.
func TestOpsDevToken(t *testing.T) {
	te := startEdge(t, nil)
	req, _ := http.NewRequest(http.MethodPost, te.adminURL(opsDevTokenPath), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ Token, Subject string }
	_ = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	a, err := te.Signer().VerifyAccess(out.Token)
	if resp.StatusCode != http.StatusOK || err != nil || !a.HasRole(auth.RoleOperator) {
		t.Fatalf("dev operator token: %d %v %+v", resp.StatusCode, err, a)
	}
	if status, code := te.adminDo(t, "POST", opsDevTokenPath, "", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"); status != http.StatusForbidden || code != "cross_site_request" {
		t.Fatalf("cross-site dev token: %d %q", status, code)
	}

	prod := startProdEdge(t, nil)
	if status, code := prod.adminDo(t, "POST", opsDevTokenPath, ""); status != http.StatusUnauthorized || code != "token_invalid" {
		t.Fatalf("prod dev token: %d %q, want 401 (no such endpoint without a token)", status, code)
	}
}
