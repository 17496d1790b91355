package redisstate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/state"
)

// Revocations is the fleet's Revocations: one string per revoked
// session,
//
//	{egbe-revoked}:<session id>   string  deadline (Unix ms), PX expiry at the deadline
//
// Every key carries the {egbe-revoked} hash tag, so the multi-key read of
// an edge's live sessions is one MGET in one Cluster slot.
type Revocations struct {
	r   *Conn            // immutable
	now func() time.Time // immutable
}

// NewRevocations returns the store on r; now (nil: time.Now) is the
// clock deadlines are measured against: key TTLs are relative to the
// caller's clock, never Redis's.
func NewRevocations(r *Conn, now func() time.Time) *Revocations {
	if now == nil {
		now = time.Now
	}
	return &Revocations{r: r, now: now}
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
func (r *Revocations) Revoke(ctx context.Context, sessionID string, until time.Time) error {
	now := r.now()
	if err := state.CheckRevoke(sessionID, until, now); err != nil {
		return err
	}
	ttl := until.Sub(now).Milliseconds()
	if ttl <= 0 {
		ttl = 1
	}
	err := r.r.run(ctx, luaRevoke, []string{revocationKey(sessionID)}, until.UnixMilli(), ttl).Err()
	if err != nil {
		return fmt.Errorf("%w: revoke %s: %w", state.ErrUnavailable, sessionID, err)
	}
	// The revocation holds once stored; the notice only makes the holding
	// edge act before its next periodic check.
	_ = publishRevocation(ctx, r.r.c, sessionID)
	return nil
}

// Revoked implements Revocations: one MGET per chunk of ids, every chunk in
// one pipeline.
func (r *Revocations) Revoked(ctx context.Context, sessionIDs ...string) (map[string]bool, error) {
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
			return nil, fmt.Errorf("%w: read revocations: %w", state.ErrUnavailable, err)
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

var _ state.RevokedGetter = (*KV)(nil)

// GetRevoked implements state.RevokedGetter: when rev is a Revocations on
// the same connection, state.GetRevoked's two reads are one pipeline: GET
// <pin key>, EXISTS {egbe-revoked}:<id>. (On a Cluster the two keys may
// sit on two nodes; go-redis sends both parts at once, so it is still one
// round trip of latency.)
func (kv *KV) GetRevoked(ctx context.Context, key string, rev state.Revocations, sessionID string) ([]byte, bool, error, bool) {
	rr, ok := rev.(*Revocations)
	if !ok || rr.r != kv.r {
		return nil, false, nil, false
	}
	v, revoked, err := kv.getRevoked(ctx, key, sessionID)
	return v, revoked, err, true
}

func (kv *KV) getRevoked(ctx context.Context, key, sessionID string) ([]byte, bool, error) {
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
		return nil, false, fmt.Errorf("%w: read revocation: %w", state.ErrUnavailable, err)
	}
	v, err := get.Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, n > 0, state.ErrNotFound
	case err != nil:
		return nil, false, fmt.Errorf("%w: %w", state.ErrUnavailable, err)
	}
	return v, n > 0, nil
}

// Watch implements RevocationNotices: a Redis subscription, resubscribed
// by go-redis after a reconnect. It returns when ctx is done.
func (r *Revocations) Watch(ctx context.Context, fn func(string)) error {
	sub := r.r.c.Subscribe(ctx, revocationChannel)
	defer sub.Close()
	ch := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg, ok := <-ch:
			if !ok {
				return fmt.Errorf("%w: revocation notices ended", state.ErrUnavailable)
			}
			if id := msg.Payload; id != "" && len(id) <= state.MaxNoticeID {
				fn(id)
			}
		}
	}
}

// publishRevocation tells every watching edge; a lost notice is caught by
// the periodic check.
func publishRevocation(ctx context.Context, rdb redis.UniversalClient, sessionID string) error {
	if err := rdb.Publish(ctx, revocationChannel, sessionID).Err(); err != nil {
		return fmt.Errorf("%w: revocation notice: %w", state.ErrUnavailable, err)
	}
	return nil
}
