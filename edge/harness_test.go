package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/testwait"
)

// testEdge is an edge running in-process on loopback ports.
type testEdge struct {
	*Edge
	addrs  Addrs
	cancel context.CancelFunc
	done   chan error
}

// Secrets for prod-mode tests: random text, as prod requires (a repeated
// letter is refused as low-entropy).
const (
	testJWTSecret  = "q7Vb2KxN9rT4mWz8Lc1Hs6Pd3Yf0Ga5Je2Ru7Xo9Ik4Bn"
	testTURNSecret = "Zt3Mw8Qe1Ra6Ly4Kp0Vs"
)

// testConfig is dev mode on 127.0.0.1:0 everywhere.
func testConfig() Config {
	cfg := Default()
	cfg.HTTP = "127.0.0.1:0"
	cfg.HTTPS = "127.0.0.1:0"
	cfg.ICEUDP = "127.0.0.1:0"
	cfg.StreamerWS = "127.0.0.1:0"
	cfg.PlayerWS = "127.0.0.1:0"
	cfg.SFUWS = "127.0.0.1:0"
	cfg.Admin = "127.0.0.1:0"
	cfg.TURN = "127.0.0.1:0"
	// Relays on any free port: every WebRTC client now gets TURN
	// credentials and allocates, and tests running in parallel (here and
	// in other packages' processes) would share the default 41 ports.
	cfg.TURNRelayPorts = ""
	cfg.DrainWindow = Duration(200 * time.Millisecond)
	return cfg
}

func startEdge(t testing.TB, mutate func(*Config)) *testEdge {
	t.Helper()
	cfg := testConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(&testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	e, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	te := &testEdge{Edge: e, addrs: e.Addrs(), cancel: cancel, done: make(chan error, 1)}
	go func() { te.done <- e.Run(ctx) }()
	t.Cleanup(func() { te.stop(t) })
	testwait.Within(t, 20*time.Second, "edge ready", func() bool {
		resp, err := http.Get(te.adminURL("/readyz"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return te
}

func (te *testEdge) stop(t testing.TB) {
	if te.cancel == nil {
		return
	}
	te.cancel()
	te.cancel = nil
	select {
	case err := <-te.done:
		if err != nil {
			t.Errorf("edge Run: %v", err)
		}
	case <-time.After(45 * time.Second):
		t.Errorf("edge did not stop within 45 s")
	}
}

func (te *testEdge) httpURL(path string) string  { return "http://" + te.addrs.HTTP + path }
func (te *testEdge) h3Base() string              { return "https://" + te.addrs.HTTPS }
func (te *testEdge) adminURL(path string) string { return "http://" + te.addrs.Admin + path }

func postJSON(t *testing.T, url string, body any) (*http.Response, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

func (te *testEdge) devToken(t *testing.T, sub string) string {
	t.Helper()
	resp, body := postJSON(t, te.httpURL("/v6/dev/token"), map[string]any{"sub": sub, "tenant": "tara-studio", "region": "gb", "entitlement": "free", "roles": []string{}})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("dev token: %d %s", resp.StatusCode, body)
	}
	var out struct{ Token string }
	if err := json.Unmarshal(body, &out); err != nil || out.Token == "" {
		t.Fatalf("dev token body %s: %v", body, err)
	}
	return out.Token
}

type testWriter struct{ t testing.TB }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimSpace(p)))
	return len(p), nil
}

// match asks te's matchmaker for a paid H.264 session in us-east, with an
// access token when tok is not empty; it returns the status and body.
func (te *testEdge) match(t *testing.T, tok string) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"client_region": "us-east", "codecs": []string{"H264"}, "entitlement": "paid"})
	req, _ := http.NewRequest(http.MethodPost, te.httpURL("/api/v6/pxstream/match"), bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}
