package signalling

import "errors"

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

	// ErrUnknownStreamer: no registered streamer has that id.
	ErrUnknownStreamer = errors.New("signalling: unknown streamer")
	// ErrStreamerExists: the id is registered already.
	ErrStreamerExists = errors.New("signalling: streamer id taken")
	// ErrNotIdle: the streamer is leased to another session or streaming.
	ErrNotIdle = errors.New("signalling: streamer not idle")
	// ErrNoIdleStreamer: no idle streamer in that POP offers that codec.
	ErrNoIdleStreamer = errors.New("signalling: no idle streamer")
	// ErrSessionLeased: the session holds a lease on another streamer.
	ErrSessionLeased = errors.New("signalling: session already holds a lease")
	// ErrUnknownSession: the session holds no lease.
	ErrUnknownSession = errors.New("signalling: unknown session")
	// ErrBadLease: a lease request is malformed (empty session id).
	ErrBadLease = errors.New("signalling: bad lease request")
	// ErrFleetUnavailable: the fleet's Redis cannot be reached, so the
	// registry and cross-edge signalling refuse what needs it (local
	// streamer-player pairs keep working).
	ErrFleetUnavailable = errors.New("signalling: fleet registry unavailable")
)
