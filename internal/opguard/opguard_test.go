package opguard

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
)

func TestCheckSameSite(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		hdr          map[string]string
		want         error
	}{
		{"a tool: no browser headers", "POST", nil, nil},
		{"same-origin fetch", "POST", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:9090"}, nil},
		{"typed into the address bar", "GET", map[string]string{"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"}, nil},
		{"a link from elsewhere", "GET", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, nil},
		{"cross-site form POST", "POST", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, ErrCrossSite},
		{"cross-site no-cors POST", "POST", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, ErrCrossSite},
		{"cross-site image GET", "GET", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, ErrCrossSite},
		{"same-site other port", "POST", map[string]string{"Sec-Fetch-Site": "same-site"}, ErrCrossSite},
		{"old browser, foreign Origin", "POST", map[string]string{"Origin": "https://evil.example"}, ErrCrossSite},
		{"old browser, null Origin", "POST", map[string]string{"Origin": "null"}, ErrCrossSite},
		{"old browser, own Origin", "POST", map[string]string{"Origin": "http://127.0.0.1:9090"}, nil},
		{"GET with a foreign Origin (CORS read)", "GET", map[string]string{"Origin": "https://evil.example"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "http://127.0.0.1:9090/ops/x", nil)
			for k, v := range tc.hdr {
				r.Header.Set(k, v)
			}
			if err := CheckSameSite(r); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestHostAllowed(t *testing.T) {
	for host, ok := range map[string]bool{
		"127.0.0.1:9090": true, "[::1]:9090": true, "10.0.0.7:9090": true, "localhost:9090": true, "LOCALHOST": true,
		"admin.localhost:9090": true, "edge-admin.internal:9090": true, "edge-admin.internal.:9090": true,
		"evil.example:9090": false, "127.0.0.1.evil.example": false, "": false,
	} {
		r := httptest.NewRequest("GET", "http://x/metrics", nil)
		r.Host = host
		if err := HostAllowed(r, []string{"edge-admin.internal"}); (err == nil) != ok {
			t.Errorf("%q: %v, want allowed=%v", host, err, ok)
		}
	}
}

func TestRequireOperator(t *testing.T) {
	s, err := auth.New([]byte("a-test-secret-of-some-length-0123456789"), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	op, _ := s.IssueAccess(auth.Access{Subject: "alice", Roles: []string{auth.RoleOperator}}, time.Hour)
	user, _ := s.IssueAccess(auth.Access{Subject: "bob"}, time.Hour)
	other, _ := auth.New([]byte("another-secret-another-secret-0123"), time.Now)
	foreign, _ := other.IssueAccess(auth.Access{Subject: "eve", Roles: []string{auth.RoleOperator}}, time.Hour)
	h := RequireOperator(s, func(w http.ResponseWriter, r *http.Request, a auth.Access) { w.Header().Set("X-Operator", a.Subject) })
	for _, tc := range []struct {
		name, auth, site string
		status           int
	}{
		{"operator", "Bearer " + op, "", 200},
		{"no token", "", "", 401},
		{"not bearer", "Basic " + op, "", 401},
		{"not an operator", "Bearer " + user, "", 403},
		{"another fleet's token", "Bearer " + foreign, "", 401},
		{"operator, cross-site", "Bearer " + op, "cross-site", 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "http://127.0.0.1:9090/x", nil)
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			if tc.site != "" {
				r.Header.Set("Sec-Fetch-Site", tc.site)
			}
			rec := httptest.NewRecorder()
			h(rec, r)
			if rec.Code != tc.status || (tc.status == 200) != (rec.Header().Get("X-Operator") == "alice") {
				t.Fatalf("%d %q, want %d", rec.Code, rec.Body.String(), tc.status)
			}
		})
	}
	rec := httptest.NewRecorder()
	RequireOperator(nil, nil)(rec, httptest.NewRequest("POST", "/", nil))
	if rec.Code != 401 {
		t.Fatalf("no signer: %d", rec.Code)
	}
}
