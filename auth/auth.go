package auth

import (
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MaxTokenBytes bounds what Verify will parse.
const MaxTokenBytes = 8 << 10

// Issuer is the iss claim of every token the edge mints.
const Issuer = "egbe-edge"

// Token types (the "type" claim).
const (
	TypeAccess          = "access"
	TypeResume          = "resume"
	TypePxSession       = "pxstream-session"
	TypeStreamer        = "pxstream-streamer"
	TypeSFU             = "pxstream-sfu"
	TypeQueueTicket     = "queue-ticket"
	TypeAdmissionTicket = "admission-ticket"
)

// Audiences.
const (
	AudienceRealtime = "egbe-realtime"
	AudiencePxstream = "egbe-pxstream"
	AudienceQueue    = "egbe-queue"
)

// MinSecretBytes is the shortest secret prod mode accepts.
const MinSecretBytes = 32

// RandomSecret returns a fresh 32-byte secret (dev mode).
func RandomSecret() []byte {
	b := make([]byte, MinSecretBytes)
	if _, err := rand.Read(b); err != nil {
		// crypto/rand never fails on supported platforms (Go 1.24+ panics
		// internally instead); keep a total function for callers.
		return nil
	}
	return b
}

// Signer mints and verifies tokens with one HMAC key. It is safe for
// concurrent use.
type Signer struct {
	key []byte           // immutable after New
	now func() time.Time // immutable after New
}

// New returns a Signer. now may be nil (time.Now).
func New(secret []byte, now func() time.Time) (*Signer, error) {
	if len(secret) == 0 {
		return nil, ErrNoSecret
	}
	if now == nil {
		now = time.Now
	}
	return &Signer{key: append([]byte(nil), secret...), now: now}, nil
}

// Now is the signer's clock.
func (s *Signer) Now() time.Time { return s.now() }

// base are the claims every token has.
type base struct {
	Type string `json:"type"`
	jwt.RegisteredClaims
}

func (s *Signer) registered(sub, aud string, ttl time.Duration) jwt.RegisteredClaims {
	now := s.now()
	return jwt.RegisteredClaims{
		Issuer:    Issuer,
		Subject:   sub,
		Audience:  jwt.ClaimStrings{aud},
		IssuedAt:  jwt.NewNumericDate(now),
		NotBefore: jwt.NewNumericDate(now.Add(-5 * time.Second)),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}
}

func (s *Signer) sign(claims jwt.Claims) (string, error) {
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(s.key)
}

// typed is implemented by every claims struct so parse can check the type.
type typed interface {
	jwt.Claims
	tokenType() string
}

func (b base) tokenType() string { return b.Type }

// parse verifies tok's signature, issuer, audience, expiry and type into
// claims.
func (s *Signer) parse(tok, typ, aud string, claims typed) error {
	if len(tok) > MaxTokenBytes {
		return ErrTooLarge
	}
	if tok == "" {
		return fmt.Errorf("%w: empty", ErrInvalid)
	}
	_, err := jwt.ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) { return s.key, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(Issuer),
		jwt.WithAudience(aud),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(s.now),
		jwt.WithLeeway(2*time.Second),
	)
	switch {
	case err == nil:
	case errors.Is(err, jwt.ErrTokenExpired):
		return fmt.Errorf("%w: %w", ErrExpired, err)
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return fmt.Errorf("%w: %w", ErrWrongAudience, err)
	default:
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if got := claims.tokenType(); got != typ {
		return fmt.Errorf("%w: got %q, want %q", ErrWrongType, got, typ)
	}
	return nil
}
