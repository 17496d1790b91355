package pxsfu

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/oshun/egbe-edge/internal/epicplayer"
	"github.com/oshun/egbe-edge/internal/iceport"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/signalling"
	"github.com/oshun/egbe-edge/signalling/streamer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// failsafe bounds every wait so a broken build fails instead of hanging.
const failsafe = 30 * time.Second

func wsURL(s *httptest.Server) string { return "ws" + strings.TrimPrefix(s.URL, "http") }

// stack is a signalling server (the edge's broker on three loopback
// ports), an ICE port, and the Go SFU connected to the SFU port.
type stack struct {
	t               testing.TB
	srv             *signalling.Server
	st, pl, sfuPort *httptest.Server
	port            *iceport.Port
	sfu             *SFU
	prom            *prometheus.Registry
	cancel          context.CancelFunc
	done            chan error
	inputMu         sync.Mutex
	inputs          map[string][]string // streamer side: player id -> UIInteraction texts
	stopStreamer    context.CancelFunc
	streamerDone    chan error
}

func newStack(t testing.TB, mutate func(*Config)) *stack {
	t.Helper()
	srv, err := signalling.New(signalling.Default(), signalling.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	port, err := iceport.Listen(iceport.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{t: t, srv: srv, port: port, prom: prometheus.NewRegistry(), inputs: map[string][]string{},
		st: httptest.NewServer(srv.StreamerHandler()), pl: httptest.NewServer(srv.PlayerHandler()),
		sfuPort: httptest.NewServer(srv.SFUHandler())}
	cfg := Default()
	cfg.URL = wsURL(s.sfuPort)
	cfg.RetrySubscribe = 200 * time.Millisecond
	cfg.Reconnect = 100 * time.Millisecond
	cfg.KeyframeInterval = 500 * time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s.sfu, err = New(cfg, Deps{Port: port, Registerer: s.prom, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan error, 1)
	go func() { s.done <- s.sfu.Run(ctx) }()
	t.Cleanup(s.close)
	return s
}

func (s *stack) close() {
	s.stopStreamerNow()
	s.cancel()
	if err := <-s.done; err != nil {
		s.t.Errorf("SFU Run: %v", err)
	}
	s.srv.Close()
	s.st.Close()
	s.pl.Close()
	s.sfuPort.Close()
	_ = s.port.Close()
}

// startStreamer runs the synthetic simulcast streamer as DefaultStreamer.
func (s *stack) startStreamer(mutate func(*streamer.Config)) {
	s.t.Helper()
	cfg := streamer.Default()
	cfg.URL, cfg.ID = wsURL(s.st), "DefaultStreamer"
	cfg.IncludeLoopback = true
	cfg.MinBackoff, cfg.MaxBackoff = 20*time.Millisecond, 100*time.Millisecond
	cfg.Simulcast = true
	cfg.Width, cfg.Height, cfg.FPS = 256, 128, 15
	cfg.OnInput = func(pid string, msg []byte) {
		if text, err := decodeUI(msg); err == nil {
			s.inputMu.Lock()
			s.inputs[pid] = append(s.inputs[pid], text)
			s.inputMu.Unlock()
		}
	}
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopStreamer, s.streamerDone = cancel, make(chan error, 1)
	go func() { s.streamerDone <- streamer.Run(ctx, cfg) }()
}

func (s *stack) stopStreamerNow() {
	if s.stopStreamer == nil {
		return
	}
	s.stopStreamer()
	if err := <-s.streamerDone; err != nil {
		s.t.Errorf("streamer.Run: %v", err)
	}
	s.stopStreamer = nil
}

// inputFrom reports whether the streamer saw text from player pid.
func (s *stack) inputFrom(pid, text string) bool {
	s.inputMu.Lock()
	defer s.inputMu.Unlock()
	for _, x := range s.inputs[pid] {
		if x == text {
			return true
		}
	}
	return false
}

// listed reports whether a player sees id in streamerList.
func (s *stack) listed(id string) bool {
	ws, _, err := websocket.DefaultDialer.Dial(wsURL(s.pl), nil)
	if err != nil {
		return false
	}
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := ws.ReadMessage(); err != nil { // config
		return false
	}
	if ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"listStreamers"}`)) != nil {
		return false
	}
	var m struct{ IDs []string }
	if ws.ReadJSON(&m) != nil {
		return false
	}
	return slices.Contains(m.IDs, id)
}

// player connects an Epic-protocol pion player to the SFU (once the SFU
// is listed, as Epic's frontend waits for its streamer).
func (s *stack) player(layer int) *epicplayer.Player {
	s.t.Helper()
	testwait.Within(s.t, failsafe, "the SFU listed", func() bool { return s.listed("SFU") })
	p, err := epicplayer.Dial(context.Background(), epicplayer.Config{URL: wsURL(s.pl), StreamerID: "SFU", Layer: layer})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(p.Close)
	return p
}

func (s *stack) refusals(reason string) float64 {
	return testutil.ToFloat64(s.sfu.met.refusals.WithLabelValues(reason))
}

// waitSize waits until p decodes frames of width w (new frames after the
// call, so a stale size does not count).
func waitSize(t testing.TB, p *epicplayer.Player, w int) {
	t.Helper()
	testwait.Within(t, failsafe, "frames of width "+itoa(w), func() bool {
		gw, _ := p.Size()
		return gw == w
	})
	f := p.Frames()
	testwait.Within(t, failsafe, "more frames of width "+itoa(w), func() bool {
		gw, _ := p.Size()
		return gw == w && p.Frames() > f+2
	})
}
