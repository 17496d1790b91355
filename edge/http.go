package edge

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/httpjson"
	"github.com/oshun/egbe-edge/transport"
)

// maxJSONBody bounds the small JSON bodies the edge's own endpoints read.
const maxJSONBody = 16 << 10

// apiError is the body of every refusal from the edge's own endpoints.
type apiError = httpjson.Error

func writeError(w http.ResponseWriter, status int, code, format string, args ...any) {
	httpjson.WriteError(w, status, code, fmt.Sprintf(format, args...))
}

// decodeJSON strictly decodes a bounded JSON body into v.
func decodeJSON(r *http.Request, v any) error { return decodeJSONWithin(r, v, maxJSONBody+1) }

// decodeJSONWithin is decodeJSON with a body bound of limit bytes (a
// longer body fails to decode). An empty body is io.EOF.
func decodeJSONWithin(r *http.Request, v any, limit int64) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// certHashHandler serves GET /v6/realtime/cert-hash: the SHA-256 of the
// certificate WebTransport clients pin with serverCertificateHashes.
func certHashHandler(hash [32]byte, notAfter time.Time) http.HandlerFunc {
	body := map[string]any{
		"algorithm": "sha-256",
		"value":     base64.StdEncoding.EncodeToString(hash[:]),
		"hex":       hex.EncodeToString(hash[:]),
		"notAfter":  notAfter.UTC().Format(time.RFC3339),
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use GET")
			return
		}
		w.Header().Set("Access-Control-Allow-Origin", "*")
		httpjson.Write(w, http.StatusOK, body)
	}
}

// devTokenRequest is the body of POST /v6/dev/token.
type devTokenRequest struct {
	Sub         string   `json:"sub"`
	Tenant      string   `json:"tenant"`
	Region      string   `json:"region"`
	Entitlement string   `json:"entitlement"`
	Roles       []string `json:"roles"`
	// Parental-control claims, for trying the voice rules by hand.
	Minor   bool     `json:"minor,omitempty"`
	Voice   string   `json:"voice,omitempty"`
	Friends []string `json:"friends,omitempty"`
}

// devAccessTTL is the lifetime of a dev-mode access token.
const devAccessTTL = 12 * time.Hour

// devTokenHandler serves POST /v6/dev/token (dev mode only): an access
// token for any subject, so a newcomer and the tests can open sessions.
func devTokenHandler(signer *auth.Signer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST")
			return
		}
		var req devTokenRequest
		if err := decodeJSON(r, &req); err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "%v", err)
			return
		}
		if req.Sub == "" {
			writeError(w, http.StatusBadRequest, "bad_request", "sub is required")
			return
		}
		tok, err := signer.IssueAccess(auth.Access{
			Subject: req.Sub, Tenant: req.Tenant, Region: req.Region, Entitlement: req.Entitlement,
			Roles: req.Roles, Minor: req.Minor, Voice: req.Voice, Friends: req.Friends,
		}, devAccessTTL)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "%v", err)
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]string{"token": tok})
	}
}

// crossOrigin answers CORS for h: a fleet's edges serve one another's
// pages (the demo page moves its session to the edge holding its voice
// room), so negotiate, the WebRTC offer and voice are callable from other
// origins. They authenticate by bearer token or in-band hello, never by
// cookie, so an origin grants nothing; with --allowed-origin set, only
// those origins are answered, as for WebSocket. Preflights end here.
func crossOrigin(allowed []string, h http.Handler) http.Handler {
	origins := transport.NewOrigins(allowed)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" || !origins.Allow(origin) {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Access-Control-Allow-Origin", origin)
		w.Header().Add("Vary", "Origin")
		// WHIP's ICE servers ride in Link headers (the WebRTC answer).
		w.Header().Set("Access-Control-Expose-Headers", "Link")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
			w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
			w.Header().Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.ServeHTTP(w, r)
	})
}
