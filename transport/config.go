package transport

import (
	"fmt"
	"time"

	"github.com/oshun/egbe-edge/codec"
)

// Realtime endpoint paths (DESIGN.md section 3); they are contracts.
const (
	PathNegotiate    = "/v6/realtime/negotiate"
	PathWebTransport = "/v6/realtime/webtransport"
	PathWebRTC       = "/v6/realtime/webrtc"
	PathWebSocket    = "/v6/realtime/websocket"
)

// WebSocket subprotocols. egbe.v1 is chosen when a client offers none.
const (
	SubprotocolProto = "egbe.v1"      // binary frames, protobuf envelopes
	SubprotocolJSON  = "egbe.v1.json" // text frames, protojson envelopes
)

// WebRTC data channel labels the client creates.
const (
	LabelReliable   = "egbe-reliable"   // ordered, fully reliable
	LabelUnreliable = "egbe-unreliable" // ordered:false, maxRetransmits:0
)

// Config gathers every transport's settings.
type Config struct {
	WebSocket    WebSocketConfig
	WebTransport WebTransportConfig
	WebRTC       WebRTCConfig
	Negotiate    NegotiateConfig
}

// Default returns the defaults for every transport.
func Default() Config {
	return Config{
		WebSocket:    DefaultWebSocketConfig(),
		WebTransport: DefaultWebTransportConfig(),
		WebRTC:       DefaultWebRTCConfig(),
		Negotiate:    DefaultNegotiateConfig(),
	}
}

// Validate checks every sub-config.
func (c Config) Validate() error {
	for _, v := range []interface{ Validate() error }{c.WebSocket, c.WebTransport, c.WebRTC, c.Negotiate} {
		if err := v.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// WebSocketConfig configures the WebSocket transport.
type WebSocketConfig struct {
	// AllowedOrigins lists the Origin header values accepted, compared
	// case-insensitively ("http://localhost:8080"). Empty allows any origin.
	// Requests without an Origin (non-browser clients) are always accepted.
	AllowedOrigins []string
	// PingInterval is how often the edge pings an idle client; a client that
	// has not answered within PingInterval+PongWait is dropped.
	PingInterval time.Duration
	PongWait     time.Duration
	// WriteTimeout bounds one write when the caller's ctx has no earlier
	// deadline.
	WriteTimeout time.Duration
	// HandshakeTimeout bounds the HTTP upgrade.
	HandshakeTimeout time.Duration
	// ReadBufferSize is held per connection for its whole life, so it is
	// small; WriteBufferSize buffers are pooled and only held during a write.
	ReadBufferSize  int
	WriteBufferSize int
}

// DefaultWebSocketConfig: 1 KiB read buffer per connection (the 10k-session
// memory target), pooled 4 KiB write buffers, 20 s pings.
func DefaultWebSocketConfig() WebSocketConfig {
	return WebSocketConfig{
		PingInterval:     20 * time.Second,
		PongWait:         10 * time.Second,
		WriteTimeout:     10 * time.Second,
		HandshakeTimeout: 10 * time.Second,
		ReadBufferSize:   1 << 10,
		WriteBufferSize:  4 << 10,
	}
}

// Validate checks ranges.
func (c WebSocketConfig) Validate() error {
	switch {
	case c.PingInterval <= 0, c.PongWait <= 0, c.WriteTimeout <= 0, c.HandshakeTimeout <= 0:
		return fmt.Errorf("%w: websocket timeouts must be positive", ErrConfig)
	case c.ReadBufferSize < 256 || c.ReadBufferSize > codec.MaxMessageSize:
		return fmt.Errorf("%w: websocket read buffer %d not in [256, %d]", ErrConfig, c.ReadBufferSize, codec.MaxMessageSize)
	case c.WriteBufferSize < 256 || c.WriteBufferSize > codec.MaxMessageSize:
		return fmt.Errorf("%w: websocket write buffer %d not in [256, %d]", ErrConfig, c.WriteBufferSize, codec.MaxMessageSize)
	}
	return nil
}

// WebTransportConfig configures WebTransport over HTTP/3.
type WebTransportConfig struct {
	// FirstStreamTimeout bounds the wait, after the session is accepted, for
	// the client to open the reliable stream and write to it (QUIC streams
	// only become visible to the peer once data is sent).
	FirstStreamTimeout time.Duration
	// MaxIdleTimeout and KeepAlivePeriod are the QUIC settings.
	MaxIdleTimeout  time.Duration
	KeepAlivePeriod time.Duration
	// HTTP3IdleTimeout closes a connection that has no HTTP/3 request or
	// WebTransport session open for this long; QUIC keepalives do not
	// count, so a bare QUIC connection that never sends a request is
	// dropped after it.
	HTTP3IdleTimeout time.Duration
	// WriteTimeout bounds one reliable write when ctx has no earlier deadline.
	WriteTimeout time.Duration
	// DatagramQueue is the depth of the latest-wins queue of outgoing
	// datagrams waiting for the sender; a full queue drops its oldest.
	DatagramQueue int
	// InboundQueue is the depth of the latest-wins queue of received
	// datagrams waiting for Read; a full queue drops its oldest.
	InboundQueue int
}

// DefaultWebTransportConfig returns the defaults.
func DefaultWebTransportConfig() WebTransportConfig {
	return WebTransportConfig{
		FirstStreamTimeout: 10 * time.Second,
		MaxIdleTimeout:     30 * time.Second,
		KeepAlivePeriod:    10 * time.Second,
		HTTP3IdleTimeout:   30 * time.Second,
		WriteTimeout:       10 * time.Second,
		DatagramQueue:      2,
		InboundQueue:       2,
	}
}

// Validate checks ranges.
func (c WebTransportConfig) Validate() error {
	switch {
	case c.FirstStreamTimeout <= 0, c.MaxIdleTimeout <= 0, c.KeepAlivePeriod <= 0, c.WriteTimeout <= 0, c.HTTP3IdleTimeout <= 0:
		return fmt.Errorf("%w: webtransport timeouts must be positive", ErrConfig)
	case c.KeepAlivePeriod >= c.MaxIdleTimeout:
		return fmt.Errorf("%w: webtransport keepalive %s must be below idle timeout %s", ErrConfig, c.KeepAlivePeriod, c.MaxIdleTimeout)
	case c.DatagramQueue <= 0, c.InboundQueue <= 0, c.DatagramQueue > latestMax, c.InboundQueue > latestMax:
		return fmt.Errorf("%w: webtransport queues must be 1..%d deep", ErrConfig, latestMax)
	}
	return nil
}

// WebRTCConfig configures WHIP-style WebRTC data channels.
type WebRTCConfig struct {
	// MaxOfferBytes bounds the POST body.
	MaxOfferBytes int64
	// OfferReadTimeout bounds reading the POST body; a body still arriving
	// then is answered 408 offer_timeout.
	OfferReadTimeout time.Duration
	// ConnectTimeout bounds ICE + DTLS + SCTP + the reliable channel opening,
	// counted from the answer; a peer that does not make it is torn down.
	ConnectTimeout time.Duration
	// GatherTimeout bounds ICE gathering before the answer is sent (ICE-lite
	// on a mux gathers at once; this is a guard).
	GatherTimeout time.Duration
	// UnreliableWait is how long, once the reliable channel is open, the
	// Handler start waits for the unreliable channel (both are created
	// before the offer, so it normally opens within a round trip).
	UnreliableWait time.Duration
	// InboundQueue is the depth of the latest-wins queue of unreliable
	// messages waiting for Read; a full queue drops its oldest. (Read reads
	// the reliable channel itself: SCTP pushes back on the peer.)
	InboundQueue int
	// ReliableHighWater: WriteReliable waits while the reliable channel has
	// more than this buffered. UnreliableHighWater: above it
	// WriteUnreliable parks the message (one deep, latest wins) until the
	// channel drains, so SCTP never holds much stale state.
	ReliableHighWater   uint64
	UnreliableHighWater uint64
	// MaxPending bounds peers answered but not yet connected; offers beyond
	// it get 503 so an offer flood cannot pile up peer connections.
	// MaxPendingPerNetwork bounds those of one network (IPv4 /24, IPv6
	// /48), so one network cannot take every slot.
	MaxPending           int
	MaxPendingPerNetwork int
	// ICEServers, when set, gives the ICE servers announced with each
	// answer in WHIP Link headers (rel="ice-server").
	ICEServers ICEServersFunc
}

// DefaultWebRTCConfig returns the defaults.
func DefaultWebRTCConfig() WebRTCConfig {
	return WebRTCConfig{
		MaxOfferBytes:        64 << 10,
		OfferReadTimeout:     5 * time.Second,
		ConnectTimeout:       15 * time.Second,
		GatherTimeout:        5 * time.Second,
		UnreliableWait:       time.Second,
		InboundQueue:         2,
		ReliableHighWater:    1 << 20,
		UnreliableHighWater:  16 << 10,
		MaxPending:           256,
		MaxPendingPerNetwork: 32,
	}
}

// Validate checks ranges.
func (c WebRTCConfig) Validate() error {
	switch {
	case c.MaxOfferBytes < 1024:
		return fmt.Errorf("%w: webrtc max offer %d below 1 KiB", ErrConfig, c.MaxOfferBytes)
	case c.ConnectTimeout <= 0, c.GatherTimeout <= 0, c.UnreliableWait < 0, c.OfferReadTimeout <= 0:
		return fmt.Errorf("%w: webrtc timeouts must be positive", ErrConfig)
	case c.InboundQueue <= 0, c.InboundQueue > latestMax:
		return fmt.Errorf("%w: webrtc inbound queue must be 1..%d deep", ErrConfig, latestMax)
	case c.ReliableHighWater == 0, c.UnreliableHighWater == 0, c.MaxPending <= 0, c.MaxPendingPerNetwork <= 0:
		return fmt.Errorf("%w: webrtc limits must be positive", ErrConfig)
	}
	return nil
}
