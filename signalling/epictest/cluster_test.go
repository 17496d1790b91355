package epictest

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/signalling"
	"github.com/oshun/egbe-edge/signalling/streamer"
)

// clusteredEdge runs one signalling Server as edge id of the fleet on rdb.
func clusteredEdge(t *testing.T, rdb redis.UniversalClient, id string) (srv *signalling.Server, st, pl *httptest.Server) {
	t.Helper()
	cl, err := signalling.NewRedisCluster(rdb, id, nil)
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
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })

	srvA, _, plA := clusteredEdge(t, rdb, "edge-a")
	srvB, stB, _ := clusteredEdge(t, rdb, "edge-b")

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
