package signalling

import (
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/auth"
)

// fakeClock is a settable clock shared by signer and registry.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func mustSigner(t testing.TB, secret string, now func() time.Time) *auth.Signer {
	t.Helper()
	s, err := auth.New([]byte(secret), now)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func streamerToken(t testing.TB, s *auth.Signer, id, pop string, codecs ...string) string {
	t.Helper()
	tok, err := s.IssueStreamer(auth.Streamer{StreamerID: id, POP: pop, Codecs: codecs}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return "/?token=" + url.QueryEscape(tok)
}

func sessionToken(t testing.TB, s *auth.Signer, sid, streamerID string) string {
	t.Helper()
	tok, err := s.IssuePxSession(auth.PxSession{SessionID: sid, Subject: "user-" + sid, POP: "eu-west-1",
		Codec: "H264", StreamerID: streamerID}, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return "/v6/pxstream/signalling?token=" + url.QueryEscape(tok)
}

const secret = "0123456789abcdef0123456789abcdef"

func tokenHarness(t *testing.T, hooks LeaseHooks) (*harness, *auth.Signer, *fakeClock) {
	clk := newFakeClock()
	signer := mustSigner(t, secret, clk.Now)
	cfg := Default()
	cfg.Auth = AuthToken
	h := newHarness(t, cfg, Deps{Signer: signer, Now: clk.Now, Leases: hooks})
	return h, signer, clk
}

func TestTokenMode(t *testing.T) {
	h, signer, clk := tokenHarness(t, nil)

	// Streamers: a valid token registers its id, with its claims' POP/codecs.
	s1 := h.dialStreamer("S1", streamerToken(t, signer, "ue-1", "eu-west-1", "h264", "AV1")+"&pop=ignored&codecs=VP8")
	s1.expect("identify")
	s1.expect("config")
	s1.send(`{"type":"endpointId","id":"ue-1"}`)
	s1.expectRaw(`{"type":"endpointIdConfirm","committedId":"ue-1"}`)
	// Re-sending its own id confirms it (a token pins the id: no suffix).
	s1.send(`{"type":"endpointId","id":"ue-1"}`)
	s1.expectRaw(`{"type":"endpointIdConfirm","committedId":"ue-1"}`)
	info, ok := h.srv.Registry().Get("ue-1")
	if !ok || info.POP != "eu-west-1" || strings.Join(info.Codecs, ",") != "H264,AV1" || info.State != StateIdle {
		t.Fatalf("registry entry %+v %v", info, ok)
	}
	// A second streamer whose token omits POP and codecs uses the URL's.
	s3 := h.dialStreamer("S3", streamerToken(t, signer, "ue-3", "")+"&pop=us-east-1&codecs=VP8,h264")
	s3.expect("identify")
	s3.expect("config")
	s3.send(`{"type":"endpointId"}`) // a missing id is the token's
	s3.expectRaw(`{"type":"endpointIdConfirm","committedId":"ue-3"}`)

	// Squatting: another token's holder claims ue-1.
	sq := h.dialStreamer("SQ", streamerToken(t, signer, "ue-2", "eu-west-1"))
	sq.expect("identify")
	sq.expect("config")
	sq.send(`{"type":"endpointId","id":"ue-1"}`)
	sq.expectClose(websocket.ClosePolicyViolation, "streamer token is for ue-2")
	// The same token twice: the second connection is refused.
	dup := h.dialStreamer("DUP", streamerToken(t, signer, "ue-1", "eu-west-1"))
	dup.expect("identify")
	dup.expect("config")
	dup.send(`{"type":"endpointId","id":"ue-1"}`)
	dup.expectClose(websocket.ClosePolicyViolation, "streamer id ue-1 is connected already")

	// No token, a forged token, an expired token, a player token.
	h.dialStreamer("S-none", "/").expectClose(websocket.ClosePolicyViolation, "invalid token")
	forger := mustSigner(t, "another-secret-another-secret-xx", clk.Now)
	h.dialStreamer("S-forged", streamerToken(t, forger, "ue-1", "")).expectClose(websocket.ClosePolicyViolation, "invalid token")
	old := mustSigner(t, secret, func() time.Time { return clk.Now().Add(-2 * time.Hour) })
	h.dialStreamer("S-expired", streamerToken(t, old, "ue-1", "")).expectClose(websocket.ClosePolicyViolation, "token expired")
	h.dialStreamer("S-wrongtype", strings.Replace(sessionToken(t, signer, "x", "ue-1"), "/v6/pxstream/signalling", "/", 1)).
		expectClose(websocket.ClosePolicyViolation, "invalid token")
	h.dialPlayer("P-none", "/").expectClose(websocket.ClosePolicyViolation, "invalid token")
	h.dialPlayer("P-forged", sessionToken(t, forger, "s1", "ue-1")).expectClose(websocket.ClosePolicyViolation, "invalid token")
	h.dialPlayer("P-expired", sessionToken(t, old, "s1", "ue-1")).expectClose(websocket.ClosePolicyViolation, "token expired")
	h.dialPlayer("P-streamertoken", streamerToken(t, signer, "ue-1", "")).expectClose(websocket.ClosePolicyViolation, "invalid token")

	// The matchmaker leases ue-1 to session s1.
	if err := h.srv.Registry().Lease("ue-1", "s1", clk.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Players: bound to the leased streamer; they see only it.
	p := h.playerUp("P0", sessionToken(t, signer, "s1", "ue-1"))
	p.send(`{"type":"listStreamers"}`)
	p.expectRaw(`{"type":"streamerList","ids":["ue-1"]}`)
	p.send(`{"type":"subscribe","streamerId":"ue-3"}`)
	p.expectRaw(`{"type":"subscribeFailed","message":"Streamer ue-3 is not leased to this session."}`)
	p.send(`{"type":"subscribe","streamerId":"ue-1"}`)
	s1.expect("playerConnected")
	if info, _ := h.srv.Registry().Get("ue-1"); info.State != StateStreaming || info.SessionID != "s1" || info.Players != 1 {
		t.Fatalf("after subscribe: %+v", info)
	}
	// Another session cannot take a leased streamer.
	other := h.playerUp("P1", sessionToken(t, signer, "s2", "ue-1"))
	other.send(`{"type":"subscribe","streamerId":"ue-1"}`)
	other.expectRaw(`{"type":"subscribeFailed","message":"Streamer ue-1 is leased to another session."}`)
	// An unsubscribed token player is auto-subscribed to its own streamer.
	s3p := h.playerUp("P2", sessionToken(t, signer, "s3", "ue-3"))
	s3p.send(`{"type":"answer","sdp":"v=0\r\n"}`)
	s3.expectRaw(`{"type":"playerConnected","playerId":"Player6","dataChannel":true,"sfu":false}`)
	s3.expectRaw(`{"type":"answer","sdp":"v=0\r\n","playerId":"Player6"}`)
	// An idle streamer is claimed by a valid session token.
	if info, _ := h.srv.Registry().Get("ue-3"); info.SessionID != "s3" || info.State != StateStreaming {
		t.Fatalf("implicit claim: %+v", info)
	}
	// The player leaves: the lease is kept for LeaseGrace, then lapses.
	p.hangUp()
	s1.expect("playerDisconnected")
	if info, _ := h.srv.Registry().Get("ue-1"); info.State != StateLeased {
		t.Fatalf("after leave: %+v", info)
	}
	clk.Add(Default().LeaseGrace + time.Minute)
	if info, _ := h.srv.Registry().Get("ue-1"); info.State != StateIdle || info.SessionID != "" {
		t.Fatalf("after grace: %+v", info)
	}
	for _, c := range []*client{s1, s3, other, s3p} {
		c.sync()
	}
	checkGolden(t, "transcript_token_mode", h.tr.String())
}

// hooks records LeaseHooks calls.
type hooks struct {
	mu     sync.Mutex
	calls  []string
	reject error
}

func (k *hooks) add(s string) {
	k.mu.Lock()
	k.calls = append(k.calls, s)
	k.mu.Unlock()
}

func (k *hooks) OnPlayerSubscribed(sid, streamerID string) {
	k.add("subscribed " + sid + " " + streamerID)
}
func (k *hooks) OnPlayerLeft(sid string) { k.add("left " + sid) }
func (k *hooks) CheckOffer(sid, _, sdp string) error {
	k.add("check " + sid + " " + strings.TrimSpace(sdp))
	if strings.Contains(sdp, "VP8") {
		return k.reject
	}
	return nil
}

func (k *hooks) get() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return strings.Join(k.calls, "; ")
}

func TestLeaseHooks(t *testing.T) {
	k := &hooks{reject: errors.New("no H264 in m=video")}
	h, signer, clk := tokenHarness(t, k)
	s := h.streamerUp("S1", streamerToken(t, signer, "ue-1", "eu-west-1", "H264"), "ue-1")
	if _, err := h.srv.Registry().LeaseIdle("eu-west-1", "h264", "s1", clk.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	p := h.playerUp("P0", sessionToken(t, signer, "s1", "ue-1"))
	p.send(`{"type":"subscribe","streamerId":"ue-1"}`)
	s.expect("playerConnected")
	s.send(`{"type":"offer","playerId":"Player0","sdp":"m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 H264/90000\r\n"}`)
	p.expect("offer")
	// A second offer without the leased codec is refused.
	s.send(`{"type":"offer","playerId":"Player0","sdp":"m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 VP8/90000\r\n"}`)
	p.expectRaw(`{"type":"subscribeFailed","message":"Streamer ue-1 offer rejected: no H264 in m=video"}`)
	s.expectRaw(`{"type":"playerDisconnected","playerId":"Player0"}`)
	if info, _ := h.srv.Registry().Get("ue-1"); info.State != StateIdle || info.SessionID != "" {
		t.Fatalf("lease not released: %+v", info)
	}
	p.sync()
	s.sync()
	// OnPlayerSubscribed runs on the player's goroutine, so it may come
	// after the streamer's first offer was checked; the rest is ordered.
	want := "check s1 m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 H264/90000; " +
		"check s1 m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 VP8/90000; left s1"
	if got := strings.Replace(k.get(), "subscribed s1 ue-1; ", "", 1); got != want || !strings.Contains(k.get(), "subscribed s1 ue-1") {
		t.Fatalf("hooks:\n got %q\nwant %q", got, want)
	}
}
