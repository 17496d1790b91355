package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Revocations records revoked realtime sessions: a revoked session's resume
// tokens are refused on every edge, and the edge that holds it live ends it.
// A revocation lasts until a deadline (the longest lifetime of a resume
// token the session can hold), then lapses on its own.
type Revocations interface {
	// Revoke marks sessionID revoked until until (which must be in the
	// future). A revocation is never shortened: revoking again with an
	// earlier deadline keeps the later one.
	Revoke(ctx context.Context, sessionID string, until time.Time) error
	// Revoked returns the subset of sessionIDs revoked now, as a set (nil
	// when none is). Any number of ids is one round trip on Redis.
	Revoked(ctx context.Context, sessionIDs ...string) (map[string]bool, error)
}

var _ Revocations = (*MemoryRevocations)(nil)

// CheckRevoke refuses an empty session id and a deadline not after now.
func CheckRevoke(sessionID string, until, now time.Time) error {
	if sessionID == "" {
		return fmt.Errorf("%w: empty session id", ErrBadArgument)
	}
	if !until.After(now) {
		return fmt.Errorf("%w: revocation deadline %v is not in the future", ErrBadArgument, until)
	}
	return nil
}

// MemoryRevocations is the one-node Revocations.
type MemoryRevocations struct {
	now func() time.Time // immutable

	mu       sync.Mutex
	until    map[string]time.Time // guarded by mu: session id -> deadline
	watchers memoryWatchers
}

// NewMemoryRevocations returns an empty store; now may be nil (time.Now).
func NewMemoryRevocations(now func() time.Time) *MemoryRevocations {
	if now == nil {
		now = time.Now
	}
	return &MemoryRevocations{now: now, until: map[string]time.Time{}}
}

// Revoke implements Revocations. Revocations are rare operator actions, so
// each one also sweeps the lapsed ones.
func (m *MemoryRevocations) Revoke(_ context.Context, sessionID string, until time.Time) error {
	now := m.now()
	if err := CheckRevoke(sessionID, until, now); err != nil {
		return err
	}
	m.mu.Lock()
	for id, u := range m.until {
		if !now.Before(u) {
			delete(m.until, id)
		}
	}
	if until.After(m.until[sessionID]) {
		m.until[sessionID] = until
	}
	m.mu.Unlock()
	m.watchers.notify(sessionID)
	return nil
}

// Revoked implements Revocations.
func (m *MemoryRevocations) Revoked(_ context.Context, sessionIDs ...string) (map[string]bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out map[string]bool
	for _, id := range sessionIDs {
		if u, ok := m.until[id]; ok && now.Before(u) {
			if out == nil {
				out = map[string]bool{}
			}
			out[id] = true
		}
	}
	return out, nil
}

// RevokedGetter is what a KV may add: GetRevoked's two reads in one round
// trip, when rev is a store it can read alongside (same backing store).
// handled is false when it cannot.
type RevokedGetter interface {
	GetRevoked(ctx context.Context, key string, rev Revocations, sessionID string) (value []byte, revoked bool, err error, handled bool)
}

// GetRevoked reads key from kv and whether sessionID is revoked: a resume's
// pin read and its revocation check. When kv can read rev alongside
// (RevokedGetter: a Redis KV and Revocations on one connection), the two
// reads share one pipeline (one round trip, where the pin read alone
// already was one); otherwise it is kv.Get, then rev.Revoked (free in
// memory).
//
// revoked is reported whether or not key exists. err is ErrUnavailable
// when either read failed (the caller fails closed), else kv's error
// (ErrNotFound when key is absent or expired).
func GetRevoked(ctx context.Context, kv KV, key string, rev Revocations, sessionID string) (value []byte, revoked bool, err error) {
	if g, ok := kv.(RevokedGetter); ok {
		if value, revoked, err, handled := g.GetRevoked(ctx, key, rev, sessionID); handled {
			return value, revoked, err
		}
	}
	value, err = kv.Get(ctx, key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, false, err
	}
	set, rerr := rev.Revoked(ctx, sessionID)
	if rerr != nil {
		return nil, false, rerr
	}
	return value, set[sessionID], err
}
