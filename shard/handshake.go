package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
)

// Serve runs one client's session, handshake first, until it ends. It
// returns once every goroutine of the session has ended; the connection is
// closed by then.
func (g *Gateway) Serve(ctx context.Context, c ClientConn) {
	// The handshake (token checks, admission, state, the shard's answer)
	// needs a deep stack for a moment; it runs on a goroutine of its own,
	// waited for here, so that the session's reader (this goroutine, for
	// as long as the session lives) keeps the small stack its read loop
	// needs instead of the handshake's high-water mark.
	start := time.Now()
	var s *session
	done := make(chan struct{})
	go func() {
		defer close(done)
		var err error
		if s, err = g.handshake(ctx, c); err != nil {
			g.m.handshakeDur.WithLabelValues("rejected").Observe(time.Since(start).Seconds())
			g.refuse(ctx, c, err)
			return
		}
		g.m.handshakeDur.WithLabelValues("accepted").Observe(time.Since(start).Seconds())
	}()
	<-done
	if s != nil {
		s.run(ctx)
	}
}

// refuse sends a typed Error and closes the connection with its code.
func (g *Gateway) refuse(ctx context.Context, c ClientConn, err error) {
	code := codec.CodeOf(err)
	outcome := "rejected"
	if errors.Is(err, errClientGone) {
		outcome, code = "client_gone", ""
	}
	g.m.handshakes.WithLabelValues(outcome, string(code)).Inc()
	if code == "" {
		_ = c.Close(1000, "")
		return
	}
	g.log.Debug("handshake refused", "code", code, "err", err, "remote", c.RemoteAddr())
	if b, e := codec.EncodeServer(nil, &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Error{Error: codec.ToProto(err)}}, c.JSON()); e == nil {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		if c.WriteReliable(wctx, b) == nil {
			_ = c.Flush(wctx)
		}
		cancel()
	}
	_ = c.Close(code.CloseCode(), string(code))
}

var errClientGone = errors.New("shard: client went away during the handshake")

// readHello waits for the first message, which must be a hello.
func (g *Gateway) readHello(ctx context.Context, c ClientConn) (*codec.ClientHello, error) {
	hctx, cancel := context.WithTimeout(ctx, g.cfg.HandshakeTimeout)
	defer cancel()
	data, _, err := c.Read(hctx)
	if err != nil {
		if hctx.Err() != nil && ctx.Err() == nil {
			return nil, codec.Errorf(codec.CodeHandshakeTimeout, "no hello within %s", g.cfg.HandshakeTimeout)
		}
		if isTooLarge(err) {
			return nil, codec.Errorf(codec.CodeFrameTooLarge, "first message too large")
		}
		return nil, fmt.Errorf("%w: %w", errClientGone, err)
	}
	var env codec.ClientEnvelope
	if err := codec.DecodeClient(data, c.JSON(), &env); err != nil {
		if codec.CodeOf(err) == codec.CodeFrameTooLarge {
			return nil, &codec.WireError{Code: codec.CodeFrameTooLarge, Message: "first message too large", Err: err}
		}
		return nil, &codec.WireError{Code: codec.CodeBadMessage, Message: "first message does not decode", Err: err}
	}
	h := env.GetHello()
	if h == nil {
		return nil, codec.Errorf(codec.CodeHelloRequired, "the first message must be hello")
	}
	return h, nil
}

// isTooLarge recognises an oversized-message read error: the edge's
// transport adapter wraps codec.ErrFrameTooLarge (this package does not
// import transport).
func isTooLarge(err error) bool { return errors.Is(err, codec.ErrFrameTooLarge) }

func tokenError(err error, what string) *codec.WireError {
	switch {
	case errors.Is(err, auth.ErrExpired):
		return &codec.WireError{Code: codec.CodeTokenExpired, Message: what + " expired", Err: err}
	case errors.Is(err, auth.ErrWrongAudience):
		return &codec.WireError{Code: codec.CodeTokenAudience, Message: what + " is for another audience", Err: err}
	default:
		return &codec.WireError{Code: codec.CodeTokenInvalid, Message: what + " is invalid", Err: err}
	}
}

// handshake takes a connection from its first byte to a running session.
func (g *Gateway) handshake(ctx context.Context, c ClientConn) (*session, error) {
	h, err := g.readHello(ctx, c)
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, g.cfg.HandshakeTimeout)
	defer cancel()
	acc, err := g.d.Signer.VerifyAccess(h.AccessToken)
	if err != nil {
		return nil, tokenError(err, "access token")
	}
	neg := codec.Negotiate(h)
	if neg.Acceptance == codec.Acceptance_REJECTED {
		code := neg.Code
		if code == "" {
			code = codec.CodeUnsupportedVersion
		}
		return nil, codec.Errorf(code, "protocol version %d not supported (want %d)", h.ProtocolVersion, codec.ProtocolVersion)
	}
	if g.draining.Load() {
		return nil, &codec.WireError{Code: codec.CodeDraining, Message: "this edge is draining; reconnect elsewhere", Err: ErrDraining}
	}

	// Resume: the token, then the pin.
	var pin Pin
	resume := h.ResumeToken != ""
	if resume {
		pin, err = g.checkResume(hctx, h, acc)
		if err != nil {
			g.m.resumes.WithLabelValues(string(codec.CodeOf(err))).Inc()
			return nil, err
		}
	}

	var release func()
	if g.d.Admit != nil {
		release, err = g.d.Admit.Admit(hctx, AdmitRequest{Access: acc, Hello: h, RemoteAddr: c.RemoteAddr(), Resume: resume})
		if err != nil {
			var we *codec.WireError
			if !errors.As(err, &we) {
				err = &codec.WireError{Code: codec.CodeAdmissionDenied, Message: "admission refused", Err: err}
			}
			return nil, err
		}
	}
	ok := false
	defer func() {
		if !ok && release != nil {
			release()
		}
	}()

	// Shard: the pin first, then the directory.
	shardID, instance := pin.ShardID, pin.InstanceID
	if !resume {
		instance = h.InstanceId
		r, err := g.dir.RouteFor(instance)
		if err != nil {
			return nil, &codec.WireError{Code: codec.CodeInstanceNotFound, Message: fmt.Sprintf("no shard holds instance %q", instance), Err: err}
		}
		shardID = r.ShardID
	}
	l := g.link(shardID)
	if l == nil {
		return nil, codec.Errorf(codec.CodeShardUnavailable, "shard %q is not linked", shardID)
	}

	s := newSession(ctx, g, c, l, h, acc, neg)
	s.instance, s.shardID, s.release = instance, shardID, release
	if resume {
		s.id, s.entity, s.resumed = pin.SessionID, pin.EntityID, true
		if old := g.lookup(s.id); old != nil {
			// The client came back before its old connection was noticed
			// gone: the new connection takes over.
			old.stop(stopCause{code: codec.CodeResumeInvalid, msg: "session resumed on another connection", noFinal: true})
			select {
			case <-old.ended:
			case <-hctx.Done():
				s.abort()
				return nil, codec.Errorf(codec.CodeInternal, "previous connection did not end")
			}
		}
	} else {
		s.id = newSessionID()
	}

	opened, err := l.openSession(hctx, s, &codec.LinkSessionOpen{
		InstanceId: s.instance, Subject: acc.Subject, Resume: resume,
		EntityId: s.entity, AuthorityKind: h.AuthorityKind,
	})
	if err != nil {
		s.abort()
		var we *codec.WireError
		if errors.As(err, &we) {
			return nil, err
		}
		return nil, &codec.WireError{Code: codec.CodeShardUnavailable, Message: fmt.Sprintf("shard %q unavailable", shardID), Err: err}
	}
	s.entity = opened.GetEntityId()
	if err := g.pins.Put(hctx, s.pin()); err != nil {
		s.abort()
		return nil, &codec.WireError{Code: codec.CodeStateUnavailable, Message: "session pin could not be stored", Err: err}
	}
	s.win = codec.WindowFor(nil, s.entity, s.profile)

	hello := &codec.ServerHello{
		SessionId: s.id, ResumeToken: g.resumeToken(s, g.cfg.SessionTokenTTL), ShardId: shardID,
		Acceptance: neg.Acceptance, DroppedFeatures: neg.Dropped, PresenceHz: uint32(g.cfg.PresenceHz),
		EntityId: s.entity, Transport: c.Transport(), Resumed: resume, ProtocolVersion: codec.ProtocolVersion,
	}
	if g.d.FallbackChain != nil {
		hello.FallbackChain = g.d.FallbackChain()
	}
	// run registers the session, then sends this first: the session exists
	// (Session(id) finds it) before the client learns its id.
	// Encoded here, on the handshake's goroutine: the writer never needs
	// the generated code's deep stack for it.
	if s.hello, err = codec.EncodeServer(nil, &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Hello{Hello: hello}}, s.json); err != nil {
		s.abort()
		return nil, &codec.WireError{Code: codec.CodeInternal, Message: "server hello does not encode", Err: err}
	}
	ok = true
	if resume {
		g.m.resumes.WithLabelValues("ok").Inc()
	}
	outcome := "accepted"
	if neg.Acceptance == codec.Acceptance_DEGRADED {
		outcome = "degraded"
	}
	g.m.handshakes.WithLabelValues(outcome, "").Inc()
	return s, nil
}

// checkResume verifies a resume token and finds its pin (refusing a
// revoked session).
func (g *Gateway) checkResume(ctx context.Context, h *codec.ClientHello, acc auth.Access) (Pin, error) {
	rt, err := g.d.Signer.VerifyResume(h.ResumeToken)
	if err != nil {
		code := codec.CodeResumeInvalid
		if errors.Is(err, auth.ErrExpired) {
			code = codec.CodeResumeExpired
		}
		return Pin{}, &codec.WireError{Code: code, Message: "resume token refused", Err: err}
	}
	if rt.Subject != acc.Subject {
		return Pin{}, codec.Errorf(codec.CodeResumeInvalid, "resume token belongs to another user")
	}
	if h.InstanceId != "" && h.InstanceId != rt.InstanceID {
		return Pin{}, codec.Errorf(codec.CodeResumeInvalid, "resume token is for another instance")
	}
	pin, revoked, err := g.pinAndRevoked(ctx, rt.SessionID) // one round trip (revocation.go)
	if revoked {
		return Pin{}, codec.Errorf(codec.CodeResumeRevoked, "this session was revoked by an operator")
	}
	if err != nil {
		if errors.Is(err, ErrPinNotFound) {
			return Pin{}, &codec.WireError{Code: codec.CodeResumeExpired, Message: "session is past its reconnect window", Err: err}
		}
		return Pin{}, &codec.WireError{Code: codec.CodeStateUnavailable, Message: "session pins unavailable", Err: err}
	}
	if pin.ShardID != rt.ShardID || pin.Subject != acc.Subject {
		return Pin{}, codec.Errorf(codec.CodeResumeInvalid, "resume token does not match the session")
	}
	return pin, nil
}
