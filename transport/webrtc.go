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
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/datachannel"
	"github.com/pion/interceptor"
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
// per envelope. Channels are detached from pion's callbacks: Read reads the
// reliable channel itself, and one receiver per peer reads the unreliable
// one.
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
	// pendingNet counts pending by the offer's network (/24, /48), so one
	// network cannot take every slot.
	pendingNet map[netip.Prefix]int // guarded by mu
	// wg tracks offer requests in flight and each peer's run goroutine
	// (which runs the Handler); Add happens under mu while !closing.
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
	// Read and the unreliable receiver read the channels themselves: no
	// pion read loop (and its 64 KiB buffer) per channel, no copy per
	// message into a callback.
	se.DetachDataChannels()
	logger = logger.With("component", "transport", "transport", string(KindWebRTC))
	se.LoggerFactory = newPionLogs(logger)
	w := &WebRTC{
		cfg: cfg,
		h:   h,
		log: logger,
		km:  m.forKind(KindWebRTC),
		// Data channels only: no codecs, and an empty interceptor registry
		// (pion's default NACK, RTCP report and TWCC interceptors, with
		// their goroutines, serve media this edge never carries here).
		api: webrtc.NewAPI(webrtc.WithSettingEngine(se),
			webrtc.WithMediaEngine(&webrtc.MediaEngine{}),
			webrtc.WithInterceptorRegistry(&interceptor.Registry{})),
		peers:      make(map[*rtcConn]struct{}),
		pendingNet: make(map[netip.Prefix]int),
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

// ServeHTTP answers one offer. The body is read first, under
// OfferReadTimeout, and only then is a handshake slot taken: a client that
// trickles its body holds nothing but its own request. Slots are bounded in
// total (MaxPending) and per network (MaxPendingPerNetwork).
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
	w.wg.Add(1)
	w.mu.Unlock()
	defer w.wg.Done()

	rc := http.NewResponseController(rw)
	_ = rc.SetReadDeadline(time.Now().Add(w.cfg.OfferReadTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, w.cfg.MaxOfferBytes))
	if err != nil {
		// The rest of the body is never read: net/http would otherwise try
		// to drain it before answering, which a stalled client never lets
		// finish.
		rw.Header().Set("Connection", "close")
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			w.km.handshakeFailure(hsBadOffer)
			writeHTTPError(rw, http.StatusRequestEntityTooLarge, "offer_too_large", ErrOfferTooLarge.Error())
		case errors.Is(err, os.ErrDeadlineExceeded):
			w.km.handshakeFailure(hsTimeout)
			writeHTTPError(rw, http.StatusRequestTimeout, "offer_timeout",
				fmt.Sprintf("the offer body did not arrive within %s", w.cfg.OfferReadTimeout))
		default:
			writeHTTPError(rw, http.StatusBadRequest, "bad_offer", "reading body: "+err.Error())
		}
		return
	}
	// Cleared so the server's own read of the connection (it watches for
	// the client going away) does not time out while the answer is built.
	_ = rc.SetReadDeadline(time.Time{})
	offer, err := parseOffer(r.Header.Get("Content-Type"), body)
	if err != nil {
		w.km.handshakeFailure(hsBadOffer)
		writeHTTPError(rw, http.StatusBadRequest, "bad_offer", err.Error())
		return
	}

	network := networkOf(r.RemoteAddr)
	w.mu.Lock()
	switch {
	case w.closing:
		w.mu.Unlock()
		w.km.handshakeFailure(hsShutdown)
		writeHTTPError(rw, http.StatusServiceUnavailable, string(codec.CodeDraining), "edge is shutting down")
		return
	case w.pending >= w.cfg.MaxPending, w.pendingNet[network] >= w.cfg.MaxPendingPerNetwork:
		w.mu.Unlock()
		w.km.handshakeFailure(hsBusy)
		rw.Header().Set("Retry-After", "1")
		writeHTTPError(rw, http.StatusServiceUnavailable, "busy", "too many WebRTC handshakes in progress")
		return
	}
	w.pending++
	w.pendingNet[network]++
	w.mu.Unlock()
	// The slot is the started peer's run goroutine's from here on.
	answer, status, err := w.answer(r.Context(), offer, network)
	if err != nil {
		w.releasePending(network)
		code := "bad_offer"
		if status >= 500 {
			code = string(codec.CodeInternal)
		}
		writeHTTPError(rw, status, code, err.Error())
		return
	}
	rw.Header().Set("Content-Type", "application/sdp")
	rw.Header().Set("Cache-Control", "no-store")
	if w.cfg.ICEServers != nil {
		for _, l := range linkHeaders(w.cfg.ICEServers(r)) {
			rw.Header().Add("Link", l)
		}
	}
	rw.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(rw, answer)
}

// Offers are counted per network: an IPv4 /24 or an IPv6 /48, as the
// edge's admission keys networks.
const (
	pendingV4Bits = 24
	pendingV6Bits = 48
)

// networkOf is the pending-slot key of a request's remote address (one
// shared key for an address that does not parse).
func networkOf(remote string) netip.Prefix {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return netip.Prefix{}
	}
	ip := ap.Addr().Unmap()
	bits := pendingV6Bits
	if ip.Is4() {
		bits = pendingV4Bits
	}
	p, _ := ip.Prefix(bits)
	return p
}

func (w *WebRTC) releasePending(network netip.Prefix) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending--
	if w.pendingNet[network]--; w.pendingNet[network] <= 0 {
		delete(w.pendingNet, network)
	}
}

// answer builds the peer, answers offer and starts the peer's run
// goroutine, which takes over network's pending slot. On error it returns
// the HTTP status to answer.
func (w *WebRTC) answer(ctx context.Context, offer string, network netip.Prefix) (string, int, error) {
	pc, err := w.api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		w.km.handshakeFailure(hsInternal)
		return "", http.StatusInternalServerError, fmt.Errorf("transport: new peer connection: %w", err)
	}
	c := newRTCConn(w, pc, network)
	pc.OnDataChannel(c.onDataChannel)
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if s == webrtc.PeerConnectionStateFailed || s == webrtc.PeerConnectionStateClosed {
			c.endWith(fmt.Errorf("%w: peer connection %s", ErrClosed, s))
		}
	})
	fail := func(status int, reason string, err error) (string, int, error) {
		w.km.handshakeFailure(reason)
		c.cancel()
		_ = pc.GracefulClose()
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

// rtcReadBuffer is each channel reader's buffer, kept for the peer's life.
// A larger message is read again into an rtcMidBuffer (allocated when
// first needed, then kept), and one larger still into a MaxMessageSize
// buffer kept only until the next Read.
const (
	rtcReadBuffer = 1 << 10
	rtcMidBuffer  = 4 << 10
)

// rtcConn is one WebRTC peer.
//
// Goroutines: run (which runs the Handler, so it is the session's reader:
// Read reads the reliable channel itself) and, once the unreliable channel
// is open, one receiver that parks its messages in a latest-wins queue and
// interrupts Read with a read deadline. Below them pion runs ICE, DTLS and
// SCTP; no interceptor and no per-channel read loop.
type rtcConn struct {
	w       *WebRTC                // immutable
	pc      *webrtc.PeerConnection // immutable; closed only by run
	network netip.Prefix           // immutable: whose pending slot run holds
	ctx     context.Context        // immutable: the Handler's; cancelled when the Conn ends
	cancel  context.CancelFunc     // immutable

	ending
	remote net.Addr // written by run before the Handler starts

	relOnce   sync.Once
	relOpen   chan struct{}                        // closed once rel is open
	rel       *webrtc.DataChannel                  // written before relOpen is closed
	relRaw    datachannel.ReadWriteCloserDeadliner // rel, detached; written before relOpen is closed
	unrelOnce sync.Once
	unrelOpen chan struct{}                      // closed once unrel is open
	unrel     atomic.Pointer[webrtc.DataChannel] // nil until open
	relLow    chan struct{}                      // OnBufferedAmountLow -> WriteReliable; cap 1

	// Read side, owned by the Read caller.
	rbuf    []byte // rtcReadBuffer bytes
	mid     []byte // rtcMidBuffer bytes, once a message needed it
	big     []byte // a message larger than mid; dropped at the next Read
	dg      []byte // the unreliable message last returned
	readCtx context.Context
	stopCtx func() bool

	in *latest // unreliable messages: receiver -> Read

	outMu sync.Mutex // serialises unreliable sends (the writer and OnBufferedAmountLow)
	park  *latest    // the newest unreliable message waiting for the channel to drain
	pbuf  []byte     // guarded by outMu

	rxMu     sync.Mutex
	rxDone   bool           // guarded by rxMu: no receiver may start
	rxWG     sync.WaitGroup // the receiver
	tooLarge sync.Once      // the frame_too_large Error is sent once
}

var _ Conn = (*rtcConn)(nil)

func newRTCConn(w *WebRTC, pc *webrtc.PeerConnection, network netip.Prefix) *rtcConn {
	c := &rtcConn{
		w: w, pc: pc, network: network, ending: newEnding(),
		relOpen:   make(chan struct{}),
		unrelOpen: make(chan struct{}),
		relLow:    make(chan struct{}, 1),
		rbuf:      make([]byte, rtcReadBuffer),
		in:        newLatest(w.cfg.InboundQueue),
		park:      newLatest(1),
	}
	c.ctx, c.cancel = context.WithCancel(w.baseCtx)
	return c
}

// endWith ends the Conn (first cause wins): the Handler's ctx is cancelled,
// which interrupts its Read.
func (c *rtcConn) endWith(err error) {
	if c.end(err) {
		c.cancel()
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
		dc.OnClose(func() { c.endWith(fmt.Errorf("%w: reliable channel closed", ErrClosed)) })
		dc.OnOpen(func() {
			raw, err := dc.DetachWithDeadline()
			if err != nil {
				c.endWith(fmt.Errorf("%w: detach: %w", ErrClosed, err))
				return
			}
			c.relOnce.Do(func() {
				c.rel, c.relRaw = dc, raw
				close(c.relOpen)
			})
		})
	case LabelUnreliable:
		dc.SetBufferedAmountLowThreshold(c.w.cfg.UnreliableHighWater)
		dc.OnBufferedAmountLow(func() { c.sendParked(dc) })
		dc.OnOpen(func() {
			raw, err := dc.DetachWithDeadline()
			if err != nil {
				return // the reliable lane carries on alone
			}
			c.unrelOnce.Do(func() {
				if !c.startReceiver(raw) {
					_ = raw.Close()
					return
				}
				c.unrel.Store(dc)
				close(c.unrelOpen)
			})
		})
	default:
		_ = dc.Close() // not ours
	}
}

// startReceiver runs the unreliable channel's receiver unless the peer is
// being torn down.
func (c *rtcConn) startReceiver(raw datachannel.ReadWriteCloser) bool {
	c.rxMu.Lock()
	defer c.rxMu.Unlock()
	if c.rxDone {
		return false
	}
	c.rxWG.Go(func() { c.receive(raw) })
	return true
}

// receive reads the unreliable channel until it closes, parking each
// message for Read (dropping the oldest when Read is behind).
func (c *rtcConn) receive(raw datachannel.ReadWriteCloser) {
	small := make([]byte, rtcReadBuffer)
	var mid []byte
	buf := small
	for {
		n, _, err := raw.ReadDataChannel(buf)
		if errors.Is(err, io.ErrShortBuffer) {
			// The message stays queued in SCTP: read it again into a
			// larger buffer (kept), then one of the largest allowed size.
			switch {
			case len(buf) < rtcMidBuffer:
				if mid == nil {
					mid = make([]byte, rtcMidBuffer)
				}
				buf = mid
				continue
			case len(buf) < codec.MaxMessageSize:
				buf = make([]byte, codec.MaxMessageSize)
				continue
			}
			c.refuseTooLarge()
			return
		}
		if err != nil {
			return // the channel or the peer closed
		}
		c.w.km.msg(Unreliable, dirIn, n)
		if c.in.push(buf[:n]) {
			c.w.km.drop(dropRecvQueueFull)
		}
		buf = small
		c.wake()
	}
}

// wake interrupts a Read blocked on the reliable channel: Read clears the
// deadline, then looks at the unreliable queue, ctx and the Conn's end, so
// a wake is never lost.
func (c *rtcConn) wake() {
	select {
	case <-c.relOpen:
		_ = c.relRaw.SetReadDeadline(time.Now())
	default: // no Read runs before the reliable channel is open
	}
}

// refuseTooLarge answers a message over MaxMessageSize with the typed
// frame_too_large Error on the reliable channel, then ends the Conn (run
// gives the Error time to leave before it closes the peer). Data channels
// have no close code, so the Error is what the client sees, where the
// other transports send close code 4001.
func (c *rtcConn) refuseTooLarge() {
	c.tooLarge.Do(func() {
		select {
		case <-c.relOpen:
			env := &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Error{Error: &codec.Error{
				Code: string(codec.CodeFrameTooLarge), Message: fmt.Sprintf("message over %d bytes", codec.MaxMessageSize)}}}
			if b, err := codec.EncodeServer(nil, env, false); err == nil {
				_ = c.rel.Send(b)
			}
		default:
		}
		c.endWith(fmt.Errorf("%w: over %d bytes", ErrMessageTooLarge, codec.MaxMessageSize))
	})
}

// run owns the peer: it waits for the reliable channel (or tears the peer
// down after ConnectTimeout), runs the Handler on this goroutine, and
// closes the peer connection after it.
func (c *rtcConn) run() {
	w := c.w
	defer func() {
		c.cancel()
		c.rxMu.Lock()
		c.rxDone = true
		c.rxMu.Unlock()
		// Ends the receiver's read, and waits for the goroutines pion
		// started for the peer (its operations queue among them, which
		// may still be setting up SCTP for a peer that never connected):
		// they are this goroutine's to wait for.
		_ = c.pc.GracefulClose()
		c.rxWG.Wait()
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
			w.releasePending(c.network)
		}
	}
	defer donePending()
	select {
	case <-c.relOpen:
	case <-timer.C:
		w.km.handshakeFailure(hsTimeout)
		c.endWith(ErrHandshakeTimeout)
		return
	case <-c.done:
		w.km.handshakeFailure(hsFailed)
		return
	case <-w.baseCtx.Done():
		c.endWith(ErrShuttingDown)
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

	w.h(c.ctx, c)
	_ = c.Close(0, "")
	if errors.Is(c.reason(), ErrMessageTooLarge) {
		w.log.Debug("webrtc peer sent an oversized message", "remote", c.remote)
	}
	c.flushReliable(rtcCloseFlush)
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

// Read returns the next message: a parked unreliable message first, else
// the next message of the reliable channel, read here.
func (c *rtcConn) Read(ctx context.Context) (Message, error) {
	if ctx != c.readCtx {
		if c.stopCtx != nil {
			c.stopCtx()
		}
		c.readCtx = ctx
		c.stopCtx = context.AfterFunc(ctx, c.wake)
	}
	c.big = nil
	for {
		select {
		case <-c.done:
			return Message{}, c.reason()
		default:
		}
		if cap(c.dg) > latestKeep {
			c.dg = nil
		}
		if dg, ok := c.in.pop(c.dg); ok {
			c.dg = dg
			return Message{Lane: Unreliable, Data: dg}, nil
		}
		buf := c.rbuf
		n, _, err := c.relRaw.ReadDataChannel(buf)
		if errors.Is(err, io.ErrShortBuffer) {
			// The message stays queued in SCTP: read it again into a
			// larger buffer, then one of the largest allowed size; if
			// even that is short, the message is over the limit.
			if c.mid == nil {
				c.mid = make([]byte, rtcMidBuffer)
			}
			buf = c.mid
			n, _, err = c.relRaw.ReadDataChannel(buf)
		}
		if errors.Is(err, io.ErrShortBuffer) {
			c.big = make([]byte, codec.MaxMessageSize)
			buf = c.big
			n, _, err = c.relRaw.ReadDataChannel(buf)
			if errors.Is(err, io.ErrShortBuffer) {
				c.refuseTooLarge()
				return Message{}, c.reason()
			}
		}
		switch {
		case err == nil:
			c.w.km.msg(Reliable, dirIn, n)
			return Message{Lane: Reliable, Data: buf[:n]}, nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			_ = c.relRaw.SetReadDeadline(time.Time{})
			if ctx.Err() != nil {
				return Message{}, fmt.Errorf("%w: %w", ErrClosed, ctx.Err())
			}
		default:
			c.endWith(fmt.Errorf("%w: reliable channel: %w", ErrClosed, err))
			return Message{}, c.reason()
		}
	}
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
		c.endWith(fmt.Errorf("%w: %w", ErrClosed, err))
		return c.reason()
	}
	c.w.km.msg(Reliable, dirOut, len(msg))
	return nil
}

// Flush is a no-op: WriteReliable hands each message to SCTP, whose own
// send loop bundles queued chunks into packets.
func (c *rtcConn) Flush(context.Context) error { return nil }

// WriteUnreliable sends at once while the unreliable channel has at most
// UnreliableHighWater buffered; above it the message is parked (one deep,
// latest wins: a newer message drops the parked one) and sent when the
// channel drains.
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
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.park.len() == 0 && dc.BufferedAmount() <= c.w.cfg.UnreliableHighWater {
		return c.sendLocked(dc, msg)
	}
	if c.park.push(msg) {
		c.w.km.drop(dropSendQueueFull)
	}
	// The channel may have drained since it was looked at, and then no
	// low-water event comes: send now if it has.
	c.drainLocked(dc)
	return nil
}

// sendParked runs on pion's goroutine when the unreliable channel drains
// below UnreliableHighWater.
func (c *rtcConn) sendParked(dc *webrtc.DataChannel) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	c.drainLocked(dc)
}

func (c *rtcConn) drainLocked(dc *webrtc.DataChannel) {
	for c.park.len() > 0 && dc.BufferedAmount() <= c.w.cfg.UnreliableHighWater {
		c.pbuf, _ = c.park.pop(c.pbuf)
		_ = c.sendLocked(dc, c.pbuf)
	}
}

func (c *rtcConn) sendLocked(dc *webrtc.DataChannel, msg []byte) error {
	if err := dc.Send(msg); err != nil {
		c.w.km.drop(dropSendFailed)
		return fmt.Errorf("%w: %w", ErrDropped, err)
	}
	c.w.km.msg(Unreliable, dirOut, len(msg))
	return nil
}

// Close ends the connection; run then closes the peer connection (never
// from here: Close may be called from a pion callback).
func (c *rtcConn) Close(code uint32, reason string) error {
	c.endWith(fmt.Errorf("%w: closed by edge with code %d", ErrClosed, code))
	return nil
}
