package shard

import (
	"context"
	"errors"
	"time"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/state"
)

// Revocation. An operator revokes a session (Gateway.Revoke); the
// revocation lives in Deps.Revocations (memory, or Redis shared by the
// fleet) for as long as any resume token of the session can be valid. It
// is enforced at the two places a session can continue:
//
//   - a resume: checkResume reads the pin and the revocation together
//     (pinAndRevoked). With StatePins over Redis and Redis revocations on
//     the same client that is one pipeline, so the resume path keeps its
//     three round trips (pin+revocation read, admission lease script, pin
//     write). A revoked session is refused with resume_token_revoked.
//   - a live session: the edge that holds it ends it with the same code,
//     at once when the revocation is made on that edge, otherwise at its
//     next pin refresh (refreshPins, every PinTTL/3): one batched read of
//     every live session's revocation per refresh, nothing per handshake.

// revokedCause ends a live session whose revocation was found.
var revokedCause = stopCause{code: codec.CodeResumeRevoked, msg: "this session was revoked by an operator"}

// revocationCheckTimeout bounds the refresh loop's batched read.
const revocationCheckTimeout = 5 * time.Second

// RevocationTTL is how long a revocation lasts: the longest lifetime of a
// resume token the gateway issues (ServerHello's SessionTokenTTL, Drain's
// and link loss's ResumeTTL). A session that is revoked cannot resume, so
// it is never issued another token.
func (g *Gateway) RevocationTTL() time.Duration {
	return max(g.cfg.SessionTokenTTL, g.cfg.ResumeTTL)
}

// Revoke revokes sessionID on every edge sharing the gateway's revocation
// store, until now + RevocationTTL, and ends the session at once if it is
// live on this gateway (closedHere). An error (state.ErrUnavailable,
// state.ErrBadArgument) means nothing was revoked and nothing closed.
func (g *Gateway) Revoke(ctx context.Context, sessionID string) (until time.Time, closedHere bool, err error) {
	until = g.now().Add(g.RevocationTTL())
	if err := g.d.Revocations.Revoke(ctx, sessionID, until); err != nil {
		return time.Time{}, false, err
	}
	if s := g.lookup(sessionID); s != nil {
		s.stop(revokedCause)
		closedHere = true
	}
	g.log.Info("session revoked", "session", sessionID, "until", until, "closed_here", closedHere)
	return until, closedHere, nil
}

// pinAndRevoked reads a session's pin and whether it is revoked. revoked is
// reported whether or not the pin exists; err is the pin's
// (ErrPinNotFound) or the store's.
func (g *Gateway) pinAndRevoked(ctx context.Context, sessionID string) (pin Pin, revoked bool, err error) {
	if sp, ok := g.pins.(*StatePins); ok {
		// The pin read and the revocation read share one round trip
		// (state.GetRevoked; StatePins keys pins by session id).
		b, revoked, err := state.GetRevoked(ctx, sp.kv, sessionID, g.d.Revocations, sessionID)
		pin, err = decodePin(sessionID, b, err, g.now())
		return pin, revoked, err
	}
	pin, err = g.pins.Get(ctx, sessionID, g.now())
	if err != nil && !errors.Is(err, ErrPinNotFound) {
		return Pin{}, false, err
	}
	set, rerr := g.d.Revocations.Revoked(ctx, sessionID)
	if rerr != nil {
		return Pin{}, false, rerr
	}
	return pin, set[sessionID], err
}

// closeRevoked ends the sessions of live that are revoked and returns the
// others. One batched read per call; when the store cannot answer, every
// session goes on (live sessions fail open: a Redis outage must not end
// them all) and the next refresh tries again.
func (g *Gateway) closeRevoked(ctx context.Context, live []*session) []*session {
	if len(live) == 0 {
		return live
	}
	ids := make([]string, len(live))
	for i, s := range live {
		ids[i] = s.id
	}
	rctx, cancel := context.WithTimeout(ctx, revocationCheckTimeout)
	revoked, err := g.d.Revocations.Revoked(rctx, ids...)
	cancel()
	if err != nil {
		g.log.Warn("revocation check failed", "sessions", len(ids), "err", err)
		return live
	}
	if len(revoked) == 0 {
		return live
	}
	kept := live[:0]
	for _, s := range live {
		if revoked[s.id] {
			g.endRevoked(s, "periodic check")
			continue
		}
		kept = append(kept, s)
	}
	return kept
}

// watchRevocations ends a live session the moment any edge revokes it
// (the refresh loop's batched check remains the backstop). A broken
// subscription is retried after a pause.
func (g *Gateway) watchRevocations(ctx context.Context, n state.RevocationNotices) {
	for {
		err := n.Watch(ctx, func(sessionID string) {
			if s := g.lookup(sessionID); s != nil {
				g.endRevoked(s, "notice")
			}
		})
		if ctx.Err() != nil {
			return
		}
		g.log.Warn("revocation notices interrupted; the periodic check covers the gap", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// endRevoked ends a live session found revoked (by: how it was found).
func (g *Gateway) endRevoked(s *session, by string) {
	s.stop(revokedCause)
	g.log.Info("revoked session closed", "session", s.id, "shard", s.shardID, "by", by)
}
