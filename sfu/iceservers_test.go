package sfu

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
)

// TestJoinICEServers: with Deps.ICEServers set, the join answer carries
// ice_servers built for the access token's subject and expiry and the
// request's Host.
func TestJoinICEServers(t *testing.T) {
	type call struct {
		subject, host string
		exp           time.Time
	}
	calls := make(chan call, 4)
	e := newEnvDeps(t, nil, func(d *Deps) {
		d.ICEServers = func(subject string, exp time.Time, host string) json.RawMessage {
			calls <- call{subject, host, exp}
			return json.RawMessage(`{"iceServers":[{"urls":["turn:` + host + `"],"username":"` + subject + `","credential":"c"}]}`)
		}
	})
	tok := e.session("s1", "user1", "r", 1, auth.Access{})
	acc, err := e.signer.VerifyAccess(tok)
	if err != nil {
		t.Fatal(err)
	}
	_, offer := newClient(t, 1, 2, true)
	resp, body := e.post(tok, JoinRequest{SessionID: "s1", SDP: offer})
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("join: %d %s", resp.StatusCode, body)
	}
	var jr struct {
		ICEServers struct {
			ICEServers []struct {
				URLs     []string `json:"urls"`
				Username string   `json:"username"`
			} `json:"iceServers"`
		} `json:"ice_servers"`
	}
	if err := json.Unmarshal(body, &jr); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(e.srv.URL, "http://")
	if s := jr.ICEServers.ICEServers; len(s) != 1 || s[0].Username != "user1" || s[0].URLs[0] != "turn:"+host {
		t.Errorf("ice_servers %s", body)
	}
	if c := <-calls; c.subject != "user1" || c.host != host || !c.exp.Equal(acc.ExpiresAt) {
		t.Errorf("hook called with %+v, want user1, %s, %v", c, host, acc.ExpiresAt)
	}
}
