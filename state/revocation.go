package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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

var (
	_ Revocations = (*MemoryRevocations)(nil)
	_ Revocations = (*RedisRevocations)(nil)
)

func checkRevoke(sessionID string, until, now time.Time) error {
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
	if err := checkRevoke(sessionID, until, now); err != nil {
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

// RedisRevocations is the fleet's Revocations: one string per revoked
// session,
//
//	{egbe-revoked}:<session id>   string  deadline (Unix ms), PX expiry at the deadline
//
// Every key carries the {egbe-revoked} hash tag, so the multi-key read of
// an edge's live sessions is one MGET in one Cluster slot.
type RedisRevocations struct {
	r   *Redis           // immutable
	now func() time.Time // immutable
}

// NewRedisRevocations returns the store on r; now (nil: time.Now) is the
// clock deadlines are measured against: key TTLs are relative to the
// caller's clock, never Redis's.
func NewRedisRevocations(r *Redis, now func() time.Time) *RedisRevocations {
	if now == nil {
		now = time.Now
	}
	return &RedisRevocations{r: r, now: now}
}

// revokedMGetChunk bounds one MGET; an edge's live sessions are read in
// chunks of this many keys, all in one pipeline (one round trip).
const revokedMGetChunk = 512

// luaRevoke sets KEYS[1] to ARGV[1] (deadline ms) for ARGV[2] ms unless it
// already holds a later deadline: a revocation is never shortened.
var luaRevoke = newScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if cur >= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// Revoke implements Revocations.
func (r *RedisRevocations) Revoke(ctx context.Context, sessionID string, until time.Time) error {
	now := r.now()
	if err := checkRevoke(sessionID, until, now); err != nil {
		return err
	}
	ttl := until.Sub(now).Milliseconds()
	if ttl <= 0 {
		ttl = 1
	}
	err := r.r.run(ctx, luaRevoke, []string{revocationKey(sessionID)}, until.UnixMilli(), ttl).Err()
	if err != nil {
		return fmt.Errorf("%w: revoke %s: %w", ErrUnavailable, sessionID, err)
	}
	// The revocation holds once stored; the notice only makes the holding
	// edge act before its next periodic check.
	_ = publishRevocation(ctx, r.r.c, sessionID)
	return nil
}

// Revoked implements Revocations: one MGET per chunk of ids, every chunk in
// one pipeline.
func (r *RedisRevocations) Revoked(ctx context.Context, sessionIDs ...string) (map[string]bool, error) {
	if len(sessionIDs) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.SliceCmd, 0, (len(sessionIDs)+revokedMGetChunk-1)/revokedMGetChunk)
	keys := make([]string, len(sessionIDs))
	for i, id := range sessionIDs {
		keys[i] = revocationKey(id)
	}
	if len(keys) <= revokedMGetChunk {
		cmds = append(cmds, r.r.c.MGet(ctx, keys...))
	} else {
		_, _ = r.r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for lo := 0; lo < len(keys); lo += revokedMGetChunk {
				cmds = append(cmds, p.MGet(ctx, keys[lo:min(lo+revokedMGetChunk, len(keys))]...))
			}
			return nil
		})
	}
	var out map[string]bool
	for c, cmd := range cmds {
		vals, err := cmd.Result()
		if err != nil {
			return nil, fmt.Errorf("%w: read revocations: %w", ErrUnavailable, err)
		}
		for i, v := range vals {
			if v != nil {
				if out == nil {
					out = map[string]bool{}
				}
				out[sessionIDs[c*revokedMGetChunk+i]] = true
			}
		}
	}
	return out, nil
}

// GetRevoked reads key from kv and whether sessionID is revoked: a resume's
// pin read and its revocation check. When kv is a RedisKV and rev a
// RedisRevocations on the same client, the two reads share one pipeline
// (one round trip, where the pin read alone already was one); otherwise it
// is kv.Get, then rev.Revoked (free in memory).
//
// revoked is reported whether or not key exists. err is ErrUnavailable
// when either read failed (the caller fails closed), else kv's error
// (ErrNotFound when key is absent or expired).
func GetRevoked(ctx context.Context, kv KV, key string, rev Revocations, sessionID string) (value []byte, revoked bool, err error) {
	rk, okKV := kv.(*RedisKV)
	rr, okRev := rev.(*RedisRevocations)
	if okKV && okRev && rk.r == rr.r {
		return getRevokedPipelined(ctx, rk, key, rr, sessionID)
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

// getRevokedPipelined is GetRevoked in one pipeline: GET <pin key>, EXISTS
// {egbe-revoked}:<id>. (On a Cluster the two keys may sit on two nodes;
// go-redis sends both parts at once, so it is still one round trip of
// latency.)
func getRevokedPipelined(ctx context.Context, kv *RedisKV, key string, rev *RedisRevocations, sessionID string) ([]byte, bool, error) {
	var (
		get    *redis.StringCmd
		exists *redis.IntCmd
	)
	_, _ = kv.r.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, kv.prefix+key)
		exists = p.Exists(ctx, revocationKey(sessionID))
		return nil
	})
	n, err := exists.Result()
	if err != nil {
		return nil, false, fmt.Errorf("%w: read revocation: %w", ErrUnavailable, err)
	}
	v, err := get.Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, n > 0, ErrNotFound
	case err != nil:
		return nil, false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return v, n > 0, nil
}
