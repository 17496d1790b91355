package matchmaker

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestMatchICEServers: with the hook set, the match answer carries
// ice_servers built for the session's subject (its session id when the
// request names no one), the session token's expiry and the request's
// Host; without it the field is absent.
func TestMatchICEServers(t *testing.T) {
	r := newRig(t, nil, nil)
	r.fleet.add("eu-west-1", 3, "H264")
	if rec := post(t, r.m, `{"user_id":"u1","client_region":"gb","codecs":["H264"],"entitlement":"paid"}`, nil); strings.Contains(rec.Body.String(), "ice_servers") {
		t.Fatalf("no hook, yet %s", rec.Body)
	}

	type call struct {
		subject, host string
		exp           time.Time
	}
	var calls []call
	m, err := New(r.m.cfg, Deps{Fleet: r.fleet, Signer: r.signer, Now: r.clock.Now,
		ICEServers: func(subject string, exp time.Time, host string) json.RawMessage {
			calls = append(calls, call{subject, host, exp})
			return json.RawMessage(`{"iceServers":[{"urls":["turn:` + host + `"],"username":"` + subject + `","credential":"c"}]}`)
		}})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{"user_id":"u1","client_region":"gb","codecs":["H264"],"entitlement":"paid"}`,
		`{"client_region":"gb","codecs":["H264"],"entitlement":"paid"}`} {
		rec := post(t, m, body, nil)
		var got struct {
			SessionID  string `json:"session_id"`
			ExpiresAt  string `json:"expires_at"`
			ICEServers struct {
				ICEServers []struct {
					URLs     []string `json:"urls"`
					Username string   `json:"username"`
				} `json:"iceServers"`
			} `json:"ice_servers"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != 200 {
			t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
		}
		c := calls[len(calls)-1]
		wantSubject := "u1"
		if !strings.Contains(body, "user_id") {
			wantSubject = got.SessionID
		}
		exp, _ := time.Parse(time.RFC3339, got.ExpiresAt)
		if c.subject != wantSubject || c.host != "edge.example:8443" || !c.exp.Equal(exp) || !c.exp.Equal(r.clock.Now().Add(120*time.Second)) {
			t.Errorf("hook called with %+v, want subject %q, host edge.example:8443, expiry %v", c, wantSubject, exp)
		}
		if s := got.ICEServers.ICEServers; len(s) != 1 || s[0].Username != wantSubject || s[0].URLs[0] != "turn:edge.example:8443" {
			t.Errorf("ice_servers %+v", got.ICEServers)
		}
	}
}
