package transport

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

// iceFor is an ICEServersFunc that answers only a request carrying
// Authorization, with one TURN entry naming the caller.
func iceFor(r *http.Request) json.RawMessage {
	a := r.Header.Get("Authorization")
	if a == "" {
		return nil
	}
	return json.RawMessage(`{"iceServers":[{"urls":["stun:s.example:3478"]},{"urls":["turn:t.example:3478?transport=udp","turn:t.example:3478?transport=tcp"],"username":"9:` +
		a + `","credential":"c\"x"}]}`)
}

// TestNegotiateICEServers: the negotiate answer carries the hook's
// ice_servers when it offers WebRTC (and the hook gives some), never
// otherwise; a hook answer that is no JSON is dropped, not sent broken.
func TestNegotiateICEServers(t *testing.T) {
	cfg := DefaultNegotiateConfig()
	cfg.ICEServers = func(r *http.Request) json.RawMessage {
		if r.Header.Get("Authorization") == "broken" {
			return json.RawMessage(`{"iceServers":`)
		}
		return iceFor(r)
	}
	n, err := NewNegotiate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	get := func(query, authz string) (int, map[string]json.RawMessage) {
		req := httptest.NewRequest("GET", "http://edge.example:8080"+PathNegotiate+"?"+query, nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		rec := httptest.NewRecorder()
		n.ServeHTTP(rec, req)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", rec.Body, err)
		}
		return rec.Code, m
	}
	code, m := get("", "alice")
	var ice struct {
		ICEServers []struct {
			URLs     []string `json:"urls"`
			Username string   `json:"username"`
		} `json:"iceServers"`
	}
	if err := json.Unmarshal(m["ice_servers"], &ice); code != 200 || err != nil || len(ice.ICEServers) != 2 || ice.ICEServers[1].Username != "9:alice" {
		t.Fatalf("%d ice_servers %s: %v", code, m["ice_servers"], err)
	}
	for _, c := range []struct{ query, authz string }{{"webrtc=0", "alice"}, {"", ""}, {"", "broken"}} {
		if code, m := get(c.query, c.authz); code != 200 || m["ice_servers"] != nil {
			t.Errorf("%+v: %d ice_servers %s, want none", c, code, m["ice_servers"])
		}
	}
}

// TestLinkHeaders: WHIP's Link header form (RFC 9725 section 4.6), one
// per URL, credentials quoted.
func TestLinkHeaders(t *testing.T) {
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Authorization", "bob")
	got := linkHeaders(iceFor(r))
	want := []string{`<stun:s.example:3478>; rel="ice-server"`,
		`<turn:t.example:3478?transport=udp>; rel="ice-server"; username="9:bob"; credential="c\"x"; credential-type="password"`,
		`<turn:t.example:3478?transport=tcp>; rel="ice-server"; username="9:bob"; credential="c\"x"; credential-type="password"`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	for _, bad := range []string{"", "[", `{"iceServers":[{"urls":["<x>"]}]}`} {
		if l := linkHeaders(json.RawMessage(bad)); len(l) != 0 {
			t.Errorf("%q: %q", bad, l)
		}
	}
}

// TestWebRTCAnswerLinksICEServers: a real offer's 201 answer carries the
// hook's ICE servers as Link headers.
func TestWebRTCAnswerLinksICEServers(t *testing.T) {
	cfg := DefaultWebRTCConfig()
	cfg.ICEServers = func(r *http.Request) json.RawMessage {
		r.Header.Set("Authorization", "carol")
		return iceFor(r)
	}
	_, _, url := startRTC(t, cfg, echo)
	c := newRTCClient(t)
	resp, answer := postOffer(t, url, "application/sdp", c.offer(t))
	if resp.StatusCode != http.StatusCreated || len(answer) == 0 {
		t.Fatalf("%d %s", resp.StatusCode, answer)
	}
	links := resp.Header.Values("Link")
	if len(links) != 3 || links[1] != `<turn:t.example:3478?transport=udp>; rel="ice-server"; username="9:carol"; credential="c\"x"; credential-type="password"` {
		t.Errorf("Link headers %q", links)
	}
}
