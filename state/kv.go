package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// KV is a small key-value store with per-key expiry: the shared state that
// needs no multi-key atomicity (session pins). Values are opaque bytes.
type KV interface {
	// Put stores value under key for ttl (ttl > 0).
	Put(ctx context.Context, key string, value []byte, ttl time.Duration) error
	// Get returns the value, or ErrNotFound when absent or expired.
	Get(ctx context.Context, key string) ([]byte, error)
}

// ErrNotFound: no live value under the key.
var ErrNotFound = errors.New("state: not found")

// MemoryKV is the in-process KV.
type MemoryKV struct {
	now func() time.Time

	mu   sync.Mutex
	m    map[string]kvEntry // guarded by mu
	puts int                // guarded by mu: sweep every 1024 puts
}

type kvEntry struct {
	v   []byte
	exp time.Time
}

// NewMemoryKV returns an empty store; now may be nil (time.Now).
func NewMemoryKV(now func() time.Time) *MemoryKV {
	if now == nil {
		now = time.Now
	}
	return &MemoryKV{now: now, m: map[string]kvEntry{}}
}

// Put implements KV.
func (k *MemoryKV) Put(_ context.Context, key string, value []byte, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("state: kv ttl %v must be positive", ttl)
	}
	now := k.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[key] = kvEntry{v: append([]byte(nil), value...), exp: now.Add(ttl)}
	if k.puts++; k.puts%1024 == 0 {
		for key, e := range k.m {
			if !now.Before(e.exp) {
				delete(k.m, key)
			}
		}
	}
	return nil
}

// Get implements KV.
func (k *MemoryKV) Get(_ context.Context, key string) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[key]
	if !ok || !k.now().Before(e.exp) {
		return nil, ErrNotFound
	}
	return append([]byte(nil), e.v...), nil
}
