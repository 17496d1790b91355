package matchmaker

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/oshun/egbe-edge/internal/httpjson"
)

// Routes served by Handler.
const (
	PathMatch       = "/api/v6/pxstream/match"
	PathMatchV3     = "/api/v3/pxstream/match"
	PathDashboard   = "/api/v3/pxstream/pop-capacity/dashboard"
	PathDashboardV6 = "/api/v6/pxstream/pop-capacity/dashboard"
)

// Handler serves the match endpoint (and its v3 alias) and the POP
// capacity dashboard.
func (m *Matchmaker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(PathMatch, m.serveMatch)
	mux.HandleFunc(PathMatchV3, m.serveMatch)
	mux.HandleFunc(PathDashboard, m.serveDashboard)
	mux.HandleFunc(PathDashboardV6, m.serveDashboard)
	return mux
}

// matchResponse is the 200 body.
type matchResponse struct {
	SessionID          string `json:"session_id"`
	POPID              string `json:"pop_id"`
	StreamerID         string `json:"streamer_id"`
	Codec              string `json:"codec"`
	SignallingURL      string `json:"signalling_url"`
	Token              string `json:"token"`
	FirstFrameBudgetMs int    `json:"first_frame_budget_ms"`
	ExpiresAt          string `json:"expires_at"`
	FallbackURL        string `json:"fallback_url"`
	QueuePosition      int    `json:"queue_position"`
	// ICEServers is {"iceServers":[...]} with TURN credentials for this
	// session (Deps.ICEServers); absent when the edge hands out none.
	ICEServers json.RawMessage `json:"ice_servers,omitempty"`
	// Seat is present for a concert match only: streamer_id is then the
	// SFU's id (subscribe to it as to a streamer).
	Seat *seatResponse `json:"seat,omitempty"`
}

// seatResponse is a concert match's seat.
type seatResponse struct {
	EventID string `json:"event_id"`
	SFUID   string `json:"sfu_id"`
}

// refusalResponse is every non-200 body.
type refusalResponse struct {
	Reason      Reason            `json:"reason"`
	Message     string            `json:"message,omitempty"`
	Field       string            `json:"field,omitempty"`
	FallbackURL string            `json:"fallback_url"`
	Rejected    map[string]string `json:"rejected,omitempty"`
}

func (m *Matchmaker) serveMatch(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		m.writeRefusal(w, m.refused(refuse(ReasonMethodNotAllowed, http.StatusMethodNotAllowed, "use POST")))
		return
	}
	req, rf := m.decodeRequest(w, r)
	if rf != nil {
		m.writeRefusal(w, m.refused(rf))
		return
	}
	res, err := m.Match(r.Context(), req)
	if err != nil {
		var rf *Refusal
		if !errors.As(err, &rf) {
			rf = refuse(ReasonInternal, http.StatusInternalServerError, "match failed")
		}
		m.writeRefusal(w, rf)
		return
	}
	var ice json.RawMessage
	if m.ice != nil {
		subject := req.Subject
		if subject == "" {
			subject = res.SessionID
		}
		if ice = m.ice(subject, res.ExpiresAt, r.Host); !json.Valid(ice) {
			ice = nil // never break the answer
		}
	}
	var seat *seatResponse
	if res.Seat != nil {
		seat = &seatResponse{EventID: res.Seat.Event, SFUID: res.Seat.SFU}
	}
	httpjson.Write(w, http.StatusOK, matchResponse{
		Seat:               seat,
		SessionID:          res.SessionID,
		POPID:              res.POP,
		StreamerID:         res.StreamerID,
		Codec:              res.Codec,
		SignallingURL:      m.signallingURL(r, res.Token),
		Token:              res.Token,
		FirstFrameBudgetMs: FirstFrameBudgetMs,
		ExpiresAt:          res.ExpiresAt.UTC().Format(time.RFC3339),
		FallbackURL:        m.cfg.FallbackURL,
		QueuePosition:      res.QueuePosition,
		ICEServers:         ice,
	})
}

// decodeRequest authenticates and strictly decodes the body.
func (m *Matchmaker) decodeRequest(w http.ResponseWriter, r *http.Request) (Request, *Refusal) {
	var req Request
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return req, refuse(ReasonUnsupportedMedia, http.StatusUnsupportedMediaType, "content type %q is not application/json", ct)
		}
	}
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			return req, refuse(ReasonInvalidAccessToken, http.StatusUnauthorized, "authorization is not a bearer token")
		}
		a, err := m.signer.VerifyAccess(strings.TrimSpace(tok))
		if err != nil {
			return req, refuse(ReasonInvalidAccessToken, http.StatusUnauthorized, "access token rejected")
		}
		req.Access = &a
	} else if m.cfg.RequireAccessToken {
		return req, refuse(ReasonAccessTokenRequired, http.StatusUnauthorized, "bearer access token required")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, m.cfg.MaxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return req, refuse(ReasonRequestTooLarge, http.StatusRequestEntityTooLarge, "body larger than %d bytes", m.cfg.MaxRequestBytes)
		}
		return req, badField("", "read body: %v", err)
	}
	if rf := decodeStrict(body, &req); rf != nil {
		return req, rf
	}
	if req.Access != nil {
		// A verified token is the only authority on who this is, for which
		// tenant, and what they paid for: the body's user_id, tenant_id and
		// entitlement are ignored, and a token without the paid claim is
		// free.
		req.Subject = req.Access.Subject
		req.TenantID = req.Access.Tenant
		if req.ClientRegion == "" {
			req.ClientRegion = req.Access.Region
		}
		req.Entitlement = EntitlementFree
		if req.Access.Entitlement == EntitlementPaid {
			req.Entitlement = EntitlementPaid
		}
	} else {
		// No token (only without RequireAccessToken, i.e. dev): the body
		// names the caller, as Epic's drop-in setup would.
		req.Subject = req.UserID
	}
	req.AdmissionTicket = r.Header.Get(HeaderAdmission)
	req.ResumeToken = r.Header.Get(HeaderResume)
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		req.RemoteAddr = ap.Addr().Unmap()
	}
	return req, nil
}

// decodeStrict decodes one JSON object, refusing unknown fields and wrong
// types with the field named.
func decodeStrict(body []byte, req *Request) *Refusal {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			return badField(te.Field, "field %q: expected %s", te.Field, te.Type)
		case errors.As(err, &se):
			return badField("", "malformed JSON at offset %d", se.Offset)
		case errors.Is(err, io.EOF):
			return badField("", "empty body")
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			f, _ = strconv.Unquote(f)
			return badField(f, "unknown field %q", f)
		}
		return badField("", "malformed JSON: %v", err)
	}
	if dec.More() {
		return badField("", "trailing data after the JSON object")
	}
	return nil
}

// signallingURL builds ws(s)://<host><path>?token=... from the request.
func (m *Matchmaker) signallingURL(r *http.Request, token string) string {
	base := m.cfg.PublicSignallingURL
	if base == "" {
		scheme := "ws"
		if r.TLS != nil || (m.cfg.TrustForwardedProto && strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")) {
			scheme = "wss"
		}
		base = scheme + "://" + r.Host + m.cfg.SignallingPath
	}
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + "token=" + url.QueryEscape(token)
}

func (m *Matchmaker) writeRefusal(w http.ResponseWriter, rf *Refusal) {
	if rf.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((rf.RetryAfter+time.Second-1)/time.Second)))
	}
	status := rf.Status
	if status < 400 || status > 599 {
		status = http.StatusInternalServerError
	}
	httpjson.Write(w, status, refusalResponse{
		Reason: rf.Reason, Message: rf.Message, Field: rf.Field,
		FallbackURL: m.cfg.FallbackURL, Rejected: rf.Rejected,
	})
}

func (m *Matchmaker) serveDashboard(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		m.writeRefusal(w, refuse(ReasonMethodNotAllowed, http.StatusMethodNotAllowed, "use GET"))
		return
	}
	d := m.Dashboard()
	if m.seats != nil {
		cs, err := m.seats.Concerts(r.Context())
		if err != nil {
			m.log.Warn("concert seats for the dashboard", "err", err)
			d.ConcertsError = "seat store unavailable"
		}
		d.Concerts = cs
	}
	httpjson.Write(w, http.StatusOK, d)
}
