package redisstate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/state"
)

// KV is the shared KV: one Redis string per key with PX expiry.
type KV struct {
	r      *Conn  // immutable
	prefix string // immutable
}

// NewKV stores keys under prefix (KVAdmission, KVPins: keys.go).
func NewKV(r *Conn, prefix string) *KV {
	return &KV{r: r, prefix: prefix}
}

// Put implements KV.
func (k *KV) Put(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("state: kv ttl %v must be positive", ttl)
	}
	if err := k.r.c.Set(ctx, k.prefix+key, value, ttl).Err(); err != nil {
		return fmt.Errorf("%w: %w", state.ErrUnavailable, err)
	}
	return nil
}

// Get implements KV.
func (k *KV) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := k.r.c.Get(ctx, k.prefix+key).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, state.ErrNotFound
	case err != nil:
		return nil, fmt.Errorf("%w: %w", state.ErrUnavailable, err)
	}
	return v, nil
}
