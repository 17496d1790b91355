package admission

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/state"
)

// HandshakeRequest is what the realtime gateway knows after verifying the
// ClientHello's access token (and resume token, if any).
type HandshakeRequest struct {
	SessionID           string      // lease holder: the (new or resumed) session id
	Access              auth.Access // verified access claims
	ClientIP            netip.Addr
	ResumeValid         bool   // a valid resume token was presented (bypass lane)
	AdmissionTicket     string // ClientHello.admission_ticket, "" if none
	InstitutionApproved bool   // institutional network cap
}

// HandshakeAdmitter admits new realtime sessions at the ClientHello.
type HandshakeAdmitter struct {
	p       *RealtimePolicy
	v4, v6  int
	leases  state.Leases
	room    *Room // nil: no waiting room
	now     func() time.Time
	metrics *Metrics
}

// NewHandshakeAdmitter returns a HandshakeAdmitter. room may be nil.
func NewHandshakeAdmitter(p *Policy, leases state.Leases, room *Room, now func() time.Time, m *Metrics) *HandshakeAdmitter {
	if now == nil {
		now = time.Now
	}
	return &HandshakeAdmitter{p: &p.Realtime, v4: p.Pxstream.IPv4PrefixBits, v6: p.Pxstream.IPv6PrefixBits,
		leases: leases, room: room, now: now, metrics: m}
}

func (h *HandshakeAdmitter) keys(req HandshakeRequest) []state.LeaseLimit {
	netCap := h.p.NetworkSessionCap
	if req.InstitutionApproved {
		netCap = h.p.InstitutionNetworkCap
	}
	return []state.LeaseLimit{
		{Key: "rt:user:" + req.Access.Subject, Limit: h.p.UserSessionCap},
		{Key: "rt:net:" + NetworkKey(req.ClientIP, h.v4, h.v6), Limit: netCap},
	}
}

func (h *HandshakeAdmitter) refuse(code codec.Code, format string, args ...any) error {
	h.metrics.refused("realtime", string(code))
	return codec.Errorf(code, format, args...)
}

// Admit runs handshake admission: per-user and per-network session caps
// (leases held until release), then, when the waiting room is armed for
// the subject's region, a valid admission ticket unless a bypass lane
// applies (valid resume, operator/instructor/editorial role, paid
// pre-warm). Refusals are *codec.WireError: CodeUserCap, CodeNetworkCap,
// CodeTicketRequired, CodeAdmissionDenied (forged, foreign or lapsed
// ticket), CodeStateUnavailable (shared state unreachable or lost: fail
// closed). release is idempotent; the gateway calls Refresh while the
// session lives.
func (h *HandshakeAdmitter) Admit(ctx context.Context, req HandshakeRequest) (release func(), err error) {
	if req.SessionID == "" || req.Access.Subject == "" || !req.ClientIP.IsValid() {
		return nil, h.refuse(codec.CodeAdmissionDenied, "session, subject and client address required")
	}
	var lane string
	spend := false // an admission ticket must be spent after the caps
	if h.room != nil {
		lane = h.room.BypassLane(&req.Access, req.ResumeValid)
		if lane == "" {
			armed, err := h.room.Armed(ctx, req.Access.Region)
			switch {
			case err != nil:
				return nil, h.refuse(codec.CodeStateUnavailable, "waiting room unavailable: fail closed")
			case armed && req.AdmissionTicket == "":
				return nil, h.refuse(codec.CodeTicketRequired, "waiting room armed: join /api/v1/queue/join")
			}
			spend = armed
		}
	}
	limits := h.keys(req)
	blocked, err := h.leases.Acquire(ctx, req.SessionID, limits, ms(h.p.LeaseTTLMs), h.now())
	if err != nil {
		return nil, h.refuse(codec.CodeStateUnavailable, "session leases unavailable")
	}
	switch blocked {
	case 0:
		return nil, h.refuse(codec.CodeUserCap, "at most %d sessions per user", limits[0].Limit)
	case 1:
		return nil, h.refuse(codec.CodeNetworkCap, "at most %d sessions per network", limits[1].Limit)
	}
	keys := []string{limits[0].Key, limits[1].Key}
	var once sync.Once
	// release holds no reference to the handshake's context: it lives as
	// long as the session.
	release = func() {
		once.Do(func() {
			rctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
			_ = h.leases.Release(rctx, req.SessionID, keys)
			cancel()
		})
	}
	if spend {
		if err := h.room.UseAdmission(ctx, req.AdmissionTicket, req.Access.Subject); err != nil {
			release()
			if errors.Is(err, ErrBadRequest) {
				return nil, h.refuse(codec.CodeAdmissionDenied, "admission ticket refused: %s", errText(err))
			}
			return nil, h.refuse(codec.CodeStateUnavailable, "waiting room unavailable: fail closed")
		}
	}
	if lane != "" {
		h.metrics.bypassed(lane)
	}
	return release, nil
}

func errText(err error) string {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Message
	}
	return fmt.Sprint(errors.Unwrap(err))
}

// Refresh keeps a live session's leases from lapsing.
func (h *HandshakeAdmitter) Refresh(ctx context.Context, req HandshakeRequest) error {
	l := h.keys(req)
	return h.leases.Refresh(ctx, req.SessionID, []string{l[0].Key, l[1].Key}, ms(h.p.LeaseTTLMs), h.now())
}
