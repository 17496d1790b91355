package admission

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/oshun/egbe-edge/auth"
)

// Guard headers.
const (
	HeaderAdmission    = "X-Egbe-Admission"     // admission ticket from /api/v1/queue/status
	HeaderResume       = "X-Egbe-Resume"        // resume token (bypass lane)
	HeaderClientRegion = "X-Egbe-Client-Region" // region of a visitor without an access token
)

// SignupPath is the account-creation route: it takes a token of the signup
// bucket (400/min, burst 800) instead of queueing.
const SignupPath = "/api/v1/auth/signup"

// Guard puts the waiting room in front of next (the lead mounts it on
// /api/v1/auth/*, /api/v3/lilith/launch). A request passes when the room
// is not armed for its region, when it rides a bypass lane (valid resume
// token, operator/instructor/editorial role, paid pre-warm), or when it
// carries a valid admission ticket of the current epoch. Otherwise:
//
//	429 {"code":"admission_ticket_required","queue":"/api/v1/queue/join"}
//	403 {"code":"admission_denied"}                       forged, foreign or lapsed ticket
//	429 {"code":"rate_limited"}                           signup bucket empty
//	503 {"code":"waiting_room_state_lost","tier":"regional-waitlist",...}   fail closed
//	503 {"code":"state_unavailable"}                      shared state unreachable
func (r *Room) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		if req.URL.Path == SignupPath {
			ok, err := r.TakeSignup(ctx)
			switch {
			case err != nil:
				r.d.Metrics.refused("room", "state")
				writeErr(w, err)
			case !ok:
				r.d.Metrics.refused("room", "signup_rate_limited")
				w.Header().Set("Retry-After", "1")
				writeJSON(w, http.StatusTooManyRequests, map[string]any{"code": "rate_limited"})
			default:
				next.ServeHTTP(w, req)
			}
			return
		}
		var access *auth.Access
		if tok, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer "); ok && tok != "" {
			if a, err := r.d.Signer.VerifyAccess(tok); err == nil {
				access = &a
			}
		}
		pass, err := r.Check(ctx, access, req.Header.Get(HeaderClientRegion), req.Header.Get(HeaderAdmission), req.Header.Get(HeaderResume))
		switch {
		case errors.Is(err, ErrTicketRequired):
			w.Header().Set("Retry-After", "5")
			writeJSON(w, http.StatusTooManyRequests, map[string]any{"code": "admission_ticket_required", "queue": "/api/v1/queue/join", "fallbackUrl": FallbackURL})
			return
		case err != nil:
			writeErr(w, err)
			return
		}
		if err := pass.Spend(ctx); err != nil {
			if errors.Is(err, ErrBadRequest) {
				writeJSON(w, http.StatusForbidden, map[string]any{"code": "admission_denied", "queue": "/api/v1/queue/join"})
				return
			}
			writeErr(w, err)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// Pass is the room's verdict on one request that may go ahead: a bypass
// lane, an unarmed region, or an admission ticket still to be spent.
type Pass struct {
	Lane   string // the bypass lane taken, "" if none
	Armed  bool   // the room was armed for the region (a ticket is spent)
	Region string // the POP region the room judged

	r       *Room
	ticket  string
	subject string
}

// Check is the room's gate for any entrance — the guarded HTTP routes,
// the Pixel Streaming match — so each honours it the same way: a bypass
// lane (valid resume token, operator/instructor/editorial role, paid
// pre-warm) passes; an unarmed region passes; an armed one needs an
// admission ticket, which the caller spends with Pass.Spend once its own
// checks passed. region is used when access carries none. Errors:
// ErrTicketRequired, ErrRoomLost or ErrStateUnavailable (fail closed).
// Refusals are counted.
func (r *Room) Check(ctx context.Context, access *auth.Access, region, ticket, resume string) (Pass, error) {
	resumeValid := false
	if resume != "" {
		_, err := r.d.Signer.VerifyResume(resume)
		resumeValid = err == nil
	}
	subject := ""
	if access != nil {
		subject = access.Subject
		if access.Region != "" {
			region = access.Region
		}
	}
	p := Pass{Region: r.PopRegion(region), r: r, subject: subject}
	if lane := r.BypassLane(access, resumeValid); lane != "" {
		r.d.Metrics.bypassed(lane)
		p.Lane = lane
		return p, nil
	}
	armed, err := r.Armed(ctx, region)
	if err != nil {
		r.d.Metrics.refused("room", "state")
		return p, err
	}
	if !armed {
		return p, nil
	}
	if ticket == "" {
		r.d.Metrics.refused("room", "ticket_required")
		return p, ErrTicketRequired
	}
	p.Armed, p.ticket = true, ticket
	return p, nil
}

// Spend exercises the admission ticket when the room was armed
// (idempotent within its join window); otherwise it does nothing. A
// forged, foreign, lapsed or previous-epoch ticket is ErrBadRequest.
func (p Pass) Spend(ctx context.Context) error {
	if !p.Armed {
		return nil
	}
	if err := p.r.UseAdmission(ctx, p.ticket, p.subject); err != nil {
		if errors.Is(err, ErrBadRequest) {
			p.r.d.Metrics.refused("room", "admission_denied")
		} else {
			p.r.d.Metrics.refused("room", "state")
		}
		return err
	}
	return nil
}
