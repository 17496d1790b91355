package opguard

import "errors"

var (
	// ErrNoToken: no bearer access token, or one that does not verify.
	ErrNoToken = errors.New("opguard: operator token required")
	// ErrNotOperator: a valid access token without the operator role.
	ErrNotOperator = errors.New("opguard: operator role required")
	// ErrCrossSite: a browser sent the request on another site's behalf.
	ErrCrossSite = errors.New("opguard: cross-site request refused")
	// ErrHost: the request named a host the admin listener does not answer to.
	ErrHost = errors.New("opguard: host not allowed")
)
