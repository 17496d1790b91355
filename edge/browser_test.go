package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
)

// runNode runs a browser-test script under web/browsertest with args and
// decodes the JSON it prints last. Node, Chromium and the npm packages are
// required: scripts/test.sh installs them, and this fails loudly without.
func runNode(t *testing.T, script string, timeout time.Duration, out any, args ...string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required for browser tests (scripts/test.sh installs it): %v", err)
	}
	if _, err := os.Stat("/usr/bin/chromium"); err != nil && os.Getenv("CHROMIUM") == "" {
		t.Fatalf("chromium is required for browser tests (scripts/test.sh installs it): %v", err)
	}
	dir, err := filepath.Abs(filepath.Join("..", "web", "browsertest"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "..", "node_modules", "playwright-core")); err != nil {
		t.Fatalf("web/node_modules is missing: run scripts/test.sh (npm ci in web/): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{filepath.Join(dir, script)}, args...)...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstderr:\n%s\nstdout:\n%s", script, err, stderr.String(), stdout.String())
	}
	lines := bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n"))
	if err := json.Unmarshal(lines[len(lines)-1], out); err != nil {
		t.Fatalf("%s printed %q: %v\nstderr:\n%s", script, stdout.String(), err, stderr.String())
	}
}

// TestDemoPageEveryTransport: headless Chromium opens the demo page and
// completes a session over each transport, WebTransport included (pinned
// with serverCertificateHashes), receiving pongs and world updates.
func TestDemoPageEveryTransport(t *testing.T) {
	te := startEdge(t, nil)
	var results map[string]struct {
		OK        bool            `json:"ok"`
		State     string          `json:"state"`
		Transport string          `json:"transport"`
		SessionID string          `json:"sessionId"`
		ShardID   string          `json:"shardId"`
		InView    int             `json:"inView"`
		Counts    map[string]int  `json:"counts"`
		Errors    json.RawMessage `json:"errors"`
		Log       []string        `json:"log"`
		Console   []string        `json:"console"`
	}
	kinds := []string{"webtransport", "webrtc", "websocket"}
	runNode(t, "demo.mjs", 120*time.Second, &results, append([]string{te.httpURL("")}, kinds...)...)
	for _, k := range kinds {
		r, ok := results[k]
		if !ok {
			t.Errorf("%s: no result", k)
			continue
		}
		if !r.OK || r.Transport != k || r.SessionID == "" || r.ShardID != DevShardName || r.InView == 0 {
			t.Errorf("%s: session not established: %+v", k, r)
		}
	}
}

// TestDemoPageResumesThroughBalancer: the demo page, served through a
// load balancer in front of two edge processes (one Redis, one reference
// shard), loses its WebSocket when the edge holding it is killed
// (SIGKILL) and resumes the same session on the other edge by itself,
// with its resume token, and world updates flow again.
func TestDemoPageResumesThroughBalancer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	edges := startOneShardFleet(t, ctx, 2, 20, strings.Repeat("balancer-secret-", 3))

	// The balancer: everything to edge 0 until the test kills it, then
	// everything to edge 1 (as a health-checking balancer would).
	var backend atomic.Pointer[url.URL]
	first, _ := url.Parse(edges[0].HTTPBase)
	backend.Store(first)
	var toSecond atomic.Int32
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		u := backend.Load()
		if u.String() == edges[1].HTTPBase {
			toSecond.Add(1)
		}
		r.SetURL(u)
	}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /__test/kill-edge", func(w http.ResponseWriter, _ *http.Request) {
		if err := edges[0].Kill(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		second, _ := url.Parse(edges[1].HTTPBase)
		backend.Store(second)
	})
	mux.Handle("/", proxy)
	lb := httptest.NewServer(mux)
	defer lb.Close()

	type view struct {
		OK        bool            `json:"ok"`
		State     string          `json:"state"`
		SessionID string          `json:"sessionId"`
		ShardID   string          `json:"shardId"`
		Resumes   int             `json:"resumes"`
		Updates   int             `json:"updates"`
		Errors    json.RawMessage `json:"errors"`
		Log       []string        `json:"log"`
	}
	var res struct {
		Phase   string   `json:"phase"`
		Before  view     `json:"before"`
		After   view     `json:"after"`
		Console []string `json:"console"`
	}
	runNode(t, "resume.mjs", 120*time.Second, &res, lb.URL)
	if res.Phase != "resume" || !res.Before.OK {
		t.Fatalf("no session before the kill: %+v", res)
	}
	if !res.After.OK || res.After.SessionID != res.Before.SessionID || res.After.ShardID != "s1" || res.After.Resumes < 1 {
		t.Fatalf("the page did not resume session %s on the other edge: %+v", res.Before.SessionID, res)
	}
	if toSecond.Load() == 0 {
		t.Fatal("nothing reached the second edge")
	}
	t.Logf("session %s resumed after the kill (%d resume, %d world updates in all)", res.After.SessionID, res.After.Resumes, res.After.Updates)
}

// TestDemoVoiceTwoTabs: two demo tabs join voice in one squad with fake
// microphones and each receives the other's audio through the SFU.
func TestDemoVoiceTwoTabs(t *testing.T) {
	te := startEdge(t, nil)
	var results map[string]struct {
		OK             bool     `json:"ok"`
		State          string   `json:"state"`
		InboundPackets int      `json:"inboundPackets"`
		Error          string   `json:"error"`
		Log            []string `json:"log"`
		Console        []string `json:"console"`
	}
	runNode(t, "voice.mjs", 120*time.Second, &results, te.httpURL(""))
	for _, tab := range []string{"a", "b"} {
		if r := results[tab]; !r.OK {
			t.Errorf("tab %s did not hear the other: %+v", tab, r)
		}
	}
}

// TestDemoVoiceAcrossEdges: two demo tabs on two edges of a fleet join
// voice in one room. The room is mixed on one edge, so one tab is told
// where (409 voice_room_elsewhere), moves its realtime session there by
// itself (a cross-origin resume, same session id) and joins; each hears
// the other.
func TestDemoVoiceAcrossEdges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	edges := startOneShardFleet(t, ctx, 2, 10, strings.Repeat("voice-demo-secret-", 3))
	var results map[string]struct {
		OK             bool     `json:"ok"`
		State          string   `json:"state"`
		InboundPackets int      `json:"inboundPackets"`
		Session        string   `json:"session"`
		APIBase        string   `json:"apiBase"`
		Resumes        int      `json:"resumes"`
		Error          string   `json:"error"`
		Log            []string `json:"log"`
		Console        []string `json:"console"`
	}
	runNode(t, "voice.mjs", 120*time.Second, &results, edges[0].HTTPBase, edges[1].HTTPBase)
	a, b := results["a"], results["b"]
	for _, name := range []string{"a", "b"} {
		if r := results[name]; !r.OK {
			t.Errorf("tab %s did not hear the other: %+v", name, r)
		}
	}
	// Exactly one tab moved, to the other tab's edge, with its session.
	movedA := a.APIBase == edges[1].HTTPBase && a.Resumes == 1
	movedB := b.APIBase == edges[0].HTTPBase && b.Resumes == 1
	if movedA == movedB || (!movedA && a.APIBase != "") || (!movedB && b.APIBase != "") {
		t.Fatalf("want exactly one tab moved to the other's edge: a=%+v b=%+v", a, b)
	}
}

// TestOpsPage: the operator page in headless Chromium, as an operator
// uses it. On a dev edge it mints its own operator token, draws its charts
// from live metrics (time axes, whole numbers for counts, series told
// apart by dash and marker), drives the waiting room with its buttons
// (arm, freeze, unfreeze, halve, arm a region) and revokes a live session
// from its row; on a prod edge it asks for a token and takes a pasted one.
// The edges' own APIs confirm every change. The screenshot goes to
// artifacts/.
func TestOpsPage(t *testing.T) {
	te := startEdge(t, func(c *Config) { c.DevStreamers = 1 })
	prod := startProdEdge(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := te.dial(t, "websocket", false)
	h, err := c.Hello(ctx, helloFor(te.devToken(t, "operator-watch")))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs(filepath.Join("..", "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "ops-dashboard.png")
	var r struct {
		OK     bool           `json:"ok"`
		Error  string         `json:"error"`
		Region string         `json:"region"`
		Steps  map[string]any `json:"steps"`
	}
	runNode(t, "opscontrols.mjs", 150*time.Second, &r, "http://"+te.addrs.Admin, h.GetSessionId(), shot,
		"http://"+prod.addrs.Admin, prod.operator(t))
	if !r.OK {
		t.Fatalf("operator page: %s; steps %v", r.Error, r.Steps)
	}
	st := te.queueState(t)
	regions, _ := st["armedRegions"].([]any)
	if st["armedGlobal"] != true || st["halved"] != true || st["frozen"] != false || len(regions) != 1 {
		t.Fatalf("the room after the page's clicks: %v (region %s)", st, r.Region)
	}
	if _, live := te.rt.gw.Session(h.GetSessionId()); live {
		t.Fatal("the session revoked on the page is still live")
	}
	if st := prod.queueState(t); st["armedGlobal"] != true {
		t.Fatalf("the prod room after the page's arm: %v", st)
	}
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
}

// TestQueuePage: with the waiting room armed, the queue page joins the
// line, shows the answer, and offers the Tier-2 fallback exit.
func TestQueuePage(t *testing.T) {
	te := startEdge(t, nil)
	op, err := te.Signer().IssueAccess(auth.Access{Subject: "ops-1", Roles: []string{"operator"}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, te.httpURL("/api/v1/queue/arm"), strings.NewReader(`{"region":"","armed":true}`))
	req.Header.Set("Authorization", "Bearer "+op)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("arm: %d", resp.StatusCode)
	}
	var r struct {
		OK     bool `json:"ok"`
		Status struct {
			Status      string `json:"status"`
			FallbackURL string `json:"fallbackUrl"`
			Region      string `json:"region"`
			Admission   string `json:"admissionTicket"`
			Position    int64  `json:"position"`
		} `json:"status"`
		FallbackHref string   `json:"fallbackHref"`
		Errors       []string `json:"errors"`
		Title        string   `json:"title"`
	}
	runNode(t, "queue.mjs", 60*time.Second, &r, te.httpURL(""))
	if !r.OK || r.FallbackHref == "" || r.Status.FallbackURL == "" {
		t.Fatalf("queue page: %+v", r)
	}
	if st := r.Status.Status; st != "queued" && st != "admitted" {
		t.Fatalf("queue page status %q (%+v)", st, r)
	}
	if r.Status.Status == "admitted" && r.Status.Admission == "" {
		t.Fatalf("admitted without an admission ticket: %+v", r)
	}
}
