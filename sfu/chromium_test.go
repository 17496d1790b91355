package sfu

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
)

// TestChromiumReceivesVoice: headless Chromium with a fake microphone
// joins voice through testdata/voice.html and receives a Go publisher's
// audio (inbound-rtp packetsReceived > 0); the Go client hears Chromium's
// microphone. Needs node, /usr/bin/chromium and ../web/node_modules
// (playwright-core); missing ones fail the test.
func TestChromiumReceivesVoice(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test (-short)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not on PATH: %v", err)
	}
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	modules, err := filepath.Abs(filepath.Join("..", "web", "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(modules, "playwright-core")); err != nil {
		t.Fatalf("playwright-core not installed under %s: %v", modules, err)
	}

	e := newEnv(t, nil)
	// The Go publisher, next to the browser's avatar.
	pub := e.joinAll(2, tm{id: 1, room: "r"})[0]
	tok := e.session("browser", "browser-user", "r", 42, auth.Access{})
	e.sfu.UpdatePosition("browser", 0, 0, 0)

	page, err := os.ReadFile(filepath.Join("testdata", "voice.html"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v6/voice/", e.sfu.Handler())
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "chromium.cjs"), srv.URL+"/", tok, "browser", "4")
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "CHROMIUM="+chromium)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var out struct {
		Packets  int    `json:"packets"`
		State    string `json:"state"`
		Peer     string `json:"peer"`
		SendFmtp string `json:"sendFmtp"`
		Error    string `json:"error"`
	}
	_ = json.Unmarshal(stdout.Bytes(), &out)
	if runErr != nil || out.Packets == 0 {
		t.Fatalf("chromium: %v; result %s; stderr:\n%s", runErr, stdout.String(), stderr.String())
	}
	t.Logf("chromium received %d packets (peer %s, %s)", out.Packets, out.Peer, out.State)
	// Chrome took the answer's Opus parameters for its microphone.
	for _, p := range []string{"maxaveragebitrate=24000", "stereo=0", "useinbandfec=1"} {
		if !strings.Contains(out.SendFmtp, p) {
			t.Errorf("Chrome's microphone codec fmtp %q lacks %s", out.SendFmtp, p)
		}
	}
	// The Go client heard the browser's fake microphone (Opus from Chrome:
	// any first payload byte other than the Go publishers' ids).
	got, size := pub.receivedExcept(1)
	if got == 0 {
		t.Fatalf("Go client received nothing from Chromium")
	}
	t.Logf("Chrome's Opus: %d packets, %.1f payload bytes each (24 kbit/s in 20 ms frames is 60)", got, float64(size)/float64(got))
}
