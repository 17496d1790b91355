package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/signalling/streamer"
	"github.com/oshun/egbe-edge/web"
)

// get fetches url and returns status, content type and body.
func get(t *testing.T, url string) (int, string, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), b
}

var metaRE = regexp.MustCompile(`<meta name="egbe-pxstream" content="([^"]*)">`)

func pageSettingsOf(t *testing.T, body []byte) playerPageSettings {
	t.Helper()
	m := metaRE.FindSubmatch(body)
	if m == nil {
		t.Fatalf("no settings meta in %s", body)
	}
	var s playerPageSettings
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPlayerPageServed: /pxstream/ on the HTTP listener and / on the
// player port serve the page (with this edge's settings) and the embedded
// bundle; WebSocket players on the player port are unaffected.
func TestPlayerPageServed(t *testing.T) {
	te := startEdge(t, nil)
	status, ctype, body := get(t, te.httpURL("/pxstream/"))
	if status != http.StatusOK || !strings.HasPrefix(ctype, "text/html") {
		t.Fatalf("/pxstream/: %d %s", status, ctype)
	}
	if s := pageSettingsOf(t, body); s != (playerPageSettings{Auth: "none", Dev: true, Signalling: "/v6/pxstream/signalling",
		Match: "/api/v6/pxstream/match", DevToken: "/v6/dev/token"}) {
		t.Errorf("settings %+v", s)
	}
	bundle, _ := fs.ReadFile(web.Player(), "player.js")
	status, ctype, body = get(t, te.httpURL("/pxstream/player.js"))
	if status != http.StatusOK || !strings.Contains(ctype, "javascript") || !bytes.Equal(body, bundle) || len(bundle) < 100_000 {
		t.Errorf("/pxstream/player.js: %d %s %d bytes (embedded %d)", status, ctype, len(body), len(bundle))
	}
	if status, _, body = get(t, te.httpURL("/pxstream/THIRD_PARTY_LICENSES.txt")); status != http.StatusOK || !bytes.Contains(body, []byte("Epic Games")) {
		t.Errorf("licences: %d", status)
	}
	if status, _, _ = get(t, te.httpURL("/pxstream/nope.js")); status != http.StatusNotFound {
		t.Errorf("unknown asset: %d", status)
	}
	resp, err := http.Post(te.httpURL("/pxstream/"), "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /pxstream/: %d", resp.StatusCode)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noRedirect.Get(te.httpURL("/pxstream"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	noRedirect.CloseIdleConnections()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/pxstream/" {
		t.Errorf("/pxstream: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	// The player port: the page at /, players on any path.
	status, _, body = get(t, "http://"+te.addrs.PlayerWS+"/")
	if status != http.StatusOK {
		t.Fatalf("player port /: %d", status)
	}
	if s := pageSettingsOf(t, body); s.Signalling != "" || s.Match != "/api/v6/pxstream/match" {
		t.Errorf("player port settings %+v", s)
	}
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+te.addrs.PlayerWS+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	var m map[string]any
	if err := ws.ReadJSON(&m); err != nil || m["type"] != "config" {
		t.Fatalf("player on the player port: %v %v", m, err)
	}
	// The match API answers same-origin on the player port.
	resp, err = http.Post("http://"+te.addrs.PlayerWS+"/api/v6/pxstream/match", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("match on the player port: %d, want the matchmaker's 400", resp.StatusCode)
	}
}

// TestPlayerPageTokenSettings: in prod token mode the page carries no dev
// token endpoint.
func TestPlayerPageTokenSettings(t *testing.T) {
	te := startProdEdge(t, nil) // prod is ready only with a shard to serve
	_, _, body := get(t, te.httpURL("/pxstream/"))
	if s := pageSettingsOf(t, body); s != (playerPageSettings{Auth: "token", Signalling: "/v6/pxstream/signalling", Match: "/api/v6/pxstream/match"}) {
		t.Errorf("settings %+v", s)
	}
	if status, _, _ := get(t, "http://"+te.addrs.PlayerWS+"/v6/dev/token"); status == http.StatusOK {
		t.Error("dev token reachable on the player port in prod")
	}
}

// playerResult is what web/browsertest/pxplayer.mjs prints.
type playerResult struct {
	OK    bool   `json:"ok"`
	Mode  string `json:"mode"`
	Match *struct {
		StreamerID string `json:"streamer_id"`
		SessionID  string `json:"session_id"`
	} `json:"match"`
	Streamers          []string       `json:"streamers"`
	Picked             string         `json:"picked"`
	Events             map[string]int `json:"events"`
	FramesReceived     int            `json:"framesReceived"`
	LocalCandidateType string         `json:"localCandidateType"`
	IceServersAdded    int            `json:"iceServersAdded"`
	Errors             []string       `json:"errors"`
	HasUI              bool           `json:"hasUI"`
	Console            []string       `json:"console"`
}

func playPage(t *testing.T, pageURL string, timeout time.Duration) playerResult {
	t.Helper()
	var r playerResult
	runNode(t, "pxplayer.mjs", timeout+30*time.Second, &r, pageURL, strconv.Itoa(int(timeout.Milliseconds())))
	t.Logf("player page %s: ok=%v mode=%s streamers=%v picked=%q frames=%d candidate=%q events=%v errors=%v",
		pageURL, r.OK, r.Mode, r.Streamers, r.Picked, r.FramesReceived, r.LocalCandidateType, r.Events, r.Errors)
	return r
}

// TestPlayerPageDropInFirstStreamer: on the player port, Epic-style, with
// two dev streamers registered: the page connects straight to the player
// signalling, picks the first streamer instead of waiting for a choice,
// and plays it in Epic's stock UI.
func TestPlayerPageDropInFirstStreamer(t *testing.T) {
	te := startEdge(t, func(c *Config) { c.DevStreamers = 2 })
	testwait.Within(t, 20*time.Second, "two streamers", func() bool { return len(te.px.srv.Registry().Snapshot()) == 2 })
	r := playPage(t, "http://"+te.addrs.PlayerWS+"/", 40*time.Second)
	if !r.OK || r.Mode != "drop-in" || !r.HasUI {
		t.Fatalf("did not play: %+v", r)
	}
	if len(r.Streamers) != 2 || r.Picked != r.Streamers[0] {
		t.Errorf("streamers %v, picked %q: want the first of two", r.Streamers, r.Picked)
	}
}

// TestPlayerPageTokenMode: with token auth (dev), the page at /pxstream/
// gets a dev token itself, asks the match API, and plays the leased
// streamer.
func TestPlayerPageTokenMode(t *testing.T) {
	te := startEdge(t, func(c *Config) { c.DevStreamers = 1; c.PxstreamAuth = "token" })
	testwait.Within(t, 20*time.Second, "a streamer", func() bool { return len(te.px.srv.Registry().Snapshot()) == 1 })
	r := playPage(t, te.httpURL("/pxstream/"), 40*time.Second)
	if !r.OK || r.Mode != "token" || r.Match == nil || r.Match.StreamerID == "" || r.Match.SessionID == "" {
		t.Fatalf("did not play through a match: %+v", r)
	}
	if r.Picked != r.Match.StreamerID {
		t.Errorf("played %q, leased %q", r.Picked, r.Match.StreamerID)
	}
}

// TestPlayerPageForceTURN: Epic's ForceTURN flag (iceTransportPolicy
// relay; Epic's library then also drops every remote candidate that is not
// a relay) through the embedded TURN server, from the player page, with
// nothing but the credentials the edge put in the config message: the
// page adds no ICE server of its own, the dev streamer relays with the
// credential of its own config message. Chromium plays with a relay
// candidate selected, and the media crossed the embedded TURN server.
func TestPlayerPageForceTURN(t *testing.T) {
	te := startEdge(t, func(c *Config) { c.DevStreamers = 1 })
	testwait.Within(t, 20*time.Second, "a streamer", func() bool { return len(te.px.srv.Registry().Snapshot()) == 1 })
	r := playPage(t, te.httpURL("/pxstream/?ForceTURN=true"), 40*time.Second)
	if !r.OK || r.Mode != "drop-in" || r.IceServersAdded != 0 {
		t.Fatalf("did not play through TURN on the config message's credentials alone: %+v", r)
	}
	if r.LocalCandidateType != "relay" {
		t.Errorf("selected local candidate %q, want relay", r.LocalCandidateType)
	}
	if got := te.scrape(t, `egbe_turn_relayed_bytes_total{direction="peer_to_client"}`); got <= 0 {
		t.Errorf("the embedded TURN relayed %v bytes of media", got)
	}
	if got := te.scrape(t, `egbe_turn_allocations_total{transport="udp"}`); got < 2 {
		t.Errorf("UDP allocations %v: want the viewer's and the streamer's", got)
	}
}

// TestPlayerPageProdAccessToken: in prod (token mode, no dev token) the
// embedding page passes the access token in the fragment; the page
// matches with it and plays the leased streamer (a synthetic UE worker
// registered with a streamer token, as prod requires).
func TestPlayerPageProdAccessToken(t *testing.T) {
	te := startProdEdge(t, nil) // prod is ready only with a shard to serve
	stTok, err := te.Signer().IssueStreamer(auth.Streamer{StreamerID: "ProdStreamer", POP: devStreamerPOP, Codecs: []string{"H264"}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sc := streamer.Default()
	sc.URL, sc.ID, sc.Token, sc.IncludeLoopback = "ws://"+te.addrs.StreamerWS, "ProdStreamer", stTok, true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- streamer.Run(ctx, sc) }()
	t.Cleanup(func() { cancel(); <-done })
	testwait.Within(t, 20*time.Second, "the streamer", func() bool { return len(te.px.srv.Registry().Snapshot()) == 1 })

	// Without a token the page says what it needs.
	no := playPage(t, te.httpURL("/pxstream/"), 5*time.Second)
	if no.OK || len(no.Errors) == 0 || !strings.Contains(no.Errors[0], "access_token") {
		t.Errorf("prod page without a token: %+v", no)
	}
	access, err := te.Signer().IssueAccess(auth.Access{Subject: "viewer-7", Entitlement: "paid"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r := playPage(t, te.httpURL("/pxstream/?region=us-east#access_token="+access), 40*time.Second)
	if !r.OK || r.Mode != "token" || r.Match == nil || r.Match.StreamerID != "ProdStreamer" || r.Picked != "ProdStreamer" {
		t.Fatalf("prod page did not play the leased streamer: %+v", r)
	}
}

// TestDevStreamersLogWhereToWatch: with --dev-streamers the start-up log
// names the player page where they play, with its URL.
func TestDevStreamersLogWhereToWatch(t *testing.T) {
	cfg := testConfig()
	cfg.DevStreamers = 1
	buf := &lockedBuffer{}
	e, err := New(cfg, slog.New(slog.NewTextHandler(buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	want := "url=http://" + e.httpLn.Addr().String() + "/pxstream/"
	testwait.Within(t, 20*time.Second, "the player page's start-up line", func() bool { return strings.Contains(buf.String(), want) })
}
