package state

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// FleetBoard is where every edge of a fleet publishes a small snapshot of
// its own figures (for the operator dashboard), and where any edge reads
// the whole fleet's. A snapshot lapses when its edge stops publishing.
type FleetBoard interface {
	Publish(ctx context.Context, edgeID string, snapshot []byte, ttl time.Duration) error
	// Snapshots returns the live snapshots by edge id.
	Snapshots(ctx context.Context) (map[string][]byte, error)
}

// RedisFleetBoard keeps one key per edge and an index of edges scored by
// expiry; both carry the {egbe-fleet} hash tag.
type RedisFleetBoard struct{ rdb redis.UniversalClient }

// NewRedisFleetBoard returns a board on rdb.
func NewRedisFleetBoard(rdb redis.UniversalClient) *RedisFleetBoard {
	return &RedisFleetBoard{rdb: rdb}
}

const (
	fleetIndex     = "{egbe-fleet}:edges"
	fleetKeyPrefix = "{egbe-fleet}:edge:"
)

// Publish implements FleetBoard.
func (b *RedisFleetBoard) Publish(ctx context.Context, edgeID string, snapshot []byte, ttl time.Duration) error {
	exp := time.Now().Add(ttl).UnixMilli()
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, fleetKeyPrefix+edgeID, snapshot, ttl)
		p.ZAdd(ctx, fleetIndex, redis.Z{Score: float64(exp), Member: edgeID})
		p.ZRemRangeByScore(ctx, fleetIndex, "-inf", strconv.FormatInt(time.Now().UnixMilli(), 10))
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// Snapshots implements FleetBoard.
func (b *RedisFleetBoard) Snapshots(ctx context.Context) (map[string][]byte, error) {
	ids, err := b.rdb.ZRangeByScore(ctx, fleetIndex, &redis.ZRangeBy{Min: strconv.FormatInt(time.Now().UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	out := make(map[string][]byte, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = fleetKeyPrefix + id
	}
	vals, err := b.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out[ids[i]] = []byte(s)
		}
	}
	return out, nil
}
