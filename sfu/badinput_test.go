package sfu

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/testwait"
)

func TestBadInput(t *testing.T) {
	e := newEnv(t, nil)
	// A live conversation that must not be disturbed.
	cs := e.joinAll(2, tm{id: 1, room: "r"}, tm{id: 2, room: "r"})
	expectHearing(t, cs, map[*client][]byte{cs[0]: {2}, cs[1]: {1}})

	tok3 := e.session("s3", "user3", "r", 3, auth.Access{})
	tokOther := e.session("s4", "user4", "r", 4, auth.Access{})
	_, goodOffer := newClient(t, 3, 2, true)
	_, pcmuOffer := newClient(t, 3, 2, false)
	expired, _ := e.signer.IssueAccess(auth.Access{Subject: "user3"}, -time.Minute)

	cases := []struct {
		name   string
		tok    string
		body   any
		status int
		code   Code
	}{
		{"no token", "", JoinRequest{"s3", goodOffer}, 401, CodeTokenInvalid},
		{"forged token", tok3 + "x", JoinRequest{"s3", goodOffer}, 401, CodeTokenInvalid},
		{"expired token", expired, JoinRequest{"s3", goodOffer}, 401, CodeTokenExpired},
		{"another user's session", tokOther, JoinRequest{"s3", goodOffer}, 403, CodeForbidden},
		{"unknown session", tok3, JoinRequest{"nope", goodOffer}, 404, CodeUnknownSession},
		{"malformed sdp", tok3, JoinRequest{"s3", "v=0\r\nthis is not sdp"}, 400, CodeBadSDP},
		{"truncated sdp", tok3, JoinRequest{"s3", goodOffer[:20]}, 400, CodeBadSDP},
		{"offer without opus", tok3, JoinRequest{"s3", pcmuOffer}, 400, CodeNoOpus},
		{"missing sdp", tok3, map[string]string{"session_id": "s3"}, 400, CodeBadRequest},
		{"unknown field", tok3, map[string]string{"session_id": "s3", "sdp": goodOffer, "x": "y"}, 400, CodeBadRequest},
		{"oversized sdp", tok3, JoinRequest{"s3", strings.Repeat("a", maxSDPBytes+1)}, 400, CodeBadSDP},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := e.post(c.tok, c.body)
			var eb ErrorBody
			if err := json.Unmarshal(body, &eb); err != nil {
				t.Fatalf("body %q: %v", body, err)
			}
			if resp.StatusCode != c.status || eb.Code != c.code || eb.Message == "" {
				t.Fatalf("got %d %+v, want %d %s", resp.StatusCode, eb, c.status, c.code)
			}
		})
	}
	t.Run("leave another user's peer", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodDelete, e.srv.URL+"/v6/voice/session/"+cs[0].peerID, nil)
		req.Header.Set("Authorization", "Bearer "+tokOther)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("rtp from unknown ssrc", func(t *testing.T) {
		e.sfu.UpdatePosition("s3", 0, 0, 0) // presence: next to 1 and 2
		c := e.join(tok3, "s3", 3, 2)
		c.wg.Add(1)
		go c.send(0xdeadbeef) // every frame also sent once under a foreign SSRC, payload 0xEE
		all := append(cs, c)
		expectHearing(t, all, map[*client][]byte{cs[0]: {2, 3}, cs[1]: {1, 3}, c: {1, 2}})
	})
	// The original conversation is intact.
	expectHearing(t, cs[:2], map[*client][]byte{cs[0]: {2, 3}, cs[1]: {1, 3}})
	if n := testutil.ToFloat64(e.sfu.m.joinErrors.WithLabelValues(string(CodeBadSDP))); n < 3 {
		t.Fatalf("bad_sdp counter %v", n)
	}
}

func TestLeaveAndEvents(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.joinAll(2, tm{id: 1, room: "r"}, tm{id: 2, room: "r"})
	expectHearing(t, cs, map[*client][]byte{cs[0]: {2}, cs[1]: {1}})
	testwait.Within(t, 5*time.Second, "active speaker event", func() bool {
		ev := e.notes.last(sessionName(1))
		return ev != nil && len(ev.ActiveSpeakerEntityIds) == 1 && ev.ActiveSpeakerEntityIds[0] == 2
	})
	// Leave by DELETE with the id in the query.
	tok := e.session(sessionName(2), "user"+sessionName(2), "r", 2, auth.Access{})
	req, _ := http.NewRequest(http.MethodDelete, e.srv.URL+"/v6/voice/session?voice_peer_id="+cs[1].peerID, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("leave: %d", resp.StatusCode)
	}
	testwait.Within(t, 5*time.Second, "empty slots event", func() bool {
		ev := e.notes.last(sessionName(1))
		return ev != nil && len(ev.ActiveSpeakerEntityIds) == 0
	})
	if n := testutil.ToFloat64(e.sfu.m.peers); n != 1 {
		t.Fatalf("peers gauge %v", n)
	}
	// SessionClosed leaves too.
	e.sfu.SessionClosed(sessionName(1))
	if n := testutil.ToFloat64(e.sfu.m.peers); n != 0 {
		t.Fatalf("peers gauge %v", n)
	}
}

func TestQuality(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.StatsInterval = 200 * time.Millisecond })
	cs := e.joinAll(2, tm{id: 1, room: "r"}, tm{id: 2, room: "r"})
	expectHearing(t, cs, map[*client][]byte{cs[0]: {2}, cs[1]: {1}})
	// RTT comes from the client's receiver reports on its slot (sent
	// every second or so), jitter from its microphone stream.
	testwait.Within(t, 15*time.Second, "RTT and jitter sampled", func() bool {
		q, ok := e.sfu.PeerQuality(cs[0].peerID)
		return ok && q.RTTMs > 0 && q.JitterMs > 0
	})
	q, _ := e.sfu.PeerQuality(cs[0].peerID)
	if q.Flagged || q.RTTMs > 80 {
		t.Fatalf("loopback peer flagged: %+v", q)
	}
	for _, name := range []string{"egbe_sfu_peer_rtt_seconds", "egbe_sfu_peer_jitter_seconds", "egbe_sfu_peer_loss_ratio"} {
		if n := testutil.CollectAndCount(e.reg, name); n == 0 {
			t.Fatalf("no %s", name)
		}
	}
	if v := testutil.ToFloat64(e.sfu.m.flagged.WithLabelValues("latency")); v != 0 {
		t.Fatalf("flagged latency %v", v)
	}
	t.Logf("quality %+v", q)
}

func TestOverBudget(t *testing.T) {
	s := bareSFU(t, nil)
	for _, c := range []struct {
		q    Quality
		want [2]bool
	}{
		{Quality{RTTMs: 79, Loss: 0.004}, [2]bool{false, false}},
		{Quality{RTTMs: 81, Loss: 0.004}, [2]bool{true, false}},
		{Quality{RTTMs: 10, Loss: 0.006}, [2]bool{false, true}},
	} {
		if got := s.overBudget(c.q); got != c.want {
			t.Errorf("%+v: %v", c.q, got)
		}
	}
}

// Quality sampling runs while clients hang up: each client's DTLS
// close_notify makes pion close the SFU's PeerConnection on its own, and
// the sampler must never read a PeerConnection pion is closing (under
// -race, reading PeerConnection.GetStats there was a data race).
func TestQualitySamplingWhilePeersHangUp(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.StatsInterval = time.Millisecond })
	for round := 0; round < 3; round++ {
		cs := e.joinAll(2, tm{id: 1, room: "r"}, tm{id: 2, room: "r"}, tm{id: 3, room: "r"})
		expectHearing(t, cs, map[*client][]byte{cs[0]: {2, 3}, cs[1]: {1, 3}, cs[2]: {1, 2}})
		for _, c := range cs {
			c.close()
		}
		testwait.Within(t, 10*time.Second, "every peer gone", func() bool { return testutil.ToFloat64(e.sfu.m.peers) == 0 })
	}
}
