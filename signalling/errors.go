package signalling

import (
	"errors"

	"github.com/oshun/egbe-edge/state"
)

var (
	// ErrBadConfig: Config.Validate refused a field.
	ErrBadConfig = errors.New("signalling: bad config")
	// ErrClosed: the server is closed.
	ErrClosed = errors.New("signalling: server closed")

	// ErrBadJSON: a frame is not one JSON value.
	ErrBadJSON = errors.New("signalling: bad JSON")
	// ErrNotObject: a frame is valid JSON but not an object (JSON null, say).
	ErrNotObject = errors.New("signalling: message is not a JSON object")
	// ErrNoType: a message has no string "type" field.
	ErrNoType = errors.New("signalling: message has no type")
	// ErrTooManyFields: a message has more top-level fields than the decoder keeps.
	ErrTooManyFields = errors.New("signalling: too many fields")

	// The registry's errors are the store's (state/errors.go), so a
	// caller tests them with errors.Is whichever store answered.

	// ErrUnknownStreamer: no registered streamer has that id.
	ErrUnknownStreamer = state.ErrUnknownStreamer
	// ErrStreamerExists: the id is registered already (on this edge).
	ErrStreamerExists = errors.New("signalling: streamer id taken")
	// ErrNotIdle: the streamer is leased to another session or streaming.
	ErrNotIdle = state.ErrNotIdle
	// ErrNoIdleStreamer: no idle streamer in that POP offers that codec.
	ErrNoIdleStreamer = state.ErrNoIdleStreamer
	// ErrSessionLeased: the session holds a lease on another streamer.
	ErrSessionLeased = state.ErrSessionLeased
	// ErrUnknownSession: the session holds no lease.
	ErrUnknownSession = state.ErrUnknownSession
	// ErrBadLease: a lease request is malformed (empty session id).
	ErrBadLease = errors.New("signalling: bad lease request")
	// ErrFleetUnavailable: the fleet's store cannot be reached, so the
	// registry and cross-edge signalling refuse what needs it (local
	// streamer-player pairs keep working).
	ErrFleetUnavailable = errors.New("signalling: fleet registry unavailable")
	// ErrBadRelayEntry: a cross-edge inbox entry does not decode (relay.go).
	ErrBadRelayEntry = errors.New("signalling: bad relay entry")
)
