package edge

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/epicplayer"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// TestPxSFUInProcess: `--pxsfu 1 --dev-streamers 1` runs the Go SFU
// inside the edge: it connects to the edge's own SFU port, subscribes to
// the dev streamer (three simulcast layers) and answers players on the
// shared ICE port. A player of the edge's player port subscribes to SFU,
// plays the highest layer, switches to the lowest, and its input comes
// back echoed by the streamer; the SFU's metrics are on /metrics.
func TestPxSFUInProcess(t *testing.T) {
	te := startEdge(t, func(c *Config) { c.DevStreamers, c.PxSFU = 1, 1 })
	var p *epicplayer.Player
	testwait.Within(t, 30*time.Second, "a player of the SFU with video", func() bool {
		if p == nil {
			var err error
			p, err = epicplayer.Dial(context.Background(), epicplayer.Config{URL: "ws://" + te.addrs.PlayerWS, StreamerID: "SFU", Layer: 2})
			if err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-p.Done(): // subscribed before the SFU was listed: try again
			p.Close()
			p = nil
			return false
		default:
		}
		w, _ := p.Size()
		return w == 256
	})
	defer p.Close()
	if err := p.SetLayer(0); err != nil {
		t.Fatal(err)
	}
	testwait.Within(t, 20*time.Second, "the lowest layer", func() bool { w, _ := p.Size(); return w == 64 })
	testwait.Within(t, 20*time.Second, "the streamer's echo", func() bool {
		if p.ChannelsOpen() {
			_ = p.SendInput("hello from the edge test")
		}
		return p.HasResponse("hello from the edge test")
	})
	resp, err := http.Get(te.adminURL("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`egbe_pxsfu_players{sfu="SFU"} 1`, `egbe_pxsfu_upstream_connected{sfu="SFU"} 1`, `egbe_pxstream_sfus_connected 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
