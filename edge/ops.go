package edge

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/httpjson"
	"github.com/oshun/egbe-edge/internal/opguard"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/web"
)

// mountOps mounts the operator page on the admin mux.
func (e *Edge) mountOps(m *http.ServeMux) {
	m.Handle("/ops/", http.StripPrefix("/ops/", http.FileServerFS(web.Ops())))
	m.HandleFunc("/ops", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ops/", http.StatusFound) })
	m.HandleFunc("POST /ops/sessions/{session_id}/revoke", opguard.RequireOperator(e.signer, e.revokeSession))
	m.HandleFunc("GET /ops/sessions", opguard.RequireOperator(e.signer, e.liveSessions))
	m.HandleFunc("/ops/sessions/{session_id}/revoke", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST")
	})
	// /ops/metrics.json: this edge's figures, or with ?scope=fleet (the
	// page's default when the edge has Redis) the whole fleet's, summed.
	m.Handle("/ops/metrics.json", e.ops)
}

// opsSession is one live session in GET /ops/sessions.
type opsSession struct {
	SessionID string `json:"session_id"`
	Subject   string `json:"subject"`
	Tenant    string `json:"tenant,omitempty"`
	Instance  string `json:"instance"`
	Shard     string `json:"shard"`
	Transport string `json:"transport"`
}

// opsSessionsResponse answers GET /ops/sessions.
type opsSessionsResponse struct {
	Total    int          `json:"total"` // live on this edge; the list stops at maxOpsSessions
	Sessions []opsSession `json:"sessions"`
}

// maxOpsSessions bounds the operator page's session table.
const maxOpsSessions = 500

// liveSessions serves GET /ops/sessions (operator): this edge's live
// sessions, for the operator page's table and its revoke buttons.
func (e *Edge) liveSessions(w http.ResponseWriter, _ *http.Request, _ auth.Access) {
	list, total := e.rt.gw.LiveSessions(maxOpsSessions)
	out := opsSessionsResponse{Total: total, Sessions: make([]opsSession, len(list))}
	for i, s := range list {
		out.Sessions[i] = opsSession{SessionID: s.ID, Subject: s.Subject, Tenant: s.Access.Tenant, Instance: s.InstanceID,
			Shard: s.ShardID, Transport: s.Transport}
	}
	httpjson.Write(w, http.StatusOK, out)
}

// revokeRequest is the optional body of POST /ops/sessions/{id}/revoke.
type revokeRequest struct {
	Reason string `json:"reason"` // for the audit line
}

// revokeResponse answers POST /ops/sessions/{id}/revoke.
type revokeResponse struct {
	SessionID    string    `json:"session_id"`
	RevokedUntil time.Time `json:"revoked_until"`
	ClosedHere   bool      `json:"closed_here"` // the session was live on this edge and is ended
}

// Bounds of a revoke request.
const (
	maxRevokeBody   = 4 << 10
	maxRevokeReason = 512
	maxSessionID    = 128
)

// revokeSession serves POST /ops/sessions/{session_id}/revoke: the
// session's resume tokens are refused fleet-wide for their longest
// lifetime (shard.Gateway.Revoke), and the session ends at once if it is
// live anywhere (here at once; elsewhere on the Redis notice, or at that
// edge's next pin refresh). Audited.
func (e *Edge) revokeSession(w http.ResponseWriter, r *http.Request, op auth.Access) {
	id := r.PathValue("session_id")
	if !validSessionID(id) {
		writeError(w, http.StatusBadRequest, "bad_request", "session id must be 1-%d of [A-Za-z0-9_.:-]", maxSessionID)
		return
	}
	var req revokeRequest
	if err := decodeRevoke(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "%v", err)
		return
	}
	log := e.logFor("ops")
	until, here, err := e.rt.gw.Revoke(r.Context(), id)
	if err != nil {
		log.Warn("audit: session revoke failed", "session", id, "operator", op.Subject, "reason", req.Reason, "remote", r.RemoteAddr, "err", err)
		switch {
		case errors.Is(err, state.ErrUnavailable):
			writeError(w, http.StatusServiceUnavailable, "state_unavailable", "revocations unavailable; nothing was revoked")
		case errors.Is(err, state.ErrBadArgument):
			writeError(w, http.StatusBadRequest, "bad_request", "%v", err)
		default:
			writeError(w, http.StatusInternalServerError, "internal", "revoke failed")
		}
		return
	}
	log.Info("audit: session revoked", "session", id, "operator", op.Subject, "reason", req.Reason, "revoked_until", until,
		"closed_here", here, "remote", r.RemoteAddr)
	httpjson.Write(w, http.StatusOK, revokeResponse{SessionID: id, RevokedUntil: until.UTC(), ClosedHere: here})
}

// decodeRevoke strictly decodes the optional, bounded body of a revoke: no
// body at all is a revoke without a reason.
func decodeRevoke(r *http.Request, v *revokeRequest) error {
	switch err := httpjson.Decode(r, v, maxRevokeBody); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return fmt.Errorf("body (at most %d bytes of JSON): %w", maxRevokeBody, err)
	}
	if len(v.Reason) > maxRevokeReason {
		return fmt.Errorf("reason over %d bytes", maxRevokeReason)
	}
	return nil
}

// validSessionID accepts what could be a session id ("s_" + hex today),
// keeping anything else out of the store and the audit line.
func validSessionID(id string) bool {
	if id == "" || len(id) > maxSessionID {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("_.:-", c) >= 0:
		default:
			return false
		}
	}
	return true
}
