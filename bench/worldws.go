package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/oshun/egbe-edge/codec"
)

// leanWS is the world scenario's WebSocket client. It sends and reads the
// same messages as egbeclient (presence, acks; snapshots, deltas), but
// decodes and encodes them with protowire into buffers it reuses, without
// a goroutine hop per message: with a thousand clients in one process,
// egbeclient's generated-code decoding (a new envelope and an object per
// entity) took most of a core, and the harness, not the edge, set the
// latency it reported.
type leanWS struct {
	ws *websocket.Conn

	wmu  sync.Mutex // the presence sender and the receiver (acks) write
	wbuf []byte     // guarded by wmu

	// Owned by the receiver.
	rbuf []byte
	held [64]leanState // ring of applied states, by sequence
	ids  []uint32      // scratch: the state being applied
}

// leanState is one applied state: its sequence and the ids it holds.
type leanState struct {
	seq uint64
	ids []uint32
}

// dialLeanWS connects to t's WebSocket endpoint and says hello.
func dialLeanWS(ctx context.Context, t *Target, h *codec.ClientHello) (*leanWS, error) {
	return dialLeanWSURL(ctx, strings.Replace(t.HTTPBase, "http", "ws", 1)+"/v6/realtime/websocket", h)
}

// dialLeanWSURL connects to the WebSocket URL u and says hello.
func dialLeanWSURL(ctx context.Context, u string, h *codec.ClientHello) (*leanWS, error) {
	d := websocket.Dialer{Subprotocols: []string{"egbe.v1"}, HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.DialContext(ctx, u, http.Header{})
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("bench: websocket: %w", err)
	}
	c := &leanWS{ws: ws}
	hello, err := proto.Marshal(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Hello{Hello: h}})
	if err != nil {
		ws.Close()
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = ws.SetReadDeadline(dl)
	}
	if err := c.write(hello); err != nil {
		ws.Close()
		return nil, err
	}
	for {
		_, b, err := ws.ReadMessage()
		if err != nil {
			ws.Close()
			return nil, fmt.Errorf("bench: hello: %w", err)
		}
		var env codec.ServerEnvelope
		if err := proto.Unmarshal(b, &env); err != nil {
			ws.Close()
			return nil, fmt.Errorf("bench: hello: %w", err)
		}
		switch {
		case env.GetError() != nil:
			ws.Close()
			return nil, fmt.Errorf("bench: hello refused: %s: %s", env.GetError().GetCode(), env.GetError().GetMessage())
		case env.GetHello() != nil:
			if env.GetHello().GetAcceptance() == codec.Acceptance_REJECTED {
				ws.Close()
				return nil, errors.New("bench: hello rejected")
			}
			_ = ws.SetReadDeadline(time.Time{})
			return c, nil
		}
	}
}

func (c *leanWS) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteMessage(websocket.BinaryMessage, b)
}

// sendPresence sends a presence packet (encoded into the shared buffer
// under wmu).
func (c *leanWS) sendPresence(seq uint64, x, y int32, clientMs uint64) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = appendPresenceEnvelope(c.wbuf[:0], seq, x, y, clientMs)
	_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteMessage(websocket.BinaryMessage, c.wbuf)
}

func (c *leanWS) sendAck(seq uint64) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = appendAckEnvelope(c.wbuf[:0], seq)
	_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteMessage(websocket.BinaryMessage, c.wbuf)
}

// sendPing sends Ping{client_time_ms: id} (the echo scenario's message).
func (c *leanWS) sendPing(id uint64) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.encodePing(id)
	_ = c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteMessage(websocket.BinaryMessage, c.wbuf)
}

// encodePing encodes the Ping envelope into wbuf (under wmu).
func (c *leanWS) encodePing(id uint64) {
	var p [12]byte
	v := protowire.AppendTag(p[:0], 1, protowire.VarintType)
	v = protowire.AppendVarint(v, id)
	c.wbuf = protowire.AppendTag(c.wbuf[:0], 6, protowire.BytesType)
	c.wbuf = protowire.AppendBytes(c.wbuf, v)
}

// recvPong reads until a Pong and returns the client time it echoes. ctx
// is not watched: the echo scenario ends a session's reads by closing it.
func (c *leanWS) recvPong(context.Context) (uint64, error) {
	for {
		b, err := c.readMessage()
		if err != nil {
			return 0, err
		}
		if id, ok := timeField(b, 9); ok {
			return id, nil
		}
	}
}

// recvPing reads until a ClientEnvelope with a Ping (what the bare echo
// server sends back) and returns its client time.
func (c *leanWS) recvPing(context.Context) (uint64, error) {
	for {
		b, err := c.readMessage()
		if err != nil {
			return 0, err
		}
		if id, ok := timeField(b, 6); ok {
			return id, nil
		}
	}
}

// timeField is field 1 (client_time_ms) of the envelope's message field
// num (a ServerEnvelope's pong is 9, a ClientEnvelope's ping 6), if b has
// that message.
func timeField(b []byte, want protowire.Number) (uint64, bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		if num == want && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return 0, false
			}
			var id uint64
			for len(v) > 0 {
				num, typ, k := protowire.ConsumeTag(v)
				if k < 0 {
					return 0, false
				}
				v = v[k:]
				if num == 1 && typ == protowire.VarintType {
					x, k := protowire.ConsumeVarint(v)
					if k < 0 {
						return 0, false
					}
					id, v = x, v[k:]
					continue
				}
				if k = protowire.ConsumeFieldValue(num, typ, v); k < 0 {
					return 0, false
				}
				v = v[k:]
			}
			return id, true
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return 0, false
		}
		b = b[n:]
	}
	return 0, false
}

func (c *leanWS) close() {
	c.wmu.Lock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.wmu.Unlock()
	_ = c.ws.Close()
}

// appendPresenceEnvelope encodes ClientEnvelope{presence: {seq, position
// {x, y}, client_time_ms}}.
func appendPresenceEnvelope(b []byte, seq uint64, x, y int32, clientMs uint64) []byte {
	var vec [16]byte
	v := protowire.AppendTag(vec[:0], 1, protowire.VarintType)
	v = protowire.AppendVarint(v, protowire.EncodeZigZag(int64(x)))
	v = protowire.AppendTag(v, 2, protowire.VarintType)
	v = protowire.AppendVarint(v, protowire.EncodeZigZag(int64(y)))
	var pres [48]byte
	p := protowire.AppendTag(pres[:0], 1, protowire.VarintType)
	p = protowire.AppendVarint(p, seq)
	p = protowire.AppendTag(p, 2, protowire.BytesType)
	p = protowire.AppendBytes(p, v)
	p = protowire.AppendTag(p, 7, protowire.VarintType)
	p = protowire.AppendVarint(p, clientMs)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, p)
}

// appendAckEnvelope encodes ClientEnvelope{ack: {snapshot_sequence}}.
func appendAckEnvelope(b []byte, seq uint64) []byte {
	var ack [12]byte
	a := protowire.AppendTag(ack[:0], 1, protowire.VarintType)
	a = protowire.AppendVarint(a, seq)
	b = protowire.AppendTag(b, 5, protowire.BytesType)
	return protowire.AppendBytes(b, a)
}

// errBadServerMsg: a message the lean client cannot parse.
var errBadServerMsg = errors.New("bench: undecodable server message")

// leanMsg is what the lean client takes from one ServerEnvelope.
type leanMsg struct {
	kind           int // 0 other, 2 snapshot, 3 delta, 7 error
	seq, base, stm uint64
	ids            []uint32 // snapshot entities or delta upserts (into the caller's scratch)
	removed        []uint32
	errText        string // kind 7
}

// parseServer reads the envelope fields the world client needs; ids and
// removed reuse m's arrays.
func parseServer(b []byte, m *leanMsg) error {
	m.kind, m.seq, m.base, m.stm = 0, 0, 0, 0
	m.ids, m.removed, m.errText = m.ids[:0], m.removed[:0], ""
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errBadServerMsg
		}
		b = b[n:]
		if typ != protowire.BytesType || (num != 2 && num != 3 && num != 7) {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return errBadServerMsg
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return errBadServerMsg
		}
		b = b[n:]
		m.kind = int(num)
		if err := m.parseBody(v); err != nil {
			return err
		}
	}
	return nil
}

// parseBody parses a snapshot (2), delta (3) or error (7) body.
func (m *leanMsg) parseBody(b []byte) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errBadServerMsg
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return errBadServerMsg
			}
			b = b[n:]
			switch {
			case m.kind == 2 && num == 2, m.kind == 3 && num == 3:
				m.seq = v
			case m.kind == 2 && num == 3, m.kind == 3 && num == 4:
				m.stm = v
			case m.kind == 3 && num == 2:
				m.base = v
			case m.kind == 3 && num == 6:
				m.removed = append(m.removed, uint32(v))
			}
			continue
		case typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return errBadServerMsg
			}
			b = b[n:]
			switch {
			case m.kind == 2 && num == 4, m.kind == 3 && num == 5:
				id, ok := entityID(v)
				if !ok {
					return errBadServerMsg
				}
				m.ids = append(m.ids, id)
			case m.kind == 3 && num == 6: // packed removed ids
				for len(v) > 0 {
					x, k := protowire.ConsumeVarint(v)
					if k < 0 {
						return errBadServerMsg
					}
					v = v[k:]
					m.removed = append(m.removed, uint32(x))
				}
			case m.kind == 7 && (num == 1 || num == 2):
				if m.errText != "" {
					m.errText += " "
				}
				m.errText += string(v)
			}
			continue
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return errBadServerMsg
		}
		b = b[n:]
	}
	return nil
}

// entityID is an EntityState's id (field 1).
func entityID(b []byte) (uint32, bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			return uint32(v), n >= 0
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return 0, false
		}
		b = b[n:]
	}
	return 0, true // id 0 is omitted on the wire
}

// readMessage reads the next message into rbuf (reused).
func (c *leanWS) readMessage() ([]byte, error) {
	_, r, err := c.ws.NextReader()
	if err != nil {
		return nil, err
	}
	b := c.rbuf[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			c.rbuf = b
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// receiveLean is worldClient.receive for a leanWS: it applies snapshots
// and deltas, acks each applied one, and records latency and bytes while
// the measured phase runs.
func (wc *worldClient) receiveLean(ctx context.Context, measureStart, measureEnd *atomic.Int64) {
	c := wc.lean
	stop := context.AfterFunc(ctx, func() { _ = c.ws.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var m leanMsg
	var last uint64
	find := func(seq uint64) *leanState {
		if seq == 0 {
			return nil
		}
		if h := &c.held[seq%uint64(len(c.held))]; h.seq == seq {
			return h
		}
		return nil
	}
	for {
		b, err := c.readMessage()
		if err != nil {
			if ctx.Err() == nil {
				wc.ended = true
				if wc.firstErr == "" {
					wc.firstErr = "recv: " + err.Error()
				}
			}
			return
		}
		now := time.Now()
		ms, me := measureStart.Load(), measureEnd.Load()
		measuring := ms != 0 && (me == 0 || now.UnixNano() <= me)
		if measuring {
			size := int64(len(b))
			wc.bytes += size
			if s := int((now.UnixNano() - ms) / int64(time.Second)); s >= 0 && s < len(wc.perSec) {
				wc.perSec[s] += size
			}
		}
		if err := parseServer(b, &m); err != nil {
			wc.edgeErrs++
			if wc.firstErr == "" {
				wc.firstErr = err.Error()
			}
			continue
		}
		var ids []uint32
		switch m.kind {
		case 2:
			ids = append(c.ids[:0], m.ids...)
		case 3:
			var base []uint32
			if m.base != 0 {
				h := find(m.base)
				if h == nil {
					if measuring {
						wc.baseMissing++
					}
					continue
				}
				base = h.ids
			}
			ids = applyIDs(c.ids[:0], base, m.ids, m.removed)
		case 7:
			wc.edgeErrs++
			if wc.firstErr == "" {
				wc.firstErr = "edge error: " + m.errText
			}
			continue
		default:
			continue
		}
		c.ids = ids
		if m.seq > last {
			last = m.seq
			h := &c.held[m.seq%uint64(len(c.held))]
			h.seq, h.ids = m.seq, append(h.ids[:0], ids...)
			if err := c.sendAck(m.seq); err != nil {
				continue
			}
		}
		wc.maxEnt = max(wc.maxEnt, len(ids))
		if !measuring {
			continue
		}
		wc.lat = append(wc.lat, now.Sub(time.UnixMilli(int64(m.stm))))
		if m.kind == 2 {
			wc.snaps++
		} else {
			wc.dels++
		}
	}
}

// applyIDs appends to dst the ids of base with removed and upserted ones
// taken out, then the upserted ones.
func applyIDs(dst, base, ups, removed []uint32) []uint32 {
	for _, id := range base {
		gone := false
		for _, r := range removed {
			if r == id {
				gone = true
				break
			}
		}
		for _, u := range ups {
			if gone {
				break
			}
			gone = u == id
		}
		if !gone {
			dst = append(dst, id)
		}
	}
	return append(dst, ups...)
}
