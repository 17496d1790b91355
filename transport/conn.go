// Package transport terminates the three realtime transports — WebTransport
// over HTTP/3, WebRTC data channels and WebSocket — and presents each
// client connection as one Conn with a reliable ordered lane and, where the
// transport has one, an unreliable lane.
package transport

import (
	"context"
	"errors"
	"net"
)

// Kind names a transport, in fallback order.
type Kind string

const (
	KindWebTransport Kind = "webtransport"
	KindWebRTC       Kind = "webrtc"
	KindWebSocket    Kind = "websocket"
)

// FallbackOrder is the order transports are offered in.
var FallbackOrder = []Kind{KindWebTransport, KindWebRTC, KindWebSocket}

// Lane says which lane a message travelled on.
type Lane uint8

const (
	Reliable   Lane = iota // ordered, lossless: stream, ordered data channel, WebSocket
	Unreliable             // datagram or maxRetransmits:0 data channel
)

// Encoding is how envelopes are serialised on a connection.
type Encoding uint8

const (
	EncodingProto Encoding = iota // binary protobuf
	EncodingJSON                  // protojson (WebSocket subprotocol egbe.v1.json)
)

// Message is one envelope's bytes as received.
type Message struct {
	Lane Lane
	// Data is valid until the next Read on the same Conn: transports may
	// read into a reused buffer. A caller that keeps it longer copies it.
	Data []byte
}

// Conn is one client's realtime connection, whatever carries it.
//
// Read is called by one goroutine (the session's reader); WriteReliable,
// WriteUnreliable and Flush by one goroutine (the session's writer); Close
// may be called from any goroutine.
//
// Writes are batched: a message given to WriteReliable is only known to be
// handed to the network once a later Flush returns nil (a transport may send
// it earlier). The writer writes everything it has queued, then flushes
// once, so a burst leaves in as few syscalls as the transport allows. No
// write retains msg after it returns.
type Conn interface {
	Kind() Kind
	Encoding() Encoding
	RemoteAddr() net.Addr
	// Read blocks for the next message on either lane. Oversized messages
	// return an error wrapping ErrMessageTooLarge; after any error the
	// connection is unusable.
	Read(ctx context.Context) (Message, error)
	// WriteReliable buffers one message on the reliable lane. It blocks only
	// while the transport applies backpressure (or until ctx is done).
	WriteReliable(ctx context.Context, msg []byte) error
	// Flush hands everything buffered by WriteReliable to the network.
	Flush(ctx context.Context) error
	// WriteUnreliable sends one message on the unreliable lane without
	// blocking. It returns ErrNoUnreliableLane if the transport has none and
	// ErrDropped if the message could not be sent right now.
	WriteUnreliable(msg []byte) error
	HasUnreliable() bool
	// Close ends the connection with an application close code (see
	// codec.Code.CloseCode) and a short reason. Idempotent.
	Close(code uint32, reason string) error
	// Done is closed once the connection has ended, for any reason.
	Done() <-chan struct{}
}

// Handler runs one connection's session; it returns when the session ends.
// The transport closes the Conn after Handler returns.
type Handler func(ctx context.Context, c Conn)

var (
	// ErrMessageTooLarge: a message exceeded the size limit.
	ErrMessageTooLarge = errors.New("transport: message too large")
	// ErrNoUnreliableLane: the transport has only a reliable lane.
	ErrNoUnreliableLane = errors.New("transport: no unreliable lane")
	// ErrDropped: an unreliable message was dropped (send buffer full).
	ErrDropped = errors.New("transport: unreliable message dropped")
	// ErrClosed: the connection is closed.
	ErrClosed = errors.New("transport: connection closed")
)
