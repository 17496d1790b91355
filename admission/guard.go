package admission

import (
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
		resume := false
		if tok := req.Header.Get(HeaderResume); tok != "" {
			_, err := r.d.Signer.VerifyResume(tok)
			resume = err == nil
		}
		if lane := r.BypassLane(access, resume); lane != "" {
			r.d.Metrics.bypassed(lane)
			next.ServeHTTP(w, req)
			return
		}
		region, subject := req.Header.Get(HeaderClientRegion), ""
		if access != nil {
			subject = access.Subject
			if access.Region != "" {
				region = access.Region
			}
		}
		armed, err := r.Armed(ctx, region)
		if err != nil {
			r.d.Metrics.refused("room", "state")
			writeErr(w, err)
			return
		}
		if !armed {
			next.ServeHTTP(w, req)
			return
		}
		tok := req.Header.Get(HeaderAdmission)
		if tok == "" {
			r.d.Metrics.refused("room", "ticket_required")
			w.Header().Set("Retry-After", "5")
			writeJSON(w, http.StatusTooManyRequests, map[string]any{"code": "admission_ticket_required", "queue": "/api/v1/queue/join", "fallbackUrl": FallbackURL})
			return
		}
		if err := r.UseAdmission(ctx, tok, subject); err != nil {
			if errors.Is(err, ErrBadRequest) {
				r.d.Metrics.refused("room", "admission_denied")
				writeJSON(w, http.StatusForbidden, map[string]any{"code": "admission_denied", "queue": "/api/v1/queue/join"})
				return
			}
			r.d.Metrics.refused("room", "state")
			writeErr(w, err)
			return
		}
		next.ServeHTTP(w, req)
	})
}
