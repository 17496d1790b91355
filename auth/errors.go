package auth

import "errors"

var (
	// ErrInvalid: the token does not parse, its signature does not verify,
	// or a required claim is missing.
	ErrInvalid = errors.New("auth: invalid token")
	// ErrExpired: the token's exp is in the past.
	ErrExpired = errors.New("auth: token expired")
	// ErrWrongAudience: the token was minted for another audience.
	ErrWrongAudience = errors.New("auth: wrong audience")
	// ErrWrongType: the token is of another type (a resume token offered as
	// an access token, say).
	ErrWrongType = errors.New("auth: wrong token type")
	// ErrNoSecret: the signer was built without a secret.
	ErrNoSecret = errors.New("auth: no signing secret")
	// ErrTooLarge: the token is longer than MaxTokenBytes.
	ErrTooLarge = errors.New("auth: token too large")
	// ErrWeakSecret: a secret holds placeholder text or too little entropy
	// (CheckSecret); a production edge refuses to start with one.
	ErrWeakSecret = errors.New("not a random secret")
)
