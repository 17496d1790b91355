package edge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/admission"
	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/shard/shardsim"
	"github.com/oshun/egbe-edge/signalling/matchmaker"
)

// testClock is an edge clock a test moves by hand: budgets over a day,
// idle over minutes and the surge ladder over half hours run in seconds.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Now().Truncate(time.Second)} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// withClock runs the edge on clk, its admission rounds and surge
// controller every 20 ms of wall time.
func withClock(clk *testClock) func(*Config) {
	return func(c *Config) {
		c.test.now = clk.Now
		c.test.chargeEvery = 20 * time.Millisecond
		c.test.surgeEvery = 20 * time.Millisecond
	}
}

// chain applies several config mutations.
func chain(ms ...func(*Config)) func(*Config) {
	return func(c *Config) {
		for _, m := range ms {
			if m != nil {
				m(c)
			}
		}
	}
}

// accessToken mints an access token with the edge's signer.
func (te *testEdge) accessToken(t *testing.T, a auth.Access) string {
	t.Helper()
	if a.Tenant == "" {
		a.Tenant = "tara-studio"
	}
	tok, err := te.Signer().IssueAccess(a, 12*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// call posts body (JSON) to path with the bearer token and extra headers
// and decodes the JSON answer.
func (te *testEdge) call(t *testing.T, method, path, tok string, body any, hdr ...string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, te.httpURL(path), rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	if out == nil {
		out = map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, out
}

// matchAs asks for an H.264 stream in client region us-east.
func (te *testEdge) matchAs(t *testing.T, tok string, extra map[string]any, hdr ...string) (int, map[string]any) {
	t.Helper()
	body := map[string]any{"client_region": "us-east", "codecs": []string{"H264"}, "entitlement": "free"}
	for k, v := range extra {
		body[k] = v
	}
	return te.call(t, http.MethodPost, "/api/v6/pxstream/match", tok, body, hdr...)
}

// operator is an operator's access token.
func (te *testEdge) operator(t *testing.T) string {
	return te.accessToken(t, auth.Access{Subject: "cmdr", Roles: []string{"operator"}})
}

// queueState reads GET /api/v1/queue/state.
func (te *testEdge) queueState(t *testing.T) map[string]any {
	t.Helper()
	code, st := te.call(t, http.MethodGet, "/api/v1/queue/state", te.operator(t), nil)
	if code != http.StatusOK {
		t.Fatalf("queue state: %d %v", code, st)
	}
	return st
}

// metric sums the samples of family whose labels include want (what
// /metrics serves: the edge's registry).
func (te *testEdge) metric(t *testing.T, family string, want map[string]string) (float64, bool) {
	t.Helper()
	fams, err := te.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var f *dto.MetricFamily
	for _, x := range fams {
		if x.GetName() == family {
			f = x
		}
	}
	if f == nil {
		return 0, false
	}
	var sum float64
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, true
}

// audits reads the audit log's events named event ("" = all).
func audits(t *testing.T, path, event string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if event == "" || m["event"] == event {
			out = append(out, m)
		}
	}
	return out
}

// auditTo sends the edge's audit log to a file in the test's directory.
func auditTo(t *testing.T) (string, func(*Config)) {
	path := filepath.Join(t.TempDir(), "audit.log")
	return path, func(c *Config) { c.AuditLog = path }
}

// writeJSONFile writes v as JSON into the test's directory.
func writeJSONFile(t *testing.T, name string, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// topologyWith is the shipped topology with us-east-1 resized.
func topologyWith(t *testing.T, maxSessions, paidHeadroom int) string {
	t.Helper()
	topo := matchmaker.DefaultTopology()
	for i := range topo.POPs {
		if topo.POPs[i].ID == "us-east-1" {
			topo.POPs[i].MaxSessions, topo.POPs[i].PaidHeadroomSessions = maxSessions, paidHeadroom
		}
	}
	return writeJSONFile(t, "topology.json", topo)
}

// policyWith is the shipped policy, changed by mutate.
func policyWith(t *testing.T, mutate func(*admission.Policy)) string {
	t.Helper()
	p := admission.DefaultPolicy()
	mutate(p)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return writeJSONFile(t, "policy.json", p)
}

// offerSDP is a minimal UE-style offer carrying H.264 in m=video.
const offerSDP = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=rtpmap:96 H264/90000\r\n"

// rawStreamer is a UE worker speaking Epic's streamer protocol on the
// edge's streamer port: it identifies with its token's id and answers
// every playerConnected with an H.264 offer. It carries no media.
type rawStreamer struct {
	t  testing.TB
	id string
	ws *websocket.Conn

	wmu  sync.Mutex
	mu   sync.Mutex
	seen []string // player ids connected, in order
	done chan struct{}
}

func (te *testEdge) rawStreamer(t testing.TB, id, pop string) *rawStreamer {
	t.Helper()
	tok, err := te.Signer().IssueStreamer(auth.Streamer{StreamerID: id, POP: pop, Codecs: []string{"H264"}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+te.addrs.StreamerWS+"/?token="+tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &rawStreamer{t: t, id: id, ws: ws, done: make(chan struct{})}
	go s.read()
	t.Cleanup(func() { ws.Close(); <-s.done })
	return s
}

func (s *rawStreamer) send(v any) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.ws.WriteJSON(v)
}

func (s *rawStreamer) read() {
	defer close(s.done)
	for {
		var m map[string]any
		if err := s.ws.ReadJSON(&m); err != nil {
			return
		}
		switch m["type"] {
		case "identify":
			s.send(map[string]any{"type": "endpointId", "id": s.id})
		case "playerConnected":
			pid, _ := m["playerId"].(string)
			s.mu.Lock()
			s.seen = append(s.seen, pid)
			s.mu.Unlock()
			s.send(map[string]any{"type": "offer", "playerId": pid, "sdp": offerSDP})
		case "ping":
			s.send(map[string]any{"type": "pong", "time": m["time"]})
		}
	}
}

// lastPlayer is the last player that connected to s.
func (s *rawStreamer) lastPlayer() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen) == 0 {
		return ""
	}
	return s.seen[len(s.seen)-1]
}

// rawStreamers registers n streamers in pop and waits until the edge's
// registry counts them idle.
func (te *testEdge) rawStreamers(t testing.TB, prefix, pop string, n int) []*rawStreamer {
	t.Helper()
	out := make([]*rawStreamer, n)
	for i := range out {
		out[i] = te.rawStreamer(t, prefix+strconv.Itoa(i), pop)
	}
	testwait.Within(t, 20*time.Second, "streamers registered", func() bool {
		for _, row := range te.px.mm.Dashboard().POPs {
			if row.ID == pop {
				return row.Registered >= n
			}
		}
		return false
	})
	return out
}

// player is a browser's signalling socket for one match.
type player struct {
	t      *testing.T
	ws     *websocket.Conn
	mu     sync.Mutex
	msgs   []map[string]any
	closed *websocket.CloseError
	done   chan struct{}
}

// play connects to the match's signalling URL, subscribes to its streamer
// and waits for the offer.
func play(t *testing.T, match map[string]any) *player {
	t.Helper()
	u, _ := match["signalling_url"].(string)
	ws, _, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &player{t: t, ws: ws, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			var m map[string]any
			err := ws.ReadJSON(&m)
			p.mu.Lock()
			if err != nil {
				if ce, ok := err.(*websocket.CloseError); ok {
					p.closed = ce
				} else {
					p.closed = &websocket.CloseError{Code: -1, Text: err.Error()}
				}
				p.mu.Unlock()
				return
			}
			p.msgs = append(p.msgs, m)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() { ws.Close(); <-p.done })
	_ = ws.WriteJSON(map[string]any{"type": "subscribe", "streamerId": match["streamer_id"]})
	testwait.Within(t, 20*time.Second, "the streamer's offer", func() bool { return p.got("offer") != nil })
	return p
}

// got is the first message of type typ received, or nil.
func (p *player) got(typ string) map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.msgs {
		if m["type"] == typ {
			return m
		}
		if m["type"] == "subscribeFailed" && typ != "subscribeFailed" {
			p.t.Errorf("subscribe failed: %v", m)
		}
	}
	return nil
}

// closedWith is the close the edge sent, or nil while open.
func (p *player) closedWith() *websocket.CloseError {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// leave closes the player's socket and waits for the reader.
func (p *player) leave() {
	p.ws.Close()
	<-p.done
}

// str is m[k] as a string.
func str(m map[string]any, k string) string { s, _ := m[k].(string); return s }

// has reports whether s holds every part.
func has(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// startRefShard runs a reference shard serving orun-grove until the test
// ends and returns its link address.
func startRefShard(t *testing.T) string {
	t.Helper()
	sim, err := shardsim.Start(context.Background(), shardsim.Config{Listen: "127.0.0.1:0", ShardID: "ref", Instances: []string{"orun-grove"}, Agents: 10, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	return sim.Addr()
}

// redisClient is a client of rds, closed when the test ends.
func redisClient(t *testing.T, rds *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: rds.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
