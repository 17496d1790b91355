package admission

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/httpjson"
	"github.com/oshun/egbe-edge/internal/opguard"
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
		httpjson.Write(w, http.StatusNotFound, map[string]any{"code": "not_found"})
	})
	if h.Room == nil {
		return
	}
	mux.HandleFunc("POST /api/v1/queue/join", h.join)
	mux.HandleFunc("POST /api/v1/queue/status", h.status)
	mux.HandleFunc("POST /api/v1/queue/leave", h.leave)
	h.RegisterOperator(mux)
}

// RegisterOperator mounts only the operator routes (the edge mounts them on
// its admin listener too, for the operator page).
func (h *Handlers) RegisterOperator(mux *http.ServeMux) {
	if h.Room == nil {
		return
	}
	mux.HandleFunc("GET /api/v1/queue/state", h.operator(h.state))
	mux.HandleFunc("POST /api/v1/queue/arm", h.operator(h.control("armed", state.OpArm, state.OpDisarm)))
	mux.HandleFunc("POST /api/v1/queue/freeze", h.operator(h.control("frozen", state.OpFreeze, state.OpUnfreeze)))
	mux.HandleFunc("POST /api/v1/queue/halve", h.operator(h.control("halved", state.OpHalve, state.OpRestore)))
	mux.HandleFunc("POST /api/v1/queue/rearm", h.operator(h.control("", state.OpRearm, state.OpRearm)))
}

// writeErr is writeFallbackErr with the room's fallback URL.
func (h *Handlers) writeErr(w http.ResponseWriter, err error) {
	fallback := FallbackURL
	if h.Room != nil {
		fallback = h.Room.fallback()
	}
	writeFallbackErr(w, err, fallback)
}

// writeFallbackErr maps package errors to HTTP answers; the fail-closed
// ones send the client to fallback.
func writeFallbackErr(w http.ResponseWriter, err error, fallback string) {
	var fe *FieldError
	switch {
	case errors.As(err, &fe):
		httpjson.Write(w, http.StatusBadRequest, map[string]any{"error": "invalid_request", "field": fe.Field, "message": fe.Message})
	case errors.Is(err, ErrBadRequest):
		httpjson.Write(w, http.StatusBadRequest, map[string]any{"error": "invalid_request", "message": err.Error()})
	case errors.Is(err, ErrRoomLost), errors.Is(err, ErrOverflow), errors.Is(err, ErrWaitlistMode):
		httpjson.Write(w, http.StatusServiceUnavailable, waitlistCapture(err, fallback))
	default:
		httpjson.Write(w, http.StatusServiceUnavailable, map[string]any{"code": "state_unavailable"})
	}
}

// waitlistCapture is the fail-closed answer: no admission, go to the
// regional-waitlist capture.
func waitlistCapture(err error, fallback string) map[string]any {
	code := "waiting_room_state_lost"
	switch {
	case errors.Is(err, ErrOverflow):
		code = "waiting_room_overflow"
	case errors.Is(err, ErrWaitlistMode):
		code = "waiting_room_waitlist"
	}
	return map[string]any{"code": code, "tier": WaitlistTier, "waitlist": "/api/v3/lilith/waitlist", "fallbackUrl": fallback}
}

func (h *Handlers) launch(w http.ResponseWriter, r *http.Request) {
	req, err := DecodeLaunchRequest(r.Body, h.Policy.Launch.MaxPops)
	if err != nil {
		h.writeErr(w, err)
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
		h.writeErr(w, err)
		return
	}
	if out.Waitlist != nil {
		httpjson.Write(w, http.StatusOK, out.Waitlist)
		return
	}
	httpjson.Write(w, http.StatusOK, out.Decision)
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
		h.writeErr(w, err)
		return
	}
	at := strings.IndexByte(req.Email, '@')
	switch {
	case len(req.Email) > 254 || at < 1 || at == len(req.Email)-1 || strings.ContainsAny(req.Email, " \t\r\n"):
		h.writeErr(w, &FieldError{Field: "email", Message: "not an e-mail address"})
		return
	case req.ClientRegion == "" || len(req.ClientRegion) > 32:
		h.writeErr(w, &FieldError{Field: "clientRegion", Message: "required"})
		return
	case req.Consent == nil:
		h.writeErr(w, &FieldError{Field: "consent", Message: "required"})
		return
	}
	if _, ok := h.Policy.Regions.Tenants[req.TenantID]; !ok {
		h.writeErr(w, &FieldError{Field: "tenantId", Message: "unknown tenant"})
		return
	}
	// No consent, delivery, DSAR or lead store is configured: nothing is
	// kept, and the answer says so.
	httpjson.Write(w, http.StatusServiceUnavailable, map[string]any{"code": "regional_waitlist_not_configured", "emailStored": false})
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
		h.writeErr(w, err)
		return
	}
	a, err := h.access(r)
	if err != nil {
		httpjson.Write(w, http.StatusUnauthorized, map[string]any{"code": "token_invalid"})
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
		h.writeErr(w, &FieldError{Field: "clientRegion", Message: "required"})
		return
	}
	if req.Lane == "" {
		req.Lane = string(state.LaneWeb)
	}
	if lane := h.Room.BypassLane(a, false); lane != "" {
		h.Room.d.Metrics.bypassed(lane)
		httpjson.Write(w, http.StatusOK, QueueStatus{Status: "bypass", Region: h.Room.PopRegion(region), FallbackURL: h.Room.fallback()})
		return
	}
	st, err := h.Room.Join(r.Context(), subject, region, state.Lane(req.Lane))
	if err != nil {
		h.writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, st)
}

type ticketRequest struct {
	Ticket string `json:"ticket"`
}

func (h *Handlers) ticket(w http.ResponseWriter, r *http.Request) (string, bool) {
	var req ticketRequest
	if err := decodeStrict(r.Body, &req); err != nil {
		h.writeErr(w, err)
		return "", false
	}
	if req.Ticket == "" {
		h.writeErr(w, &FieldError{Field: "ticket", Message: "required"})
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
		h.writeErr(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, st)
}

func (h *Handlers) leave(w http.ResponseWriter, r *http.Request) {
	tok, ok := h.ticket(w, r)
	if !ok {
		return
	}
	if _, err := h.Room.Leave(r.Context(), tok); err != nil {
		h.writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// operator wraps a route that needs an operator: the edge's one operator
// scheme (internal/opguard), a bearer access token with the operator role
// and no cross-site browser request.
func (h *Handlers) operator(next func(http.ResponseWriter, *http.Request, *auth.Access)) http.HandlerFunc {
	return opguard.RequireOperator(h.Signer, func(w http.ResponseWriter, r *http.Request, a auth.Access) { next(w, r, &a) })
}

func (h *Handlers) state(w http.ResponseWriter, r *http.Request, _ *auth.Access) {
	m, err := h.Room.d.Queue.Meta(r.Context())
	if err != nil {
		h.writeErr(w, mapStateErr(err))
		return
	}
	out := metaJSON(m)
	if h.Surge != nil {
		st, err := h.Surge.State(r.Context())
		if err != nil {
			h.writeErr(w, err)
			return
		}
		out["surge"] = map[string]any{"at": st.At, "leader": st.Leader, "applied": st.Applied, "since": st.Since,
			"ceilingPerMinute": st.Ceiling, "paged": st.Paged}
	}
	out["rates"] = h.rates(m.Halved)
	httpjson.Write(w, http.StatusOK, out)
}

// rates is what the room would admit now: the global bucket (clamped to
// downstream health, halved by the operator's halve), the signup bucket,
// and per POP region its bucket after the utilisation ladder, with its line
// as this edge last observed it (depth, median wait in seconds; -1:
// nothing drains).
func (h *Handlers) rates(halved bool) map[string]any {
	depth, wait := h.Room.Lines()
	names := make([]string, 0, len(h.Room.p.Regions))
	for reg := range h.Room.p.Regions {
		names = append(names, reg)
	}
	slices.Sort(names)
	global, _ := h.Room.Rates(h.Room.p.DefaultRegion)
	regions := make(map[string]any, len(names))
	for _, reg := range names {
		rt, lad := h.Room.Rates(reg)
		regions[reg] = map[string]any{"perMinute": rt.RegionPerMin, "burst": rt.RegionBurst,
			"pxstreamAllowed": rt.PxstreamAllowed, "frozen": lad.Frozen, "depth": depth[reg], "medianWaitSeconds": wait[reg]}
	}
	perMin := global.GlobalPerMin
	if halved {
		perMin /= 2
	}
	return map[string]any{"globalPerMinute": perMin, "globalBurst": global.GlobalBurst,
		"signupPerMinute": h.Room.p.Signup.PerMinute, "regions": regions}
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
			h.writeErr(w, err)
			return
		}
		op := on
		if field != "" {
			v := map[string]*bool{"armed": req.Armed, "frozen": req.Frozen, "halved": req.Halved}[field]
			if v == nil {
				h.writeErr(w, &FieldError{Field: field, Message: "required"})
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
			h.writeErr(w, err)
			return
		}
		httpjson.Write(w, http.StatusOK, metaJSON(m))
	}
}
