package admission

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/state"
)

// Handlers serves the admission HTTP API. Register mounts:
//
//	POST /api/v3/lilith/launch          launch decision (or regional waitlist)
//	POST /api/v3/lilith/waitlist        waitlist capture: validates, then 503 regional_waitlist_not_configured
//	GET  /api/v3/lilith/waitlist/{id}   always 404 (no records are kept)
//	POST /api/v1/queue/join             join the waiting room
//	POST /api/v1/queue/status           poll a queue ticket (silent refresh; admission ticket when admitted)
//	POST /api/v1/queue/leave            give up a place (an unused admission returns its tokens)
//	GET  /api/v1/queue/state            operator: room control state
//	POST /api/v1/queue/arm              operator: {"region":"", "armed":true}
//	POST /api/v1/queue/freeze           operator: {"frozen":true}
//	POST /api/v1/queue/halve            operator: {"halved":true}
//	POST /api/v1/queue/rearm            operator: new epoch after state loss, {"reason":"..."}
//
// The queue and operator routes are mounted only when Room is set.
type Handlers struct {
	Policy   *Policy
	Resolver *Resolver
	Room     *Room        // nil: no waiting room routes
	Signer   *auth.Signer // verifies access tokens (queue and operator routes)
	Surge    *Surge       // nil: the state route shows no surge controller
}

// Register mounts the routes on mux.
func (h *Handlers) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /api/v3/lilith/launch", h.launch)
	mux.HandleFunc("POST /api/v3/lilith/waitlist", h.waitlist)
	mux.HandleFunc("GET /api/v3/lilith/waitlist/{id}", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]any{"code": "not_found"})
	})
	if h.Room == nil {
		return
	}
	mux.HandleFunc("POST /api/v1/queue/join", h.join)
	mux.HandleFunc("POST /api/v1/queue/status", h.status)
	mux.HandleFunc("POST /api/v1/queue/leave", h.leave)
	mux.HandleFunc("GET /api/v1/queue/state", h.operator(h.state))
	mux.HandleFunc("POST /api/v1/queue/arm", h.operator(h.control("armed", state.OpArm, state.OpDisarm)))
	mux.HandleFunc("POST /api/v1/queue/freeze", h.operator(h.control("frozen", state.OpFreeze, state.OpUnfreeze)))
	mux.HandleFunc("POST /api/v1/queue/halve", h.operator(h.control("halved", state.OpHalve, state.OpRestore)))
	mux.HandleFunc("POST /api/v1/queue/rearm", h.operator(h.control("", state.OpRearm, state.OpRearm)))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeErr maps package errors to HTTP answers.
func writeErr(w http.ResponseWriter, err error) {
	var fe *FieldError
	switch {
	case errors.As(err, &fe):
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_request", "field": fe.Field, "message": fe.Message})
	case errors.Is(err, ErrBadRequest):
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_request", "message": err.Error()})
	case errors.Is(err, ErrRoomLost), errors.Is(err, ErrOverflow), errors.Is(err, ErrWaitlistMode):
		writeJSON(w, http.StatusServiceUnavailable, waitlistCapture(err))
	default:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"code": "state_unavailable"})
	}
}

// waitlistCapture is the fail-closed answer: no admission, go to the
// regional-waitlist capture.
func waitlistCapture(err error) map[string]any {
	code := "waiting_room_state_lost"
	switch {
	case errors.Is(err, ErrOverflow):
		code = "waiting_room_overflow"
	case errors.Is(err, ErrWaitlistMode):
		code = "waiting_room_waitlist"
	}
	return map[string]any{"code": code, "tier": WaitlistTier, "waitlist": "/api/v3/lilith/waitlist", "fallbackUrl": FallbackURL}
}

func (h *Handlers) launch(w http.ResponseWriter, r *http.Request) {
	req, err := DecodeLaunchRequest(r.Body, h.Policy.Launch.MaxPops)
	if err != nil {
		writeErr(w, err)
		return
	}
	// The live fleet's candidates depend on the entitlement, which only a
	// verified token carries: without one the caller is free.
	paid := false
	if a, err := h.access(r); err == nil && a != nil {
		paid = a.Entitlement == "paid"
	}
	out, err := h.Resolver.Resolve(r.Context(), req, paid)
	if err != nil {
		writeErr(w, err)
		return
	}
	if out.Waitlist != nil {
		writeJSON(w, http.StatusOK, out.Waitlist)
		return
	}
	writeJSON(w, http.StatusOK, out.Decision)
}

// decodeStrict decodes a small JSON body, rejecting unknown fields.
func decodeStrict(r io.Reader, v any) error {
	dec := json.NewDecoder(io.LimitReader(r, 8<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonFieldError(err)
	}
	return nil
}

type waitlistRequest struct {
	Email        string `json:"email"`
	ClientRegion string `json:"clientRegion"`
	TenantID     string `json:"tenantId"`
	Consent      *bool  `json:"consent"`
}

func (h *Handlers) waitlist(w http.ResponseWriter, r *http.Request) {
	var req waitlistRequest
	if err := decodeStrict(r.Body, &req); err != nil {
		writeErr(w, err)
		return
	}
	at := strings.IndexByte(req.Email, '@')
	switch {
	case len(req.Email) > 254 || at < 1 || at == len(req.Email)-1 || strings.ContainsAny(req.Email, " \t\r\n"):
		writeErr(w, &FieldError{Field: "email", Message: "not an e-mail address"})
		return
	case req.ClientRegion == "" || len(req.ClientRegion) > 32:
		writeErr(w, &FieldError{Field: "clientRegion", Message: "required"})
		return
	case req.Consent == nil:
		writeErr(w, &FieldError{Field: "consent", Message: "required"})
		return
	}
	if _, ok := h.Policy.Regions.Tenants[req.TenantID]; !ok {
		writeErr(w, &FieldError{Field: "tenantId", Message: "unknown tenant"})
		return
	}
	// No consent, delivery, DSAR or lead store is configured: nothing is
	// kept, and the answer says so.
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"code": "regional_waitlist_not_configured", "emailStored": false})
}

// access verifies an optional bearer access token.
func (h *Handlers) access(r *http.Request) (*auth.Access, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" || h.Signer == nil {
		return nil, nil
	}
	a, err := h.Signer.VerifyAccess(tok)
	if err != nil {
		return nil, err
	}
	return &a, nil
}

type joinRequest struct {
	ClientRegion string `json:"clientRegion"`
	Lane         string `json:"lane"`
}

func (h *Handlers) join(w http.ResponseWriter, r *http.Request) {
	var req joinRequest
	if err := decodeStrict(r.Body, &req); err != nil {
		writeErr(w, err)
		return
	}
	a, err := h.access(r)
	if err != nil {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"code": "token_invalid"})
		return
	}
	subject, region := "", req.ClientRegion
	if a != nil {
		subject = a.Subject
		if region == "" {
			region = a.Region
		}
	}
	if region == "" {
		writeErr(w, &FieldError{Field: "clientRegion", Message: "required"})
		return
	}
	if req.Lane == "" {
		req.Lane = string(state.LaneWeb)
	}
	if lane := h.Room.BypassLane(a, false); lane != "" {
		h.Room.d.Metrics.bypassed(lane)
		writeJSON(w, http.StatusOK, QueueStatus{Status: "bypass", Region: h.Room.PopRegion(region), FallbackURL: FallbackURL})
		return
	}
	st, err := h.Room.Join(r.Context(), subject, region, state.Lane(req.Lane))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

type ticketRequest struct {
	Ticket string `json:"ticket"`
}

func (h *Handlers) ticket(w http.ResponseWriter, r *http.Request) (string, bool) {
	var req ticketRequest
	if err := decodeStrict(r.Body, &req); err != nil {
		writeErr(w, err)
		return "", false
	}
	if req.Ticket == "" {
		writeErr(w, &FieldError{Field: "ticket", Message: "required"})
		return "", false
	}
	return req.Ticket, true
}

func (h *Handlers) status(w http.ResponseWriter, r *http.Request) {
	tok, ok := h.ticket(w, r)
	if !ok {
		return
	}
	st, err := h.Room.Status(r.Context(), tok)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Handlers) leave(w http.ResponseWriter, r *http.Request) {
	tok, ok := h.ticket(w, r)
	if !ok {
		return
	}
	if _, err := h.Room.Leave(r.Context(), tok); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// operator wraps a route that needs an access token with the operator role.
func (h *Handlers) operator(next func(http.ResponseWriter, *http.Request, *auth.Access)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, err := h.access(r)
		if err != nil || a == nil {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"code": "token_invalid"})
			return
		}
		if !a.HasRole("operator") {
			writeJSON(w, http.StatusForbidden, map[string]any{"code": "operator_role_required"})
			return
		}
		next(w, r, a)
	}
}

func (h *Handlers) state(w http.ResponseWriter, r *http.Request, _ *auth.Access) {
	m, err := h.Room.d.Queue.Meta(r.Context())
	if err != nil {
		writeErr(w, mapStateErr(err))
		return
	}
	out := metaJSON(m)
	if h.Surge != nil {
		st, err := h.Surge.State(r.Context())
		if err != nil {
			writeErr(w, err)
			return
		}
		out["surge"] = map[string]any{"at": st.At, "leader": st.Leader, "applied": st.Applied, "since": st.Since,
			"ceilingPerMinute": st.Ceiling, "paged": st.Paged}
	}
	writeJSON(w, http.StatusOK, out)
}

func metaJSON(m state.Meta) map[string]any {
	regions := make([]string, 0, len(m.ArmedRegions))
	for reg := range m.ArmedRegions {
		regions = append(regions, reg)
	}
	return map[string]any{"epoch": m.Epoch, "armedGlobal": m.ArmedGlobal, "armedRegions": regions, "frozen": m.Frozen, "halved": m.Halved, "waitlist": m.Waitlist}
}

type controlRequest struct {
	Region string `json:"region"`
	Armed  *bool  `json:"armed,omitempty"`
	Frozen *bool  `json:"frozen,omitempty"`
	Halved *bool  `json:"halved,omitempty"`
	Reason string `json:"reason"`
}

func (h *Handlers) control(field string, on, off state.Op) func(http.ResponseWriter, *http.Request, *auth.Access) {
	return func(w http.ResponseWriter, r *http.Request, a *auth.Access) {
		var req controlRequest
		if err := decodeStrict(r.Body, &req); err != nil {
			writeErr(w, err)
			return
		}
		op := on
		if field != "" {
			v := map[string]*bool{"armed": req.Armed, "frozen": req.Frozen, "halved": req.Halved}[field]
			if v == nil {
				writeErr(w, &FieldError{Field: field, Message: "required"})
				return
			}
			if !*v {
				op = off
			}
		}
		region := ""
		if req.Region != "" {
			region = h.Room.PopRegion(req.Region)
		}
		m, err := h.Room.Control(r.Context(), op, region, a.Subject, req.Reason)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, metaJSON(m))
	}
}
