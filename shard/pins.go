package shard

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Pin binds a session to its shard. A pin lives while the session is
// connected and PinTTL after its last disconnect.
type Pin struct {
	SessionID  string
	ShardID    string
	InstanceID string
	Subject    string
	EntityID   uint32
	// ExpiresAt is zero while connected; set to disconnect time + TTL.
	ExpiresAt time.Time
}

// PinStore holds pins. The memory implementation serves one edge; a shared
// (Redis) implementation lets a session resume on another edge.
type PinStore interface {
	// Put creates or refreshes a pin (ExpiresAt zero = connected).
	Put(ctx context.Context, p Pin) error
	// Get returns a live pin, or ErrPinNotFound (absent or expired at now).
	Get(ctx context.Context, sessionID string, now time.Time) (Pin, error)
}

// MemoryPins is the in-process PinStore.
type MemoryPins struct {
	now  func() time.Time // immutable after NewMemoryPins: the sweep's clock
	mu   sync.Mutex
	pins map[string]Pin // guarded by mu
	puts int            // guarded by mu: counts puts between sweeps
}

var _ PinStore = (*MemoryPins)(nil)

// NewMemoryPins returns an empty store whose sweep reads now (nil:
// time.Now); give it the clock the pins' ExpiresAt come from.
func NewMemoryPins(now func() time.Time) *MemoryPins {
	if now == nil {
		now = time.Now
	}
	return &MemoryPins{now: now, pins: map[string]Pin{}}
}

// Put implements PinStore. Every 1024 puts it sweeps pins that expired
// before now (Get also drops an expired pin it finds).
func (m *MemoryPins) Put(_ context.Context, p Pin) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pins[p.SessionID] = p
	if m.puts++; m.puts%1024 == 0 {
		now := m.now()
		for id, q := range m.pins {
			if !q.ExpiresAt.IsZero() && q.ExpiresAt.Before(now) {
				delete(m.pins, id)
			}
		}
	}
	return nil
}

// Len is the number of pins held (expired ones not yet swept included).
func (m *MemoryPins) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pins)
}

// Get implements PinStore.
func (m *MemoryPins) Get(_ context.Context, id string, now time.Time) (Pin, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.pins[id]
	if !ok {
		return Pin{}, fmt.Errorf("%w: %s", ErrPinNotFound, id)
	}
	if !p.ExpiresAt.IsZero() && !now.Before(p.ExpiresAt) {
		delete(m.pins, id)
		return Pin{}, fmt.Errorf("%w: %s expired", ErrPinNotFound, id)
	}
	return p, nil
}
