package edge

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/internal/coturntest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/turnrelay"
)

// configICE dials an Epic signalling socket at url and returns the
// iceServers of its config message (the first message, or the second
// after a streamer's identify).
func configICE(t *testing.T, url string) []turnrelay.ICEServer {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	t.Cleanup(func() { ws.Close() })
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i := 0; i < 2; i++ {
		var m struct {
			Type                  string            `json:"type"`
			PeerConnectionOptions turnrelay.Options `json:"peerConnectionOptions"`
		}
		if err := ws.ReadJSON(&m); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if m.Type == "config" {
			return m.PeerConnectionOptions.ICEServers
		}
	}
	t.Fatalf("%s: no config message", url)
	return nil
}

// credentialOf parses a minted username.
func credentialOf(t *testing.T, s turnrelay.ICEServer) (time.Time, string) {
	t.Helper()
	exp, subject, err := turnrelay.ParseUsername(s.Username)
	if err != nil || s.Credential == "" {
		t.Fatalf("ice server %+v: %v", s, err)
	}
	return exp, subject
}

// TestConfigMessageTURNCredentials: in drop-in mode every Epic connection
// (players, streamers, SFUs) gets its own TURN credential in its config
// message, for the embedded server and the --turn-url coturn, lasting
// the session's default; the embedded TURN and coturn (sharing the
// secret) both allocate with it.
func TestConfigMessageTURNCredentials(t *testing.T) {
	secret := "config-message-turn-secret"
	coturn := coturntest.Start(t, []byte(secret))
	te := startEdge(t, func(c *Config) {
		c.TURNSecret = secret
		c.TURNURLs = []string{"turn:" + coturn + "?transport=udp"}
	})
	before := time.Now()
	conns := map[string][]turnrelay.ICEServer{
		"player 1": configICE(t, "ws://"+te.addrs.PlayerWS+"/"),
		"player 2": configICE(t, "ws://"+te.addrs.PlayerWS+"/"),
		"streamer": configICE(t, "ws://"+te.addrs.StreamerWS+"/"),
		"sfu":      configICE(t, "ws://"+te.addrs.SFUWS+"/"),
	}
	after := time.Now()
	_, turnPort, _ := strings.Cut(te.addrs.TURN, ":")
	users := map[string]string{}
	for name, ice := range conns {
		if len(ice) != 2 || ice[0].URLs[0] != "turn:127.0.0.1:"+turnPort+"?transport=udp" || ice[1].URLs[0] != "turn:"+coturn+"?transport=udp" ||
			ice[0].Username != ice[1].Username || ice[0].Credential != ice[1].Credential {
			t.Fatalf("%s: ice servers %+v, want the embedded TURN and coturn with one credential", name, ice)
		}
		if other, dup := users[ice[0].Username]; dup {
			t.Errorf("%s and %s got the same username %s", name, other, ice[0].Username)
		}
		users[ice[0].Username] = name
		exp, subject := credentialOf(t, ice[0])
		if exp.Before(before.Add(turnCredentialTTL).Truncate(time.Second)) || exp.After(after.Add(turnCredentialTTL)) {
			t.Errorf("%s: expiry %v, want %v after the connection", name, exp, turnCredentialTTL)
		}
		prefix := "Player"
		if name == "streamer" {
			prefix = "streamer-"
		}
		if !strings.HasPrefix(subject, prefix) {
			t.Errorf("%s: subject %q, want a per-connection id starting %q", name, subject, prefix)
		}
	}
	p1, p2 := conns["player 1"], conns["player 2"]
	for _, c := range []struct {
		url  string
		cred turnrelay.ICEServer
	}{{p1[0].URLs[0], p1[0]}, {p1[1].URLs[0], p1[1]}, {p2[0].URLs[1], p2[0]}} {
		relay, err := turnAllocate(t, c.url, c.cred.Username, c.cred.Credential)
		if err != nil {
			t.Fatalf("%s refused the config message's credential: %v", c.url, err)
		}
		if !relayEcho(t, relay) {
			t.Fatalf("%s: no round trip", c.url)
		}
	}
}

// TestMatchAndConfigTURNCredentials: in token mode the match answer's
// ice_servers and the config message of the session's signalling carry a
// credential for the access token's subject that lasts the session: it
// may start until the match token's expiry, then runs up to
// turnCredentialTTL. It allocates on the embedded TURN.
func TestMatchAndConfigTURNCredentials(t *testing.T) {
	te := startEdge(t, func(c *Config) { c.DevStreamers = 1; c.PxstreamAuth = "token" })
	testwait.Within(t, 20*time.Second, "a streamer", func() bool { return len(te.px.srv.Registry().Snapshot()) == 1 })
	code, body := te.match(t, te.devToken(t, "viewer-9"))
	var m struct {
		Token         string            `json:"token"`
		SignallingURL string            `json:"signalling_url"`
		ExpiresAt     string            `json:"expires_at"`
		ICEServers    turnrelay.Options `json:"ice_servers"`
	}
	if err := json.Unmarshal(body, &m); code != http.StatusOK || err != nil {
		t.Fatalf("match: %d %s %v", code, body, err)
	}
	if len(m.ICEServers.ICEServers) != 1 {
		t.Fatalf("match ice_servers %+v", m.ICEServers)
	}
	matchExp, _ := time.Parse(time.RFC3339, m.ExpiresAt)
	exp, subject := credentialOf(t, m.ICEServers.ICEServers[0])
	if subject != "viewer-9" || !exp.Equal(matchExp.Add(turnCredentialTTL)) {
		t.Errorf("match credential for %q until %v, want viewer-9 until expires_at %v + %v", subject, exp, matchExp, turnCredentialTTL)
	}

	sess, err := te.Signer().VerifyPxSession(m.Token)
	if err != nil {
		t.Fatal(err)
	}
	ice := configICE(t, m.SignallingURL)
	if len(ice) != 1 {
		t.Fatalf("config ice servers %+v", ice)
	}
	exp, subject = credentialOf(t, ice[0])
	if subject != "viewer-9" || !exp.Equal(sess.ExpiresAt.Add(turnCredentialTTL)) {
		t.Errorf("config credential for %q until %v, want viewer-9 until the session token's expiry %v + %v", subject, exp, sess.ExpiresAt, turnCredentialTTL)
	}
	s := m.ICEServers.ICEServers[0]
	if _, err := turnAllocate(t, s.URLs[0], s.Username, s.Credential); err != nil {
		t.Fatalf("the embedded TURN refused the match's credential: %v", err)
	}
}

// TestNegotiateTURNCredentials: the realtime negotiate answer carries
// ice_servers for the bearer access token's subject, lasting the session
// (the token's expiry plus turnCredentialTTL), valid on the embedded
// TURN; no token or a bad one gets none.
func TestNegotiateTURNCredentials(t *testing.T) {
	te := startEdge(t, nil)
	tok := te.devToken(t, "rt-7")
	acc, err := te.Signer().VerifyAccess(tok)
	if err != nil {
		t.Fatal(err)
	}
	negotiate := func(authz string) (int, map[string]json.RawMessage) {
		req, _ := http.NewRequest(http.MethodGet, te.httpURL("/v6/realtime/negotiate?quic=0"), nil)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]json.RawMessage
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, out
	}
	code, out := negotiate("Bearer " + tok)
	var ice turnrelay.Options
	if err := json.Unmarshal(out["ice_servers"], &ice); code != http.StatusOK || err != nil || len(ice.ICEServers) != 1 {
		t.Fatalf("negotiate: %d ice_servers %s %v", code, out["ice_servers"], err)
	}
	exp, subject := credentialOf(t, ice.ICEServers[0])
	if subject != "rt-7" || !exp.Equal(acc.ExpiresAt.Add(turnCredentialTTL)) {
		t.Errorf("credential for %q until %v, want rt-7 until %v", subject, exp, acc.ExpiresAt.Add(turnCredentialTTL))
	}
	s := ice.ICEServers[0]
	if _, err := turnAllocate(t, s.URLs[1], s.Username, s.Credential); err != nil {
		t.Fatalf("the embedded TURN refused negotiate's credential: %v", err)
	}
	for _, authz := range []string{"", "Bearer not-a-token", tok} {
		if code, out := negotiate(authz); code != http.StatusOK || out["ice_servers"] != nil {
			t.Errorf("authorization %q: %d ice_servers %s, want none", authz, code, out["ice_servers"])
		}
	}

	// The WebRTC answer names them too, in WHIP's Link headers.
	req, _ := http.NewRequest(http.MethodPost, te.httpURL("/v6/realtime/webrtc"), strings.NewReader(dataChannelOffer(t)))
	req.Header.Set("Content-Type", "application/sdp")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	links := resp.Header.Values("Link")
	if resp.StatusCode != http.StatusCreated || len(links) != 2 ||
		!strings.HasPrefix(links[0], "<"+s.URLs[0]+`>; rel="ice-server"; username="`+s.Username+`"; credential="`) {
		t.Errorf("WebRTC answer %d, Link %q", resp.StatusCode, links)
	}
}

// TestDemoRelayOnly: two tabs of the demo page, forced to relay
// (forceturn=1, iceTransportPolicy relay) with nothing but the TURN
// credentials the edge handed out (negotiate's ice_servers), open the
// WebRTC transport and join voice in one squad: the session runs, each
// hears the other, both peer connections of each tab selected a relay
// candidate, and the embedded TURN made the allocations and relayed the
// traffic. The voice join answer carries the tab's credentials too.
func TestDemoRelayOnly(t *testing.T) {
	te := startEdge(t, nil)
	var results map[string]struct {
		OK              bool                  `json:"ok"`
		State           string                `json:"state"`
		Transport       string                `json:"transport"`
		ForceTurn       bool                  `json:"forceTurn"`
		InboundPackets  int                   `json:"inboundPackets"`
		DataCandidate   string                `json:"dataCandidate"`
		VoiceCandidate  string                `json:"voiceCandidate"`
		VoiceIceServers []turnrelay.ICEServer `json:"voiceIceServers"`
		Errors          json.RawMessage       `json:"errors"`
		Log             []string              `json:"log"`
		Console         []string              `json:"console"`
	}
	runNode(t, "relay.mjs", 120*time.Second, &results, te.httpURL(""))
	for _, tab := range []string{"a", "b"} {
		r, ok := results[tab]
		if !ok || !r.OK || !r.ForceTurn || r.Transport != "webrtc" {
			t.Fatalf("tab %s: no relayed session and voice: %+v", tab, r)
		}
		if r.DataCandidate != "relay" || r.VoiceCandidate != "relay" {
			t.Errorf("tab %s: selected local candidates data %q voice %q, want relay", tab, r.DataCandidate, r.VoiceCandidate)
		}
		if len(r.VoiceIceServers) != 1 {
			t.Fatalf("tab %s: voice join ice_servers %+v", tab, r.VoiceIceServers)
		}
		if _, subject := credentialOf(t, r.VoiceIceServers[0]); !strings.HasPrefix(subject, "demo-") {
			t.Errorf("tab %s: voice credential for %q, want the tab's demo user", tab, subject)
		}
	}
	// Two tabs, two peer connections each, each allocating over UDP.
	if got := te.scrape(t, `egbe_turn_allocations_total{transport="udp"}`); got < 4 {
		t.Errorf("UDP allocations %v, want at least 4", got)
	}
	for _, dir := range []string{"client_to_peer", "peer_to_client"} {
		if got := te.scrape(t, `egbe_turn_relayed_bytes_total{direction="`+dir+`"}`); got <= 0 {
			t.Errorf("relayed bytes %s: %v", dir, got)
		}
	}
}
