package state

import "errors"

var (
	// ErrUnavailable: the backing store (Redis) could not be reached or
	// answered with an error. Callers fail closed and answer a typed 503.
	ErrUnavailable = errors.New("state: store unavailable")
	// ErrStateLost: the waiting-room epoch is missing or does not match the
	// one this node knows (FLUSHALL, a restart with empty data, a failover
	// that lost writes). Nothing is admitted until an operator re-arms.
	ErrStateLost = errors.New("state: waiting-room state lost")
	// ErrBadArgument: a caller passed an empty key, a negative limit or a
	// malformed command.
	ErrBadArgument = errors.New("state: bad argument")
)

// Streamer registry errors (Streamers).
var (
	// ErrUnknownStreamer: no registered streamer has that id.
	ErrUnknownStreamer = errors.New("state: unknown streamer")
	// ErrNotIdle: the streamer is leased to another session or streaming.
	ErrNotIdle = errors.New("state: streamer not idle")
	// ErrNoIdleStreamer: no idle streamer in that POP offers that codec.
	ErrNoIdleStreamer = errors.New("state: no idle streamer")
	// ErrSessionLeased: the session holds a lease on another streamer.
	ErrSessionLeased = errors.New("state: session already holds a lease")
	// ErrUnknownSession: the session holds no lease.
	ErrUnknownSession = errors.New("state: unknown session")
)

// Availability is what a shared store can say without a round trip: nil
// while it answers, ErrUnavailable while it is known not to (every Redis
// store of a process shares one tracker: state/redisstate).
type Availability interface {
	Available() error
}
