package transport

import "errors"

// Sentinels beyond the Conn contract's (conn.go). HTTP-facing errors are
// also answered as typed JSON bodies; see writeHTTPError.
var (
	// ErrBadOffer: a WebRTC offer body is not a usable SDP offer.
	ErrBadOffer = errors.New("transport: malformed SDP offer")
	// ErrOfferTooLarge: a WebRTC offer body exceeds WebRTCConfig.MaxOfferBytes.
	ErrOfferTooLarge = errors.New("transport: SDP offer too large")
	// ErrHandshakeTimeout: a peer did not finish connecting in time.
	ErrHandshakeTimeout = errors.New("transport: handshake timed out")
	// ErrShuttingDown: the transport no longer accepts connections.
	ErrShuttingDown = errors.New("transport: shutting down")
	// ErrConfig: a configuration value is out of range.
	ErrConfig = errors.New("transport: invalid config")
)

// Internal read-side causes, never returned from Read as is: Read maps
// them to ErrClosed (wrapping the cause) or handles them.
var (
	// errReadCancelled: Read's ctx ended; the connection itself goes on.
	errReadCancelled = errors.New("transport: read cancelled by its context")
	// errKeepalive: a WebSocket peer sent nothing within PongWait of a ping.
	errKeepalive = errors.New("transport: peer silent past the keepalive")
	// errCloseGrace: no close reply within closeGrace of the edge's close.
	errCloseGrace = errors.New("transport: no close reply within the grace period")
	// errPeerClosed: the WebSocket peer sent its close frame.
	errPeerClosed = errors.New("transport: peer closed")
)
