package signalling

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// failsafe bounds every wait so a broken build fails instead of hanging;
// no test relies on it for timing.
const failsafe = 20 * time.Second

// harness runs one Server behind two real listeners on 127.0.0.1:0.
type harness struct {
	t        testing.TB
	srv      *Server
	prom     *prometheus.Registry
	streamer *httptest.Server
	player   *httptest.Server
	sfu      *httptest.Server
	tr       *transcript
}

func newHarness(t testing.TB, cfg Config, d Deps) *harness {
	t.Helper()
	h := &harness{t: t, prom: prometheus.NewRegistry(), tr: &transcript{}}
	if d.Registerer == nil {
		d.Registerer = h.prom
	}
	srv, err := New(cfg, d)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.srv = srv
	h.streamer = httptest.NewServer(srv.StreamerHandler())
	h.player = httptest.NewServer(srv.PlayerHandler())
	h.sfu = httptest.NewServer(srv.SFUHandler())
	t.Cleanup(func() {
		srv.Close()
		h.streamer.Close()
		h.player.Close()
		h.sfu.Close()
	})
	return h
}

func wsURL(s *httptest.Server, pathQuery string) string {
	return "ws" + strings.TrimPrefix(s.URL, "http") + pathQuery
}

// transcript records what every scripted client sent and received, in the
// order the test observed it.
type transcript struct {
	mu    sync.Mutex
	lines []string
}

func (tr *transcript) add(format string, a ...any) {
	tr.mu.Lock()
	tr.lines = append(tr.lines, fmt.Sprintf(format, a...))
	tr.mu.Unlock()
}

func (tr *transcript) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.lines, "\n") + "\n"
}

// checkGolden compares got with testdata/name.golden (-update rewrites it).
func checkGolden(t testing.TB, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("transcript differs from %s (run with -update after checking):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// frame is one thing a client received: a text frame, or the close.
type frame struct {
	data   []byte
	closed bool
	code   int
	reason string
}

// client is a scripted gorilla WebSocket client.
type client struct {
	t    testing.TB
	name string
	ws   *websocket.Conn
	tr   *transcript
	in   chan frame
	done chan struct{}
	resp *http.Response
}

func (h *harness) dial(name string, srv *httptest.Server, pathQuery string, protocols ...string) *client {
	h.t.Helper()
	d := websocket.Dialer{HandshakeTimeout: failsafe, Subprotocols: protocols}
	ws, resp, err := d.Dial(wsURL(srv, pathQuery), nil)
	if err != nil {
		h.t.Fatalf("%s: dial: %v", name, err)
	}
	c := &client{t: h.t, name: name, ws: ws, tr: h.tr, in: make(chan frame, 1024), done: make(chan struct{}), resp: resp}
	go c.readLoop()
	h.t.Cleanup(c.shut)
	return c
}

func (h *harness) dialStreamer(name, pathQuery string) *client {
	return h.dial(name, h.streamer, pathQuery)
}

func (h *harness) dialPlayer(name, pathQuery string) *client {
	return h.dial(name, h.player, pathQuery)
}

func (h *harness) dialSFU(name, pathQuery string) *client {
	return h.dial(name, h.sfu, pathQuery)
}

func (c *client) readLoop() {
	defer close(c.done)
	defer close(c.in)
	for {
		_, b, err := c.ws.ReadMessage()
		if err != nil {
			f := frame{closed: true, code: -1, reason: err.Error()}
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				f.code, f.reason = ce.Code, ce.Text
			}
			c.in <- f
			return
		}
		c.in <- frame{data: b}
	}
}

// shut closes the client politely and waits for its reader.
func (c *client) shut() {
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(time.Second))
	select {
	case <-c.done:
	case <-time.After(failsafe):
		c.t.Errorf("%s: reader did not finish", c.name)
	}
	_ = c.ws.Close()
}

// hangUp sends a close frame (1000) and waits for the server's close echo.
func (c *client) hangUp() {
	c.t.Helper()
	c.tr.add("%s -> close 1000", c.name)
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(failsafe))
	f := c.next()
	if !f.closed {
		c.t.Fatalf("%s: want close echo, got %s", c.name, f.data)
	}
}

func (c *client) send(raw string) {
	c.t.Helper()
	c.tr.add("%s -> %s", c.name, raw)
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(raw)); err != nil {
		c.t.Fatalf("%s: write: %v", c.name, err)
	}
}

// sendQuiet sends without recording (large frames).
func (c *client) sendQuiet(mt int, b []byte) {
	c.t.Helper()
	if err := c.ws.WriteMessage(mt, b); err != nil {
		c.t.Fatalf("%s: write: %v", c.name, err)
	}
}

func (c *client) next() frame {
	c.t.Helper()
	select {
	case f, ok := <-c.in:
		if !ok {
			c.t.Fatalf("%s: connection already ended", c.name)
		}
		return f
	case <-time.After(failsafe):
		c.t.Fatalf("%s: nothing received", c.name)
	}
	return frame{}
}

// recv returns the next text frame, recorded.
func (c *client) recv() map[string]any {
	c.t.Helper()
	f := c.next()
	if f.closed {
		c.tr.add("%s <- close %d %q", c.name, f.code, f.reason)
		c.t.Fatalf("%s: want a message, got close %d %q", c.name, f.code, f.reason)
	}
	c.tr.add("%s <- %s", c.name, f.data)
	var m map[string]any
	if err := json.Unmarshal(f.data, &m); err != nil {
		c.t.Fatalf("%s: received bad JSON %q", c.name, f.data)
	}
	return m
}

// expect receives the next message and checks its type.
func (c *client) expect(typ string) map[string]any {
	c.t.Helper()
	m := c.recv()
	if m["type"] != typ {
		c.t.Fatalf("%s: want %s, got %v", c.name, typ, m)
	}
	return m
}

// expectRaw checks the exact bytes of the next message.
func (c *client) expectRaw(want string) {
	c.t.Helper()
	f := c.next()
	if f.closed {
		c.t.Fatalf("%s: want %s, got close %d %q", c.name, want, f.code, f.reason)
	}
	c.tr.add("%s <- %s", c.name, f.data)
	if !bytes.Equal(f.data, []byte(want)) {
		c.t.Fatalf("%s: got  %s\nwant %s", c.name, f.data, want)
	}
}

// expectClose checks that the connection ends with code and reason and
// that no message came first.
func (c *client) expectClose(code int, reason string) {
	c.t.Helper()
	f := c.next()
	if !f.closed {
		c.tr.add("%s <- %s", c.name, f.data)
		c.t.Fatalf("%s: want close %d, got message %s", c.name, code, f.data)
	}
	c.tr.add("%s <- close %d %q", c.name, f.code, f.reason)
	if f.code != code || f.reason != reason {
		c.t.Fatalf("%s: close %d %q, want %d %q", c.name, f.code, f.reason, code, reason)
	}
}

// sync proves nothing else is queued for c: a ping's pong is the very next
// message.
func (c *client) sync() {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping","time":7}`)); err != nil {
		c.t.Fatalf("%s: write: %v", c.name, err)
	}
	f := c.next()
	if f.closed || string(f.data) != `{"type":"pong","time":7}` {
		c.tr.add("%s <- %s (unexpected)", c.name, f.data)
		c.t.Fatalf("%s: want only pong, got %q closed=%v %d %q", c.name, f.data, f.closed, f.code, f.reason)
	}
}

// streamerUp connects a streamer and identifies it as id ("" sends no id).
func (h *harness) streamerUp(name, pathQuery, id string) *client {
	h.t.Helper()
	s := h.dialStreamer(name, pathQuery)
	s.expect("identify")
	s.expect("config")
	if id == "" {
		s.send(`{"type":"endpointId"}`)
	} else {
		s.send(`{"type":"endpointId","id":"` + id + `","protocolVersion":"1.1.0"}`)
	}
	s.expect("endpointIdConfirm")
	return s
}

// playerUp connects a player and reads its config.
func (h *harness) playerUp(name, pathQuery string) *client {
	h.t.Helper()
	p := h.dialPlayer(name, pathQuery)
	p.expect("config")
	return p
}
