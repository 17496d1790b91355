package matchmaker

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/signalling"
	"github.com/oshun/egbe-edge/signalling/streamer"
)

// liveRig is the real broker (token mode) + registry + matchmaker on one
// test clock, with synthetic streamers.
type liveRig struct {
	srv    *signalling.Server
	mm     *Matchmaker
	signer *auth.Signer
	clock  *testClock
	st, pl *httptest.Server
}

func newLiveRig(t *testing.T) *liveRig {
	t.Helper()
	clk := newClock()
	signer, err := auth.New([]byte("0123456789abcdef0123456789abcdef"), nil) // tokens on real time
	if err != nil {
		t.Fatal(err)
	}
	fleet := &RegistryFleet{}
	cfg := Default()
	cfg.LoadCacheTTL = 0
	mm, err := New(cfg, Deps{Fleet: fleet, Signer: signer, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	scfg := signalling.Default()
	scfg.Auth = signalling.AuthToken
	srv, err := signalling.New(scfg, signalling.Deps{Signer: signer, Leases: mm.Hooks(), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	fleet.Reg = srv.Registry()
	r := &liveRig{srv: srv, mm: mm, signer: signer, clock: clk,
		st: httptest.NewServer(srv.StreamerHandler()), pl: httptest.NewServer(srv.PlayerHandler())}
	t.Cleanup(func() { srv.Close(); r.st.Close(); r.pl.Close() })
	return r
}

// streamer starts a synthetic streamer registered (by token) in pop with
// the advertised codecs; its offers always carry H.264.
func (r *liveRig) streamer(t *testing.T, id, pop string, codecs ...string) {
	t.Helper()
	tok, err := r.signer.IssueStreamer(auth.Streamer{StreamerID: id, POP: pop, Codecs: codecs}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := streamer.Default()
	cfg.URL, cfg.ID, cfg.Token = "ws"+strings.TrimPrefix(r.st.URL, "http"), id, tok
	cfg.IncludeLoopback = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- streamer.Run(ctx, cfg) }()
	t.Cleanup(func() { cancel(); <-done })
	testwait.For(t, "streamer "+id+" registered", func() bool { _, ok := r.srv.Registry().Get(id); return ok })
}

func (r *liveRig) state(id string) signalling.StreamerState {
	s, _ := r.srv.Registry().Get(id)
	return s.State
}

// TestLeaseExpiryEndToEnd: an unused lease returns the streamer to the
// pool in the live registry.
func TestLeaseExpiryEndToEnd(t *testing.T) {
	r := newLiveRig(t)
	r.streamer(t, "ue-euw1-0", "eu-west-1", "H264")
	ctx := context.Background()
	m, err := r.mm.Match(ctx, req("ie", "free", false))
	if err != nil {
		t.Fatal(err)
	}
	if m.StreamerID != "ue-euw1-0" || r.state(m.StreamerID) != signalling.StateLeased {
		t.Fatalf("match %+v, state %s", m, r.state(m.StreamerID))
	}
	if _, err := r.mm.Match(ctx, req("ie", "free", false)); refusalOf(t, err).Reason != ReasonNoPOPAvailable {
		t.Fatalf("second match: %v", err)
	}
	r.clock.Advance(auth.PxSessionDefaultTTL - time.Second)
	if r.state(m.StreamerID) != signalling.StateLeased {
		t.Fatal("lease lapsed early")
	}
	r.clock.Advance(time.Second)
	if st := r.state(m.StreamerID); st != signalling.StateIdle {
		t.Fatalf("after expiry: %s", st)
	}
	again, err := r.mm.Match(ctx, req("ie", "free", false))
	if err != nil || again.StreamerID != m.StreamerID {
		t.Fatalf("re-match after expiry: %+v %v", again, err)
	}
	d := r.mm.Dashboard()
	for _, p := range d.POPs {
		if p.ID == "eu-west-1" && (p.Sessions != 1 || p.Streamers["leased"] != 1 || p.Registered != 1) {
			t.Fatalf("dashboard %+v", p)
		}
	}
}

// TestCodecMismatchEndToEnd: a streamer that advertises AV1 but offers
// H.264 is caught by the matchmaker's hook in the broker: the player gets
// subscribeFailed and the lease is released.
func TestCodecMismatchEndToEnd(t *testing.T) {
	r := newLiveRig(t)
	r.streamer(t, "ue-liar", "us-east-1", "AV1")
	m, err := r.mm.Match(context.Background(), req("us-east", "paid", false, "AV1"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Codec != "AV1" {
		t.Fatalf("codec %s", m.Codec)
	}
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(r.pl.URL, "http")+"/?token="+m.Token, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	_ = ws.WriteJSON(map[string]any{"type": "subscribe", "streamerId": m.StreamerID})
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		var msg map[string]any
		if err := ws.ReadJSON(&msg); err != nil {
			t.Fatalf("waiting for subscribeFailed: %v", err)
		}
		if msg["type"] == "offer" {
			t.Fatal("mismatched offer reached the player")
		}
		if msg["type"] == "subscribeFailed" {
			if s, _ := msg["message"].(string); !strings.Contains(s, "codec") {
				t.Fatalf("subscribeFailed %q", s)
			}
			break
		}
	}
	testwait.For(t, "lease released", func() bool {
		s, _ := r.srv.Registry().Get(m.StreamerID)
		return s.State == signalling.StateIdle && s.SessionID == ""
	})
	if err := r.mm.Hooks().CheckOffer(m.SessionID, "", "m=video 9 X 96\r\na=rtpmap:96 H264/90000\r\n"); !errors.Is(err, ErrCodecNotOffered) {
		t.Fatalf("hook: %v", err)
	}
}
