package turnrelay

import "errors"

var (
	// ErrConfig wraps every configuration error.
	ErrConfig = errors.New("turnrelay: config")
	// ErrBadUsername: a TURN username that is not "<unix expiry>:<subject>"
	// with a decimal expiry and a subject of at most MaxSubjectLen bytes.
	ErrBadUsername = errors.New("turnrelay: malformed TURN REST username")
	// ErrExpired: the credential's expiry has passed.
	ErrExpired = errors.New("turnrelay: credential expired")
	// ErrPeerForbidden: the peer address is loopback, private, link-local,
	// multicast or otherwise not relayable under the peer policy.
	ErrPeerForbidden = errors.New("turnrelay: peer address not allowed")
	// ErrTCPRelay: RFC 6062 TCP relay allocations are not offered
	// (browsers never ask for them; they would let a client open TCP
	// connections from the edge's address to anywhere).
	ErrTCPRelay = errors.New("turnrelay: TCP relay allocations are not offered")
	// ErrNoRelayPort: every port of the relay range is in use.
	ErrNoRelayPort = errors.New("turnrelay: no free relay port")
	// ErrClosed: the server has been closed.
	ErrClosed = errors.New("turnrelay: closed")
)
