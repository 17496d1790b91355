package edge

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// TestDemoQueueDemoFlow (point 13): with the waiting room armed, the demo
// page's hello is refused for a ticket; the page takes a place on /queue/,
// is admitted, comes back with the admission ticket and connects.
func TestDemoQueueDemoFlow(t *testing.T) {
	te := startEdge(t, nil)
	if code, st := te.call(t, http.MethodPost, "/api/v1/queue/arm", te.operator(t), map[string]any{"armed": true}); code != http.StatusOK {
		t.Fatalf("arm: %d %v", code, st)
	}
	var r struct {
		OK         bool     `json:"ok"`
		State      string   `json:"state"`
		SessionID  string   `json:"sessionId"`
		TicketUsed bool     `json:"ticketUsed"`
		Visited    []string `json:"visited"`
		Log        []string `json:"log"`
	}
	runNode(t, "roomflow.mjs", 90*time.Second, &r, te.httpURL(""))
	if !r.OK || r.State != "connected" || r.SessionID == "" || !r.TicketUsed {
		t.Fatalf("the demo did not connect through the queue: %+v", r)
	}
	q := slices.Index(r.Visited, "/queue/")
	if q < 1 || r.Visited[0] != "/" || r.Visited[len(r.Visited)-1] != "/" {
		t.Fatalf("pages visited %v, want / -> /queue/ -> /", r.Visited)
	}
	if n, _ := te.metric(t, "egbe_admission_admits_total", nil); n < 1 {
		t.Fatal("no admission handed out")
	}
}

// TestQueuePageStates (point 13): the queue page shows an open room as
// "no line" (never "held until soon"), a frozen one as paused with no wait
// quoted (still polling), and a lost place as lost, polling no more.
func TestQueuePageStates(t *testing.T) {
	te := startEdge(t, nil)
	type view struct {
		Shown           string `json:"shown"`
		Polls           int    `json:"polls"`
		Title           string `json:"title"`
		Wait            string `json:"wait"`
		Held            string `json:"held"`
		AdmittedVisible bool   `json:"admittedVisible"`
		RejoinVisible   bool   `json:"rejoinVisible"`
	}
	var open struct {
		OpenView view `json:"openView"`
	}
	runNode(t, "queuestates.mjs", 60*time.Second, &open, te.httpURL(""), "open")
	if v := open.OpenView; v.Shown != "open" || v.Title != "No line right now" || strings.Contains(v.Held, "soon") || !v.AdmittedVisible {
		t.Fatalf("open room: %+v", v)
	}
	op := te.operator(t)
	for _, c := range []struct{ path, key string }{{"/api/v1/queue/arm", "armed"}, {"/api/v1/queue/freeze", "frozen"}} {
		if code, st := te.call(t, http.MethodPost, c.path, op, map[string]any{c.key: true}); code != http.StatusOK {
			t.Fatalf("%s: %d %v", c.path, code, st)
		}
	}
	var paused struct {
		PausedView     view `json:"pausedView"`
		GoneView       view `json:"goneView"`
		PollsAfterGone int  `json:"pollsAfterGone"`
	}
	runNode(t, "queuestates.mjs", 60*time.Second, &paused, te.httpURL(""), "paused")
	if v := paused.PausedView; v.Shown != "paused" || v.Title != "The line is paused" || !strings.Contains(v.Wait, "nobody is getting in") || v.Polls < 3 {
		t.Fatalf("frozen room: %+v", v)
	}
	if v := paused.GoneView; v.Shown != "gone" || v.Title != "You lost your place" || !v.RejoinVisible || paused.PollsAfterGone != 0 {
		t.Fatalf("lost place: %+v (%d polls after)", v, paused.PollsAfterGone)
	}
}

// TestEpicFrontendOutlivesIdleRule (point 8): Epic's own frontend, in
// token mode through the edge's matchmaker, plays the synthetic streamer;
// the edge's clock moves 160 s (past the 150 s idle cut) and the stream
// goes on: an unmodified client, whose input the broker never sees, is
// not cut as idle.
func TestEpicFrontendOutlivesIdleRule(t *testing.T) {
	node := epicTools(t)
	page := epicPage(t)
	clk := newTestClock()
	te := startEdge(t, chain(withClock(clk), func(c *Config) {
		c.PxstreamAuth = "token"
		c.DevStreamers = 1
	}))
	testwait.Within(t, 20*time.Second, "the dev streamer", func() bool { return te.px.mm.Dashboard().Totals.Idle >= 1 })
	tok := te.accessToken(t, auth.Access{Subject: "epic-fan", Entitlement: "paid", Region: "us-east"})
	code, m := te.matchAs(t, tok, nil)
	if code != http.StatusOK {
		t.Fatalf("match: %d %v", code, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("..", "web", "epic", "hold.mjs"), page.URL+"/index.html?ss="+url.QueryEscape(str(m, "signalling_url")))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	if !lines.Scan() || !strings.Contains(lines.Text(), `"ok":true`) {
		_ = cmd.Wait()
		t.Fatalf("the frontend did not play: %s\n%s", lines.Text(), stderr.String())
	}
	clk.Advance(160 * time.Second)
	fmt.Fprintln(stdin, "advanced")
	var last string
	for lines.Scan() {
		last = lines.Text()
	}
	waitErr := cmd.Wait()
	var r struct {
		OK     bool            `json:"ok"`
		Before json.RawMessage `json:"before"`
		After  json.RawMessage `json:"after"`
	}
	if err := json.Unmarshal([]byte(last), &r); err != nil || !r.OK || waitErr != nil {
		t.Fatalf("after 160 s of edge time: %s (%v, %v)\n%s", last, err, waitErr, stderr.String())
	}
}

// epicTools finds node and fails (never skips) without Chromium or the
// npm packages Epic's frontend test needs.
func epicTools(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required: %v", err)
	}
	if _, err := os.Stat("/usr/bin/chromium"); err != nil && os.Getenv("CHROMIUM") == "" {
		t.Fatalf("chromium is required: %v", err)
	}
	for _, p := range []string{"node_modules/.bin/esbuild", "node_modules/playwright-core", "node_modules/@epicgames-ps/lib-pixelstreamingfrontend-ue5.5"} {
		if _, err := os.Stat(filepath.Join("..", "web", p)); err != nil {
			t.Fatalf("web/%s missing (run npm ci in web/): %v", p, err)
		}
	}
	return node
}
