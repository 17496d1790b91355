package streamer

import "errors"

var (
	// ErrConfig means a Config failed Validate.
	ErrConfig = errors.New("streamer: invalid config")
	// ErrSendQueueFull means the signalling socket fell too far behind; the
	// connection is dropped and redialled.
	ErrSendQueueFull = errors.New("streamer: signalling send queue full")
	// ErrRefused means the server closed the socket with a policy close
	// (bad or missing token); Run keeps retrying with backoff.
	ErrRefused = errors.New("streamer: refused by signalling server")
)
