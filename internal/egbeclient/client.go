// Package egbeclient is a Go client for the egbe wire protocol over any of
// the edge's three transports. The edge's integration tests and the
// egbe-bench load harness use it; it is also the reference for writing a
// native client.
package egbeclient

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/pion/ice/v4"
	"github.com/pion/webrtc/v4"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/oshun/egbe-edge/codec"
)

// Options say where and how to connect.
type Options struct {
	// Kind is "webtransport", "webrtc" or "websocket".
	Kind string
	// HTTPBase is the edge's HTTP origin, e.g. "http://127.0.0.1:8080"
	// (WebSocket and the WebRTC offer endpoint).
	HTTPBase string
	// H3Base is the edge's HTTPS/HTTP3 origin, e.g. "https://127.0.0.1:8443".
	H3Base string
	// CertHash pins the edge's certificate for WebTransport (as a browser's
	// serverCertificateHashes does).
	CertHash [32]byte
	// JSON selects the egbe.v1.json subprotocol on WebSocket.
	JSON bool
	// Inbox bounds queued received envelopes (default 1024). When full the
	// oldest unreliable message is dropped; reliable ones wait.
	Inbox int
	// LocalIP, when valid, is the source address of a WebSocket or WebRTC
	// connection (its HTTP request and, for WebRTC, its ICE socket). Load
	// tests spread clients over 127.0.0.0/8, which Linux answers on
	// whole, so the edge's per-network limits see many networks as they
	// would from a real population. WebTransport ignores it.
	LocalIP netip.Addr
}

// Conn is one client connection.
type Conn struct {
	kind  string
	json  bool
	inbox chan *codec.ServerEnvelope

	sendRel   func([]byte) error
	sendUnrel func([]byte) error // nil without an unreliable lane
	closeFn   func() error

	closeOnce sync.Once
	done      chan struct{}
	errMu     sync.Mutex
	err       error // why the connection ended
	wg        sync.WaitGroup
	dropped   int64 // guarded by errMu
}

// ErrClosed is returned once the connection has ended.
var ErrClosed = errors.New("egbeclient: closed")

// Dial opens a connection of opts.Kind.
func Dial(ctx context.Context, opts Options) (*Conn, error) {
	if opts.Inbox <= 0 {
		opts.Inbox = 1024
	}
	c := &Conn{kind: opts.Kind, json: opts.JSON && opts.Kind == "websocket", inbox: make(chan *codec.ServerEnvelope, opts.Inbox), done: make(chan struct{})}
	var err error
	switch opts.Kind {
	case "websocket":
		err = c.dialWebSocket(ctx, opts)
	case "webtransport":
		err = c.dialWebTransport(ctx, opts)
	case "webrtc":
		err = c.dialWebRTC(ctx, opts)
	default:
		err = fmt.Errorf("egbeclient: unknown transport %q", opts.Kind)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Kind is the transport name.
func (c *Conn) Kind() string { return c.kind }

// HasUnreliable reports whether the connection has an unreliable lane.
func (c *Conn) HasUnreliable() bool { return c.sendUnrel != nil }

// Send sends env, on the unreliable lane when asked and available.
func (c *Conn) Send(env *codec.ClientEnvelope, unreliable bool) error {
	var b []byte
	var err error
	if c.json {
		b, err = protojson.Marshal(env)
	} else {
		b, err = proto.Marshal(env)
	}
	if err != nil {
		return err
	}
	return c.SendRaw(b, unreliable)
}

// SendRaw sends already-encoded bytes (tests send garbage with it).
func (c *Conn) SendRaw(b []byte, unreliable bool) error {
	select {
	case <-c.done:
		return c.Err()
	default:
	}
	if unreliable && c.sendUnrel != nil {
		return c.sendUnrel(b)
	}
	return c.sendRel(b)
}

// Recv returns the next envelope from the edge.
func (c *Conn) Recv(ctx context.Context) (*codec.ServerEnvelope, error) {
	select {
	case env := <-c.inbox:
		return env, nil
	default:
	}
	select {
	case env := <-c.inbox:
		return env, nil
	case <-c.done:
		// Drain what arrived before the end.
		select {
		case env := <-c.inbox:
			return env, nil
		default:
		}
		return nil, c.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Done is closed when the connection ends.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the connection ended (ErrClosed wrapped with detail).
func (c *Conn) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	if c.err == nil {
		return ErrClosed
	}
	return c.err
}

// Dropped counts unreliable messages dropped because the inbox was full.
func (c *Conn) Dropped() int64 {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.dropped
}

// Close ends the connection and waits for its goroutines.
func (c *Conn) Close() error {
	c.end(ErrClosed)
	var err error
	if c.closeFn != nil {
		err = c.closeFn()
	}
	c.wg.Wait()
	return err
}

func (c *Conn) end(err error) {
	c.closeOnce.Do(func() {
		c.errMu.Lock()
		c.err = err
		c.errMu.Unlock()
		close(c.done)
	})
}

// deliver decodes b and queues it. Reliable messages wait for room;
// unreliable ones are dropped when the inbox is full.
func (c *Conn) deliver(b []byte, reliable bool) {
	env := new(codec.ServerEnvelope)
	var err error
	if c.json {
		err = protojson.Unmarshal(b, env)
	} else {
		err = proto.Unmarshal(b, env)
	}
	if err != nil {
		c.end(fmt.Errorf("egbeclient: undecodable server message: %w", err))
		return
	}
	if !reliable {
		select {
		case c.inbox <- env:
		default:
			c.errMu.Lock()
			c.dropped++
			c.errMu.Unlock()
		}
		return
	}
	select {
	case c.inbox <- env:
	case <-c.done:
	}
}

// ---------------------------------------------------------------- WebSocket

// CloseError is how the edge ended a connection: a WebSocket close frame or
// a WebTransport session error.
type CloseError struct {
	Code   int
	Reason string
}

func (e *CloseError) Error() string { return fmt.Sprintf("closed by edge: %d %s", e.Code, e.Reason) }

func (c *Conn) dialWebSocket(ctx context.Context, opts Options) error {
	u := strings.Replace(opts.HTTPBase, "http", "ws", 1) + "/v6/realtime/websocket"
	proto := "egbe.v1"
	if c.json {
		proto = "egbe.v1.json"
	}
	d := websocket.Dialer{Subprotocols: []string{proto}, HandshakeTimeout: 10 * time.Second}
	if opts.LocalIP.IsValid() {
		nd := &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(opts.LocalIP, 0))}
		d.NetDialContext = nd.DialContext
	}
	ws, resp, err := d.DialContext(ctx, u, nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return fmt.Errorf("egbeclient: websocket: %w", err)
	}
	if ws.Subprotocol() != proto {
		ws.Close()
		return fmt.Errorf("egbeclient: websocket subprotocol %q, want %q", ws.Subprotocol(), proto)
	}
	var wmu sync.Mutex
	msgType := websocket.BinaryMessage
	if c.json {
		msgType = websocket.TextMessage
	}
	c.sendRel = func(b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		_ = ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
		return ws.WriteMessage(msgType, b)
	}
	c.closeFn = func() error {
		wmu.Lock()
		_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		wmu.Unlock()
		return ws.Close()
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			_, b, err := ws.ReadMessage()
			if err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					c.end(&CloseError{Code: ce.Code, Reason: ce.Text})
				} else {
					c.end(fmt.Errorf("%w: %w", ErrClosed, err))
				}
				ws.Close()
				return
			}
			c.deliver(b, true)
		}
	}()
	return nil
}

// ---------------------------------------------------------------- WebTransport

func (c *Conn) dialWebTransport(ctx context.Context, opts Options) error {
	want := opts.CertHash
	tr := &webtransport.Transport{
		TLSClientConfig: &tls.Config{
			NextProtos: []string{http3.NextProtoH3},
			// Pin the certificate by hash, as serverCertificateHashes does.
			InsecureSkipVerify: true,
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				if len(raw) == 0 || sha256.Sum256(raw[0]) != want {
					return errors.New("egbeclient: server certificate hash mismatch")
				}
				return nil
			},
		},
		QUICConfig: &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true, KeepAlivePeriod: 5 * time.Second},
	}
	// The session's context derives from the dial context: a dial context
	// cancelled once Dial returns would mark the session done at once and
	// hide the edge's close reason. Dial under a context that ctx cancels
	// only until the session is up.
	sessCtx, endSess := context.WithCancel(context.WithoutCancel(ctx))
	stopWatch := context.AfterFunc(ctx, endSess)
	rsp, sess, err := tr.Dial(sessCtx, opts.H3Base+"/v6/realtime/webtransport", nil)
	if err != nil {
		endSess()
		tr.Close()
		return fmt.Errorf("egbeclient: webtransport: %w", err)
	}
	if rsp.StatusCode < 200 || rsp.StatusCode > 299 {
		sess.CloseWithError(0, "")
		endSess()
		tr.Close()
		return fmt.Errorf("egbeclient: webtransport: HTTP %d", rsp.StatusCode)
	}
	str, err := sess.OpenStreamSync(ctx)
	if err != nil || !stopWatch() {
		sess.CloseWithError(0, "")
		endSess()
		tr.Close()
		return fmt.Errorf("egbeclient: webtransport stream: %w", cmp.Or(err, context.Cause(ctx)))
	}
	var wmu sync.Mutex
	var frameBuf []byte
	c.sendRel = func(b []byte) error {
		wmu.Lock()
		defer wmu.Unlock()
		frameBuf = codec.AppendFrame(frameBuf[:0], b)
		_, err := str.Write(frameBuf)
		return err
	}
	c.sendUnrel = func(b []byte) error { return sess.SendDatagram(b) }
	c.closeFn = func() error {
		err := sess.CloseWithError(0, "")
		endSess()
		tr.Close()
		return err
	}
	sessionEnd := func(err error) {
		var se *webtransport.SessionError
		if errors.As(err, &se) && se.Remote {
			c.end(&CloseError{Code: int(se.ErrorCode), Reason: se.Message})
			return
		}
		c.end(fmt.Errorf("%w: %w", ErrClosed, err))
	}
	c.wg.Add(2)
	go func() {
		defer c.wg.Done()
		r := bufio.NewReader(str)
		var buf []byte
		for {
			b, err := codec.ReadFrame(r, buf, codec.MaxMessageSize)
			if err != nil {
				// Prefer the session's close reason (the edge's close code,
				// which follows the stream's end) to the stream's error.
				select {
				case <-sess.Context().Done():
					if reason := closeReason(sess); reason != nil {
						err = reason
					}
				case <-time.After(time.Second):
				}
				sessionEnd(err)
				return
			}
			c.deliver(b, true)
			buf = b[:0]
		}
	}()
	go func() {
		defer c.wg.Done()
		for {
			b, err := sess.ReceiveDatagram(context.Background())
			if err != nil {
				return
			}
			c.deliver(b, false)
		}
	}()
	return nil
}

// closeReason is a closed session's close error (a *webtransport.SessionError
// when the edge closed it), nil while it is open: accepting a stream on a
// closed session returns the reason; a cancelled context keeps an open one
// from blocking (the edge never opens unidirectional streams).
func closeReason(sess *webtransport.Session) error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := sess.AcceptUniStream(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// ---------------------------------------------------------------- WebRTC

func (c *Conn) dialWebRTC(ctx context.Context, opts Options) error {
	var se webrtc.SettingEngine
	se.SetIncludeLoopbackCandidate(true)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	httpc := http.DefaultClient
	var mux *ice.UDPMuxDefault
	if opts.LocalIP.IsValid() {
		// ICE gathers host candidates from the interfaces' addresses
		// (127.0.0.1 on loopback); one socket bound to LocalIP, muxed,
		// makes it the only candidate.
		uc, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(opts.LocalIP, 0)))
		if err != nil {
			return fmt.Errorf("egbeclient: webrtc: %w", err)
		}
		mux = ice.NewUDPMuxDefault(ice.UDPMuxParams{UDPConn: uc})
		se.SetICEUDPMux(mux)
		nd := &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(opts.LocalIP, 0))}
		httpc = &http.Client{Transport: &http.Transport{DialContext: nd.DialContext, DisableKeepAlives: true}}
	}
	api := webrtc.NewAPI(webrtc.WithSettingEngine(se))
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		if mux != nil {
			mux.Close()
		}
		return err
	}
	closePC := func() error {
		err := pc.Close()
		if mux != nil {
			mux.Close()
		}
		return err
	}
	fail := func(err error) error { closePC(); return fmt.Errorf("egbeclient: webrtc: %w", err) }
	rel, err := pc.CreateDataChannel("egbe-reliable", nil)
	if err != nil {
		return fail(err)
	}
	zero := uint16(0)
	unordered := false
	unrel, err := pc.CreateDataChannel("egbe-unreliable", &webrtc.DataChannelInit{Ordered: &unordered, MaxRetransmits: &zero})
	if err != nil {
		return fail(err)
	}
	opened := make(chan struct{})
	var openOnce sync.Once
	rel.OnOpen(func() { openOnce.Do(func() { close(opened) }) })
	rel.OnMessage(func(m webrtc.DataChannelMessage) { c.deliver(m.Data, true) })
	unrel.OnMessage(func(m webrtc.DataChannelMessage) { c.deliver(m.Data, false) })
	rel.OnClose(func() { c.end(fmt.Errorf("%w: reliable data channel closed", ErrClosed)) })
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if s == webrtc.PeerConnectionStateFailed || s == webrtc.PeerConnectionStateClosed {
			c.end(fmt.Errorf("%w: peer connection %s", ErrClosed, s))
		}
	})
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		return fail(err)
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		return fail(err)
	}
	select {
	case <-gathered:
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, opts.HTTPBase+"/v6/realtime/webrtc", strings.NewReader(pc.LocalDescription().SDP))
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Content-Type", "application/sdp")
	resp, err := httpc.Do(req)
	if err != nil {
		return fail(err)
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("offer answered HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(answer)))
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: string(answer)}); err != nil {
		return fail(err)
	}
	select {
	case <-opened:
	case <-ctx.Done():
		return fail(fmt.Errorf("reliable channel did not open: %w", ctx.Err()))
	}
	c.sendRel = rel.Send
	c.sendUnrel = func(b []byte) error {
		if unrel.ReadyState() != webrtc.DataChannelStateOpen {
			return rel.Send(b)
		}
		return unrel.Send(b)
	}
	c.closeFn = closePC
	return nil
}
