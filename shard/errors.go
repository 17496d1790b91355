package shard

import "errors"

var (
	// ErrConfig: the configuration is invalid.
	ErrConfig = errors.New("shard: invalid config")
	// ErrUnknownInstance: no shard holds the instance.
	ErrUnknownInstance = errors.New("shard: instance not found")
	// ErrUnknownShard: the shard is not in the configuration.
	ErrUnknownShard = errors.New("shard: unknown shard")
	// ErrLinkDown: the link to the shard is not connected.
	ErrLinkDown = errors.New("shard: link down")
	// ErrPinNotFound: no pin for the session (never pinned, or expired).
	ErrPinNotFound = errors.New("shard: pin not found")
	// ErrDraining: the gateway is draining and takes no new sessions.
	ErrDraining = errors.New("shard: draining")
	// ErrProtocol: the shard broke the link protocol.
	ErrProtocol = errors.New("shard: link protocol violation")
)
