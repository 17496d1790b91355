package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/iceport"
)

// WebRTC answers WHIP-style data-channel offers at PathWebRTC: the client
// POSTs its offer (application/sdp, or JSON {"type":"offer","sdp":...}) with
// ICE candidates gathered, and gets 201 with the complete answer. Every peer
// is ICE-lite on the shared iceport.Port.
//
// Lanes: the "egbe-reliable" data channel (ordered, reliable) and the
// "egbe-unreliable" one (unordered, maxRetransmits:0); one binary message
// per envelope.
type WebRTC struct {
	cfg WebRTCConfig // immutable after New
	h   Handler      // immutable after New
	log *slog.Logger // immutable after New
	km  *kindMetrics // immutable after New
	api *webrtc.API  // immutable after New

	baseCtx    context.Context // cancelled by Shutdown to end Handlers
	cancelBase context.CancelFunc

	mu      sync.Mutex
	closing bool                  // guarded by mu
	peers   map[*rtcConn]struct{} // guarded by mu
	pending int                   // guarded by mu: peers answered, not yet connected
	// wg tracks offer requests in flight, each peer's run goroutine and
	// each Handler goroutine; Add happens under mu while !closing.
	wg sync.WaitGroup
}

// NewWebRTC returns the WebRTC transport answering on port. m may be nil.
func NewWebRTC(cfg WebRTCConfig, port *iceport.Port, h Handler, logger *slog.Logger, m *Metrics) (*WebRTC, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if port == nil {
		return nil, fmt.Errorf("%w: nil ICE port", ErrConfig)
	}
	if h == nil {
		return nil, fmt.Errorf("%w: nil handler", ErrConfig)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	se := port.SettingEngine()
	// A browser that vanishes without closing is noticed through ICE
	// consent: disconnected after 5 s of silence, failed (and torn down)
	// after 10 s rather than pion's 25 s.
	se.SetICETimeouts(5*time.Second, 10*time.Second, 2*time.Second)
	w := &WebRTC{
		cfg:   cfg,
		h:     h,
		log:   logger.With("component", "transport", "transport", string(KindWebRTC)),
		km:    m.forKind(KindWebRTC),
		api:   webrtc.NewAPI(webrtc.WithSettingEngine(se)),
		peers: make(map[*rtcConn]struct{}),
	}
	w.baseCtx, w.cancelBase = context.WithCancel(context.Background())
	return w, nil
}

// offerJSON is the optional JSON form of the offer body (an
// RTCSessionDescriptionInit).
type offerJSON struct {
	Type string `json:"type"`
	SDP  string `json:"sdp"`
}

// parseOffer extracts and checks the SDP offer from a request body. It
// accepts application/sdp (or no content type) and application/json, and
// requires a parsable SDP with an application (data channel) section.
func parseOffer(contentType string, body []byte) (string, error) {
	mt := ""
	if contentType != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(contentType); err != nil {
			return "", fmt.Errorf("%w: content type: %w", ErrBadOffer, err)
		}
	}
	var offer string
	switch mt {
	case "", "application/sdp", "text/plain":
		offer = string(body)
	case "application/json":
		var j offerJSON
		if err := json.Unmarshal(body, &j); err != nil {
			return "", fmt.Errorf("%w: json: %w", ErrBadOffer, err)
		}
		if j.Type != "offer" {
			return "", fmt.Errorf("%w: type %q, want \"offer\"", ErrBadOffer, j.Type)
		}
		offer = j.SDP
	default:
		return "", fmt.Errorf("%w: unsupported content type %q", ErrBadOffer, mt)
	}
	if !strings.HasPrefix(offer, "v=0") {
		return "", fmt.Errorf("%w: not an SDP session description", ErrBadOffer)
	}
	var sd sdp.SessionDescription
	if err := sd.UnmarshalString(offer); err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadOffer, err)
	}
	for _, md := range sd.MediaDescriptions {
		if md.MediaName.Media == "application" {
			return offer, nil
		}
	}
	return "", fmt.Errorf("%w: no data channel (application) section", ErrBadOffer)
}

// ServeHTTP answers one offer.
func (w *WebRTC) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", "POST")
		w.km.handshakeFailure(hsMethod)
		writeHTTPError(rw, http.StatusMethodNotAllowed, "method_not_allowed", "POST an SDP offer")
		return
	}
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		w.km.handshakeFailure(hsShutdown)
		writeHTTPError(rw, http.StatusServiceUnavailable, string(codec.CodeDraining), "edge is shutting down")
		return
	}
	if w.pending >= w.cfg.MaxPending {
		w.mu.Unlock()
		w.km.handshakeFailure(hsBusy)
		rw.Header().Set("Retry-After", "1")
		writeHTTPError(rw, http.StatusServiceUnavailable, "busy", "too many WebRTC handshakes in progress")
		return
	}
	// Reserve a handshake slot now so concurrent offers cannot overshoot
	// MaxPending; a started peer's run goroutine takes it over.
	w.pending++
	w.wg.Add(1)
	w.mu.Unlock()
	defer w.wg.Done()
	handedOver := false
	defer func() {
		if !handedOver {
			w.mu.Lock()
			w.pending--
			w.mu.Unlock()
		}
	}()

	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, w.cfg.MaxOfferBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			w.km.handshakeFailure(hsBadOffer)
			writeHTTPError(rw, http.StatusRequestEntityTooLarge, "offer_too_large", ErrOfferTooLarge.Error())
			return
		}
		writeHTTPError(rw, http.StatusBadRequest, "bad_offer", "reading body: "+err.Error())
		return
	}
	offer, err := parseOffer(r.Header.Get("Content-Type"), body)
	if err != nil {
		w.km.handshakeFailure(hsBadOffer)
		writeHTTPError(rw, http.StatusBadRequest, "bad_offer", err.Error())
		return
	}
	answer, status, err := w.answer(r.Context(), offer)
	if err != nil {
		code := "bad_offer"
		if status >= 500 {
			code = string(codec.CodeInternal)
		}
		writeHTTPError(rw, status, code, err.Error())
		return
	}
	handedOver = true
	rw.Header().Set("Content-Type", "application/sdp")
	rw.Header().Set("Cache-Control", "no-store")
	rw.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(rw, answer)
}

// answer builds the peer, answers offer and starts the peer's run
// goroutine. On error it returns the HTTP status to answer.
func (w *WebRTC) answer(ctx context.Context, offer string) (string, int, error) {
	pc, err := w.api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		w.km.handshakeFailure(hsInternal)
		return "", http.StatusInternalServerError, fmt.Errorf("transport: new peer connection: %w", err)
	}
	c := newRTCConn(w, pc)
	pc.OnDataChannel(c.onDataChannel)
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if s == webrtc.PeerConnectionStateFailed || s == webrtc.PeerConnectionStateClosed {
			c.end(fmt.Errorf("%w: peer connection %s", ErrClosed, s))
		}
	})
	fail := func(status int, reason string, err error) (string, int, error) {
		w.km.handshakeFailure(reason)
		_ = pc.Close()
		return "", status, err
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: offer}); err != nil {
		return fail(http.StatusBadRequest, hsBadOffer, fmt.Errorf("%w: %w", ErrBadOffer, err))
	}
	ans, err := pc.CreateAnswer(nil)
	if err != nil {
		return fail(http.StatusBadRequest, hsBadOffer, fmt.Errorf("%w: answer: %w", ErrBadOffer, err))
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(ans); err != nil {
		return fail(http.StatusInternalServerError, hsInternal, fmt.Errorf("transport: set local description: %w", err))
	}
	timer := time.NewTimer(w.cfg.GatherTimeout)
	defer timer.Stop()
	select {
	case <-gathered:
	case <-timer.C:
		return fail(http.StatusServiceUnavailable, hsTimeout, fmt.Errorf("%w: ICE gathering", ErrHandshakeTimeout))
	case <-ctx.Done():
		return fail(http.StatusServiceUnavailable, hsTimeout, ctx.Err())
	}

	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return fail(http.StatusServiceUnavailable, hsShutdown, ErrShuttingDown)
	}
	w.peers[c] = struct{}{}
	w.wg.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.wg.Done()
		c.run()
	}()
	return pc.LocalDescription().SDP, 0, nil
}

// Shutdown stops answering offers, cancels every Handler's context and
// waits for every peer to be torn down; once ctx ends, remaining peers are
// closed.
func (w *WebRTC) Shutdown(ctx context.Context) error {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	w.cancelBase()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	w.mu.Lock()
	for c := range w.peers {
		_ = c.Close(codec.CodeDraining.CloseCode(), "shutting down")
	}
	w.mu.Unlock()
	<-done
	return ctx.Err()
}

// rtcConn is one WebRTC peer.
type rtcConn struct {
	w  *WebRTC                // immutable
	pc *webrtc.PeerConnection // immutable; closed only by run

	ending
	remote net.Addr // written by run before the Handler starts

	relOnce   sync.Once
	relOpen   chan struct{}       // closed once rel is open
	rel       *webrtc.DataChannel // written before relOpen is closed
	unrelOnce sync.Once
	unrelOpen chan struct{}                      // closed once unrel is open
	unrel     atomic.Pointer[webrtc.DataChannel] // nil until open

	reliable   chan []byte   // reliable OnMessage -> Read; bounded, blocks
	unreliable chan []byte   // unreliable OnMessage -> Read; bounded, drops
	relLow     chan struct{} // OnBufferedAmountLow -> WriteReliable; cap 1
}

var _ Conn = (*rtcConn)(nil)

func newRTCConn(w *WebRTC, pc *webrtc.PeerConnection) *rtcConn {
	return &rtcConn{
		w: w, pc: pc, ending: newEnding(),
		relOpen:    make(chan struct{}),
		unrelOpen:  make(chan struct{}),
		reliable:   make(chan []byte, w.cfg.InboundQueue),
		unreliable: make(chan []byte, w.cfg.InboundQueue),
		relLow:     make(chan struct{}, 1),
	}
}

// onDataChannel runs on a pion goroutine for each channel the client opens.
func (c *rtcConn) onDataChannel(dc *webrtc.DataChannel) {
	switch dc.Label() {
	case LabelReliable:
		dc.SetBufferedAmountLowThreshold(c.w.cfg.ReliableHighWater / 2)
		dc.OnBufferedAmountLow(func() {
			select {
			case c.relLow <- struct{}{}:
			default:
			}
		})
		dc.OnMessage(c.onReliable)
		dc.OnClose(func() { c.end(fmt.Errorf("%w: reliable channel closed", ErrClosed)) })
		dc.OnOpen(func() {
			c.relOnce.Do(func() {
				c.rel = dc
				close(c.relOpen)
			})
		})
	case LabelUnreliable:
		dc.OnMessage(c.onUnreliable)
		dc.OnOpen(func() {
			c.unrelOnce.Do(func() {
				c.unrel.Store(dc)
				close(c.unrelOpen)
			})
		})
	default:
		_ = dc.Close() // not ours
	}
}

func (c *rtcConn) onReliable(m webrtc.DataChannelMessage) {
	if len(m.Data) > codec.MaxMessageSize {
		// pion closes the connection in run: closing it from its own
		// callback would wait on this goroutine.
		c.end(fmt.Errorf("%w: %d bytes", ErrMessageTooLarge, len(m.Data)))
		return
	}
	c.w.km.msg(Reliable, dirIn, len(m.Data))
	// m.Data is a fresh slice per message (pion copies out of its buffer).
	select {
	case c.reliable <- m.Data: // blocking pushes back on the peer via SCTP
	case <-c.done:
	}
}

func (c *rtcConn) onUnreliable(m webrtc.DataChannelMessage) {
	if len(m.Data) > codec.MaxMessageSize {
		c.end(fmt.Errorf("%w: %d bytes", ErrMessageTooLarge, len(m.Data)))
		return
	}
	c.w.km.msg(Unreliable, dirIn, len(m.Data))
	select {
	case c.unreliable <- m.Data:
	default:
		c.w.km.drop(dropRecvQueueFull)
	}
}

// run owns the peer: it waits for the reliable channel (or tears the peer
// down after ConnectTimeout), runs the Handler, and closes the peer
// connection once the Conn has ended.
func (c *rtcConn) run() {
	w := c.w
	defer func() {
		_ = c.pc.Close()
		w.mu.Lock()
		delete(w.peers, c)
		w.mu.Unlock()
	}()
	timer := time.NewTimer(w.cfg.ConnectTimeout)
	defer timer.Stop()
	pending := true
	donePending := func() {
		if pending {
			pending = false
			w.mu.Lock()
			w.pending--
			w.mu.Unlock()
		}
	}
	defer donePending()
	select {
	case <-c.relOpen:
	case <-timer.C:
		w.km.handshakeFailure(hsTimeout)
		c.end(ErrHandshakeTimeout)
		return
	case <-c.done:
		w.km.handshakeFailure(hsFailed)
		return
	case <-w.baseCtx.Done():
		c.end(ErrShuttingDown)
		return
	}
	donePending()
	// Both channels are created before the offer, so the unreliable one
	// normally opens right after; give it a moment before HasUnreliable is
	// first consulted.
	if w.cfg.UnreliableWait > 0 {
		timer.Reset(w.cfg.UnreliableWait)
		select {
		case <-c.unrelOpen:
		case <-timer.C:
		case <-c.done:
		}
	}
	c.remote = c.remoteAddr()
	w.km.open()
	defer w.km.closed()

	ctx, cancel := context.WithCancel(w.baseCtx)
	defer cancel()
	hdone := make(chan struct{})
	w.wg.Add(1) // run itself is counted, so the group cannot be at zero
	go func() {
		defer w.wg.Done()
		defer close(hdone)
		w.h(ctx, c)
		_ = c.Close(0, "")
	}()
	<-c.done
	if errors.Is(c.reason(), ErrMessageTooLarge) {
		w.log.Debug("webrtc peer sent an oversized message", "remote", c.remote)
	}
	cancel()
	c.flushReliable(rtcCloseFlush)
	_ = c.pc.Close()
	<-hdone
}

// rtcCloseFlush bounds how long a closing connection waits for its reliable
// channel to deliver what was written last (the final Error that says why):
// closing the peer connection at once would discard it.
const rtcCloseFlush = 500 * time.Millisecond

func (c *rtcConn) flushReliable(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for c.rel.BufferedAmount() > 0 && time.Now().Before(deadline) &&
		c.pc.ConnectionState() == webrtc.PeerConnectionStateConnected {
		time.Sleep(5 * time.Millisecond)
	}
}

func (c *rtcConn) remoteAddr() net.Addr {
	sctp := c.pc.SCTP()
	if sctp == nil || sctp.Transport() == nil || sctp.Transport().ICETransport() == nil {
		return &net.UDPAddr{}
	}
	pair, err := sctp.Transport().ICETransport().GetSelectedCandidatePair()
	if err != nil || pair == nil || pair.Remote == nil {
		return &net.UDPAddr{}
	}
	return &net.UDPAddr{IP: net.ParseIP(pair.Remote.Address), Port: int(pair.Remote.Port)}
}

func (c *rtcConn) Kind() Kind            { return KindWebRTC }
func (c *rtcConn) Encoding() Encoding    { return EncodingProto }
func (c *rtcConn) RemoteAddr() net.Addr  { return c.remote }
func (c *rtcConn) HasUnreliable() bool   { return c.unrel.Load() != nil }
func (c *rtcConn) Done() <-chan struct{} { return c.done }

// Read returns the next message from either lane, queued messages first.
func (c *rtcConn) Read(ctx context.Context) (Message, error) {
	return readLanes(ctx, c.reliable, c.unreliable, c.done, c.reason)
}

// WriteReliable waits while the channel has more than ReliableHighWater
// buffered (woken by OnBufferedAmountLow), then sends.
func (c *rtcConn) WriteReliable(ctx context.Context, msg []byte) error {
	dc := c.rel
	for dc.BufferedAmount() > c.w.cfg.ReliableHighWater {
		select {
		case <-c.relLow:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return c.reason()
		}
	}
	select {
	case <-c.done:
		return c.reason()
	default:
	}
	if err := dc.Send(msg); err != nil { // pion copies msg into SCTP chunks
		c.end(fmt.Errorf("%w: %w", ErrClosed, err))
		return c.reason()
	}
	c.w.km.msg(Reliable, dirOut, len(msg))
	return nil
}

// WriteUnreliable sends unless the unreliable channel already has more than
// UnreliableHighWater buffered.
func (c *rtcConn) WriteUnreliable(msg []byte) error {
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	dc := c.unrel.Load()
	if dc == nil {
		c.w.km.drop(dropNotOpen)
		return ErrNoUnreliableLane
	}
	if dc.BufferedAmount() > c.w.cfg.UnreliableHighWater {
		c.w.km.drop(dropSendQueueFull)
		return ErrDropped
	}
	if err := dc.Send(msg); err != nil {
		c.w.km.drop(dropSendQueueFull)
		return fmt.Errorf("%w: %w", ErrDropped, err)
	}
	c.w.km.msg(Unreliable, dirOut, len(msg))
	return nil
}

// Close ends the connection; run then closes the peer connection (never
// from here: Close may be called from a pion callback).
func (c *rtcConn) Close(code uint32, reason string) error {
	c.end(fmt.Errorf("%w: closed by edge with code %d", ErrClosed, code))
	return nil
}

// Flush is a no-op: WriteReliable sends each message at once.
func (c *rtcConn) Flush(context.Context) error { return nil }
