package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// StatePins is a PinStore over a state.KV: with the Redis KV, every edge of
// a fleet sees every pin, so a client whose edge died resumes on another.
type StatePins struct {
	kv  state.KV
	now func() time.Time // immutable after NewStatePins: the clock ExpiresAt is on
	// connectedTTL bounds a connected pin in the store: the owning edge
	// refreshes it while the session lives, so a pin whose edge died lapses
	// on its own.
	connectedTTL time.Duration
}

var _ PinStore = (*StatePins)(nil)

// NewStatePins stores pins in kv. connectedTTL must exceed the gateway's
// pin refresh interval (use PinTTL). now (nil: time.Now) is the clock the
// pins' ExpiresAt are on (the gateway's Deps.Now): a disconnected pin's key
// lives until then.
func NewStatePins(kv state.KV, connectedTTL time.Duration, now func() time.Time) *StatePins {
	if now == nil {
		now = time.Now
	}
	return &StatePins{kv: kv, now: now, connectedTTL: connectedTTL}
}

// storedPin is a Pin's stored form.
type storedPin struct {
	Shard    string    `json:"shard"`
	Instance string    `json:"inst"`
	Subject  string    `json:"sub"`
	Entity   uint32    `json:"ent,omitempty"`
	Expires  time.Time `json:"exp,omitzero"`
}

// Put implements PinStore.
func (p *StatePins) Put(ctx context.Context, pin Pin) error {
	ttl := p.connectedTTL
	if !pin.ExpiresAt.IsZero() {
		ttl = pin.ExpiresAt.Sub(p.now())
		if ttl <= 0 {
			ttl = time.Millisecond
		}
	}
	b, err := json.Marshal(storedPin{Shard: pin.ShardID, Instance: pin.InstanceID, Subject: pin.Subject, Entity: pin.EntityID, Expires: pin.ExpiresAt})
	if err != nil {
		return err
	}
	return p.kv.Put(ctx, pin.SessionID, b, ttl)
}

// Get implements PinStore.
func (p *StatePins) Get(ctx context.Context, sessionID string, now time.Time) (Pin, error) {
	b, err := p.kv.Get(ctx, sessionID)
	return decodePin(sessionID, b, err, now)
}

// decodePin turns a KV read of sessionID's pin (b, err) into a Pin.
func decodePin(sessionID string, b []byte, err error, now time.Time) (Pin, error) {
	if errors.Is(err, state.ErrNotFound) {
		return Pin{}, ErrPinNotFound
	}
	if err != nil {
		return Pin{}, err
	}
	var s storedPin
	if err := json.Unmarshal(b, &s); err != nil {
		return Pin{}, fmt.Errorf("shard: stored pin of %s: %w", sessionID, err)
	}
	if !s.Expires.IsZero() && !now.Before(s.Expires) {
		return Pin{}, ErrPinNotFound
	}
	return Pin{SessionID: sessionID, ShardID: s.Shard, InstanceID: s.Instance, Subject: s.Subject, EntityID: s.Entity, ExpiresAt: s.Expires}, nil
}
