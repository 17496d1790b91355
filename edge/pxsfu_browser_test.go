package edge

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/pxmux"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/signalling/streamer"
)

// epicPage bundles web/epic (Epic's frontend library with the test hooks)
// with esbuild and serves it.
func epicPage(t *testing.T) *httptest.Server {
	t.Helper()
	web, err := filepath.Abs(filepath.Join("..", "web"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"node_modules/.bin/esbuild", "node_modules/@epicgames-ps/lib-pixelstreamingfrontend-ue5.5"} {
		if _, err := os.Stat(filepath.Join(web, p)); err != nil {
			t.Fatalf("web/%s missing (run npm ci in web/, as scripts/test.sh does): %v", p, err)
		}
	}
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(web, "node_modules/.bin/esbuild"), filepath.Join(web, "epic/main.js"),
		"--bundle", "--format=esm", "--target=chrome120", "--log-level=warning", "--outfile="+filepath.Join(dir, "bundle.js"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("esbuild: %v\n%s", err, out)
	}
	html, err := os.ReadFile(filepath.Join(web, "epic/index.html"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.html"), html, 0o644); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(ts.Close)
	return ts
}

type sfuTab struct {
	Playing struct {
		OK             bool `json:"ok"`
		FrameWidth     int  `json:"frameWidth"`
		FramesReceived int  `json:"framesReceived"`
	} `json:"playing"`
	Low *struct {
		OK         bool `json:"ok"`
		FrameWidth int  `json:"frameWidth"`
	} `json:"low"`
	After *struct {
		OK             bool `json:"ok"`
		FrameWidth     int  `json:"frameWidth"`
		FramesReceived int  `json:"framesReceived"`
	} `json:"after"`
	LowAfter *struct {
		FrameWidth int `json:"frameWidth"`
	} `json:"lowAfter"`
	Echo struct {
		OK       bool   `json:"ok"`
		Response string `json:"response"`
	} `json:"echo"`
}

// TestEpicFrontendThroughPxSFU: Epic's own frontend, in three headless
// Chromium tabs, plays the synthetic simulcast streamer through the Go SFU
// running inside the edge (--pxsfu 1), all over the edge's ports. One tab
// picks Low and decodes the narrow layer while the others keep the full
// width; each tab's input reaches the streamer tagged with that tab's
// player id and the echo comes back to that tab. Both data-channel modes.
func TestEpicFrontendThroughPxSFU(t *testing.T) {
	page := epicPage(t)
	for _, multiplex := range []bool{false, true} {
		t.Run(fmt.Sprintf("multiplex=%v", multiplex), func(t *testing.T) {
			te := startEdge(t, func(c *Config) { c.PxSFU = 1 })
			var mu sync.Mutex
			inputs := map[string]string{} // text -> player id, as the streamer saw it
			cfg := streamer.Default()
			cfg.URL, cfg.ID = "ws://"+te.addrs.StreamerWS, "DefaultStreamer"
			cfg.IncludeLoopback, cfg.Simulcast, cfg.Multiplex = true, true, multiplex
			cfg.Width, cfg.Height, cfg.FPS = 256, 128, 15
			cfg.OnInput = func(pid string, msg []byte) {
				if text, err := pxmux.DecodeString(pxmux.UIInteraction, msg); err == nil {
					mu.Lock()
					inputs[text] = pid
					mu.Unlock()
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- streamer.Run(ctx, cfg) }()
			defer func() { cancel(); <-done }()
			testwait.Within(t, 20*time.Second, "the SFU subscribed", func() bool {
				resp, err := http.Get(te.adminURL("/metrics"))
				if err != nil {
					return false
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return strings.Contains(string(b), `egbe_pxsfu_upstream_connected{sfu="SFU"} 1`)
			})

			u := page.URL + "/index.html?ss=" + url.QueryEscape("ws://"+te.addrs.PlayerWS) + "&streamer=SFU"
			var out struct {
				OK      bool     `json:"ok"`
				High    int      `json:"high"`
				Tabs    []sfuTab `json:"tabs"`
				Console []string `json:"console"`
			}
			runNode(t, "../epic/sfu.mjs", 150*time.Second, &out, u, "3", "45000")
			t.Logf("tabs: %+v", out.Tabs)
			if !out.OK || len(out.Tabs) != 3 {
				t.Fatalf("Epic frontend through the SFU: %+v\nconsole: %v", out, out.Console)
			}
			if out.High != 256 {
				t.Fatalf("tabs play %d pixels wide, want the highest layer (256)", out.High)
			}
			for i, tab := range out.Tabs {
				if tab.Playing.FrameWidth != 256 {
					t.Errorf("tab %d started at width %d", i, tab.Playing.FrameWidth)
				}
			}
			if out.Tabs[0].Low == nil || out.Tabs[0].Low.FrameWidth != 64 {
				t.Errorf("tab 0 after Low decodes %+v, want width 64", out.Tabs[0].Low)
			}
			for i, tab := range out.Tabs[1:] {
				if tab.After == nil || tab.After.FrameWidth != 256 {
					t.Errorf("tab %d does not play the full width after tab 0 chose Low: %+v", i+1, tab.After)
				}
			}
			if out.Tabs[0].LowAfter == nil || out.Tabs[0].LowAfter.FrameWidth != 64 {
				t.Errorf("tab 0 left the low layer while the others played full width: %+v", out.Tabs[0].LowAfter)
			}
			// Each echo names the player id the streamer saw for that tab's
			// input, and the three ids differ.
			seen := map[string]bool{}
			re := regexp.MustCompile(`^echo (Player\d+) "tab-(\d)"$`)
			for i, tab := range out.Tabs {
				m := re.FindStringSubmatch(tab.Echo.Response)
				if m == nil || m[2] != fmt.Sprint(i) {
					t.Fatalf("tab %d echo %q", i, tab.Echo.Response)
				}
				mu.Lock()
				pid := inputs[fmt.Sprintf("%q", fmt.Sprintf("tab-%d", i))]
				mu.Unlock()
				if pid != m[1] || seen[pid] {
					t.Fatalf("tab %d: streamer saw its input as %q, echo says %q (ids so far %v)", i, pid, m[1], seen)
				}
				seen[pid] = true
			}
		})
	}
}
