package edge

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/httpjson"
)

// maxJSONBody bounds the small JSON bodies the edge's own endpoints read.
const maxJSONBody = 16 << 10

// apiError is the body of every refusal from the edge's own endpoints.
type apiError = httpjson.Error

func writeError(w http.ResponseWriter, status int, code, format string, args ...any) {
	httpjson.WriteError(w, status, code, fmt.Sprintf(format, args...))
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
		if err := httpjson.Decode(r, &req, maxJSONBody+1); err != nil {
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
