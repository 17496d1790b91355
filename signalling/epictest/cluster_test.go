package epictest

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/signalling"
	"github.com/oshun/egbe-edge/signalling/streamer"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/redisstate"
)

// clusteredEdge runs one signalling Server as edge id of the fleet on
// conn, beating its membership as the edge process does.
func clusteredEdge(t *testing.T, conn *redisstate.Conn, id string) (srv *signalling.Server, st, pl *httptest.Server) {
	t.Helper()
	m, err := redisstate.NewMembers(conn, state.Member{ID: id}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	cl, err := signalling.NewCluster(id, signalling.FleetState{Streamers: redisstate.NewStreamers(conn),
		Inbox: redisstate.NewInbox(conn, 0, nil), Members: m, Health: conn}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err = signalling.New(signalling.Default(), signalling.Deps{Cluster: cl})
	if err != nil {
		t.Fatal(err)
	}
	st = httptest.NewServer(srv.StreamerHandler())
	pl = httptest.NewServer(srv.PlayerHandler())
	t.Cleanup(func() { srv.Close(); st.Close(); pl.Close() })
	return srv, st, pl
}

// TestEpicFrontendCrossEdge: two edges on one Redis; the synthetic
// streamer registers on edge B, Epic's frontend connects to edge A, lists
// the fleet's one streamer, subscribes by itself, and plays: offer, answer
// and ICE cross the edges through Redis.
func TestEpicFrontendCrossEdge(t *testing.T) {
	node := tools(t)
	page := bundle(t)
	addr, _ := redistest.Start(t)
	conn, err := redisstate.Open("redis://"+addr, redisstate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })

	srvA, _, plA := clusteredEdge(t, conn, "edge-a")
	srvB, stB, _ := clusteredEdge(t, conn, "edge-b")

	cfg := streamer.Default()
	cfg.URL, cfg.ID = wsURL(stB, ""), "StreamerOnB"
	startStreamer(t, cfg)
	testwait.For(t, "B's streamer in A's view of the fleet", func() bool {
		_, ok := srvA.Registry().Get("StreamerOnB")
		return ok
	})

	r := play(t, node, page, wsURL(plA, ""))
	if !strings.Contains(r.Codec, "video/H264") {
		t.Errorf("codecs %q: want video/H264", r.Codec)
	}
	if s, _ := srvB.Registry().Get("StreamerOnB"); s.Players != 0 && s.State != signalling.StateStreaming {
		t.Errorf("registry during play: %+v", s)
	}
}
