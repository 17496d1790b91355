package opsboard

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/redisstate"
)

// testRegistry is an edge's registry: a labelled gauge, a counter, a
// histogram, and a family that is not the edge's own.
type testRegistry struct {
	reg      *prometheus.Registry
	sessions *prometheus.GaugeVec
	drops    prometheus.Counter
	latency  prometheus.Histogram
}

func newTestRegistry(t *testing.T) *testRegistry {
	t.Helper()
	r := &testRegistry{
		reg:      prometheus.NewRegistry(),
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "egbe_shard_sessions"}, []string{"shard"}),
		drops:    prometheus.NewCounter(prometheus.CounterOpts{Name: "egbe_drops_total"}),
		latency:  prometheus.NewHistogram(prometheus.HistogramOpts{Name: "egbe_handshake_seconds"}),
	}
	other := prometheus.NewGauge(prometheus.GaugeOpts{Name: "process_widgets"})
	other.Set(9)
	r.reg.MustRegister(r.sessions, r.drops, r.latency, other)
	return r
}

func value(fams Families, fam string, labels map[string]string) (float64, bool) {
	for _, s := range fams[fam] {
		if len(s.Labels) == len(labels) {
			match := true
			for k, v := range labels {
				match = match && s.Labels[k] == v
			}
			if match {
				return s.Value, true
			}
		}
	}
	return 0, false
}

// TestGather: counters and gauges give their values, histograms their
// sample counts; labels are kept.
func TestGather(t *testing.T) {
	r := newTestRegistry(t)
	r.sessions.WithLabelValues("s1").Set(3)
	r.drops.Add(2)
	r.latency.Observe(0.1)
	r.latency.Observe(0.2)
	fams, err := Gather(r.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		fam    string
		labels map[string]string
		want   float64
	}{
		{"egbe_shard_sessions", map[string]string{"shard": "s1"}, 3},
		{"egbe_drops_total", map[string]string{}, 2},
		{"egbe_handshake_seconds", map[string]string{}, 2},
		{"process_widgets", map[string]string{}, 9},
	} {
		if v, ok := value(fams, c.fam, c.labels); !ok || v != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.fam, c.labels, v, ok, c.want)
		}
	}
	if pub := Published(fams); len(pub["process_widgets"]) != 0 || len(pub["egbe_drops_total"]) != 1 {
		t.Errorf("published families: %v; want the egbe_* ones only", pub)
	}
}

// TestSum: series with the same family and labels add up across edges;
// other label sets stay apart; a snapshot that does not decode is skipped.
func TestSum(t *testing.T) {
	a, _ := json.Marshal(Families{"egbe_shard_sessions": {{Labels: map[string]string{"shard": "s1"}, Value: 2}, {Labels: map[string]string{"shard": "s2"}, Value: 1}}})
	b, _ := json.Marshal(Families{"egbe_shard_sessions": {{Labels: map[string]string{"shard": "s1"}, Value: 5}}, "egbe_drops_total": {{Labels: map[string]string{}, Value: 4}}})
	got := Sum(map[string][]byte{"a": a, "b": b, "bad": []byte("{not json")})
	for _, c := range []struct {
		fam    string
		labels map[string]string
		want   float64
	}{
		{"egbe_shard_sessions", map[string]string{"shard": "s1"}, 7},
		{"egbe_shard_sessions", map[string]string{"shard": "s2"}, 1},
		{"egbe_drops_total", map[string]string{}, 4},
	} {
		if v, ok := value(got, c.fam, c.labels); !ok || v != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.fam, c.labels, v, ok, c.want)
		}
	}
	if n := len(got["egbe_shard_sessions"]); n != 2 {
		t.Errorf("%d session series, want 2", n)
	}
}

// TestFleetOverRedis: two edges' dashboards publish on one Redis board;
// either serves the fleet's figures summed (and its own with
// ?scope=edge), and Total counts the fleet's sessions. Without a board a
// dashboard serves and totals its own figures only.
func TestFleetOverRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	conn := redisstate.New(rdb, redisstate.Options{})
	board := redisstate.NewFleetBoard(conn)
	// The board shows live members of the fleet only.
	for _, id := range []string{"edge-a", "edge-b"} {
		m, err := redisstate.NewMembers(conn, state.Member{ID: id}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Beat(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ra, rb := newTestRegistry(t), newTestRegistry(t)
	ra.sessions.WithLabelValues("s1").Set(2)
	rb.sessions.WithLabelValues("s1").Set(3)
	rb.sessions.WithLabelValues("s2").Set(4)
	da, db := New("edge-a", ra.reg, board, nil), New("edge-b", rb.reg, board, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(cancel)
	wg.Go(func() { _ = da.Run(ctx) })
	wg.Go(func() { _ = db.Run(ctx) })

	hs := httptest.NewServer(da)
	t.Cleanup(hs.Close)
	get := func(query string) (int, Snapshot) {
		t.Helper()
		resp, err := http.Get(hs.URL + "/ops/metrics.json" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s Snapshot
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, s
	}
	testwait.For(t, "both edges on the board", func() bool {
		_, s := get("")
		return s.Fleet != nil && s.Fleet.Edges == 2
	})
	_, fleet := get("")
	if v, _ := value(fleet.Families, "egbe_shard_sessions", map[string]string{"shard": "s1"}); v != 5 {
		t.Errorf("fleet sessions on s1: %v, want 5", v)
	}
	if v, _ := value(fleet.Families, "egbe_shard_sessions", map[string]string{"shard": "s2"}); v != 4 {
		t.Errorf("fleet sessions on s2: %v, want 4", v)
	}
	if len(fleet.Families["process_widgets"]) != 0 {
		t.Error("a process family reached the fleet view")
	}
	if n, err := da.Total(ctx, "egbe_shard_sessions"); err != nil || n != 9 {
		t.Errorf("fleet total: %v %v, want 9", n, err)
	}

	_, own := get("?scope=edge")
	if own.Fleet != nil || len(own.Families["process_widgets"]) != 1 {
		t.Errorf("scope=edge: %+v; want this edge's own figures, without a fleet summary", own)
	}
	if v, _ := value(own.Families, "egbe_shard_sessions", map[string]string{"shard": "s1"}); v != 2 {
		t.Errorf("edge A's own sessions: %v, want 2", v)
	}

	lone := New("edge-c", rb.reg, nil, nil)
	if n, err := lone.Total(ctx, "egbe_shard_sessions"); err != nil || n != 7 {
		t.Errorf("a lone edge's total: %v %v, want 7", n, err)
	}
	if _, _, err := lone.Fleet(ctx); !errors.Is(err, ErrNoBoard) {
		t.Errorf("a lone edge's fleet: %v, want ErrNoBoard", err)
	}

	// Redis gone: the fleet view is unavailable, the edge's own is not.
	srv.Kill()
	if code, _ := get(""); code != http.StatusServiceUnavailable {
		t.Errorf("fleet view without Redis: %d, want 503", code)
	}
	if code, _ := get("?scope=edge"); code != http.StatusOK {
		t.Errorf("own view without Redis: %d, want 200", code)
	}
}
