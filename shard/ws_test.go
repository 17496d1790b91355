package shard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// wsConn is a test-only ClientConn over a real gorilla WebSocket (the
// shard package may not import transport/).
type wsConn struct {
	c    *websocket.Conn
	json bool
	wmu  sync.Mutex
	once sync.Once
	done chan struct{}
}

func (w *wsConn) Transport() string     { return "websocket" }
func (w *wsConn) JSON() bool            { return w.json }
func (w *wsConn) RemoteAddr() net.Addr  { return w.c.RemoteAddr() }
func (w *wsConn) HasUnreliable() bool   { return false }
func (w *wsConn) Done() <-chan struct{} { return w.done }

func (w *wsConn) Read(ctx context.Context) ([]byte, bool, error) {
	stop := context.AfterFunc(ctx, func() { _ = w.c.SetReadDeadline(time.Now()) })
	defer stop()
	_, b, err := w.c.ReadMessage()
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return nil, false, err
	}
	return b, false, nil
}

func (w *wsConn) Flush(context.Context) error { return nil }

func (w *wsConn) WriteReliable(ctx context.Context, msg []byte) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		_ = w.c.SetWriteDeadline(dl)
	}
	typ := websocket.BinaryMessage
	if w.json {
		typ = websocket.TextMessage
	}
	return w.c.WriteMessage(typ, msg)
}

func (w *wsConn) WriteUnreliable([]byte) error { return errors.New("ws: no unreliable lane") }

func (w *wsConn) Close(code uint32, reason string) error {
	w.once.Do(func() {
		_ = w.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(int(code), reason), time.Now().Add(time.Second))
		_ = w.c.Close()
		close(w.done)
	})
	return nil
}

// wsServer serves the gateway's sessions on a real WebSocket listener.
func (e *testEnv) wsServer(t *testing.T) string {
	up := websocket.Upgrader{Subprotocols: []string{"egbe.v1.json"}}
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(rw, r, nil)
		if err != nil {
			return
		}
		wg.Add(1)
		defer wg.Done()
		wc := &wsConn{c: c, json: c.Subprotocol() == "egbe.v1.json", done: make(chan struct{})}
		e.g.Serve(e.ctx, wc)
		_ = wc.Close(1000, "")
	}))
	t.Cleanup(func() { srv.Close(); wg.Wait() })
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

// wsClient is the client end.
type wsClient struct {
	t    *testing.T
	c    *websocket.Conn
	json bool
}

func dialWS(t *testing.T, url string, json bool) *wsClient {
	d := websocket.Dialer{}
	if json {
		d.Subprotocols = []string{"egbe.v1.json"}
	}
	c, _, err := d.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &wsClient{t: t, c: c, json: json}
}

func (w *wsClient) send(env *codec.ClientEnvelope) {
	b, err := codec.EncodeClient(nil, env, w.json)
	if err != nil {
		w.t.Fatal(err)
	}
	typ := websocket.BinaryMessage
	if w.json {
		typ = websocket.TextMessage
	}
	if err := w.c.WriteMessage(typ, b); err != nil {
		w.t.Fatal(err)
	}
}

// next returns the next envelope, or the close code once the edge closed.
func (w *wsClient) next() (*codec.ServerEnvelope, int) {
	_ = w.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, b, err := w.c.ReadMessage()
	if err != nil {
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return nil, ce.Code
		}
		w.t.Fatalf("read: %v", err)
	}
	var env codec.ServerEnvelope
	if err := codec.DecodeServer(b, w.json, &env); err != nil {
		w.t.Fatalf("decode: %v", err)
	}
	return &env, 0
}

func (w *wsClient) until(what string, pick func(*codec.ServerEnvelope) bool) *codec.ServerEnvelope {
	for {
		env, code := w.next()
		if env == nil {
			w.t.Fatalf("closed (%d) while waiting for %s", code, what)
		}
		if pick(env) {
			return env
		}
	}
}

// TestResumeOverRealWebSocketJSON: a session starts on one transport and
// resumes on a real WebSocket speaking protojson; acknowledged actions are
// applied exactly once across the move.
func TestResumeOverRealWebSocketJSON(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 100})
	url := e.wsServer(t)

	c1 := e.serve("webtransport", true)
	h1 := c1.handshake(e.hello("ada", "orun-grove"))
	c1.sendActions(1, 5)
	c1.until("ack 5", func(env *codec.ServerEnvelope) bool { return env.GetActionAck().GetActionId() == 5 })
	_ = c1.c.Close(1006, "")
	testwait.For(t, "old session gone", func() bool { return e.g.Sessions() == 0 })

	ws := dialWS(t, url, true)
	h := e.hello("ada", "orun-grove")
	h.ResumeToken = h1.ResumeToken
	ws.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: h}})
	h2 := ws.until("hello", func(env *codec.ServerEnvelope) bool { return env.GetHello() != nil }).GetHello()
	if h2.SessionId != h1.SessionId || !h2.Resumed || h2.Transport != "websocket" {
		t.Fatalf("resumed hello %+v", h2)
	}
	ws.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Actions{Actions: &codec.ActionBatch{Actions: []*codec.Action{
		{ActionId: 4, Kind: "dup"}, {ActionId: 5, Kind: "dup"}, {ActionId: 6, Kind: "new"}}}}})
	ws.until("ack 6", func(env *codec.ServerEnvelope) bool { return env.GetActionAck().GetActionId() == 6 })
	// Snapshots arrive over the reliable lane, in JSON.
	ws.until("snapshot", func(env *codec.ServerEnvelope) bool { return env.GetSnapshot() != nil })
	if got := e.shards["s1"].Applied(h1.SessionId); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("applied %v", got)
	}
}

func TestRefusalCloseCodeOverWebSocket(t *testing.T) {
	e := newTestEnv(t, nil, shardSpec{id: "s1", instances: []string{"orun-grove"}, agents: 10})
	ws := dialWS(t, e.wsServer(t), false)
	if err := ws.c.WriteMessage(websocket.BinaryMessage, []byte{0xff, 0x00, 0x13}); err != nil {
		t.Fatal(err)
	}
	env, _ := ws.next()
	if codec.Code(env.GetError().GetCode()) != codec.CodeBadMessage {
		t.Fatalf("got %v", env)
	}
	if _, code := ws.next(); code != int(codec.CodeBadMessage.CloseCode()) {
		t.Fatalf("close code %d", code)
	}
}
