package matchmaker

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/oshun/egbe-edge/auth"
)

// State is a registered streamer's state as the matchmaker counts it.
type State string

// Streamer states. Any other state counts as registered but neither free
// nor a session (e.g. a streamer that has not finished identifying).
const (
	StateIdle      State = "idle"
	StateLeased    State = "leased"
	StateStreaming State = "streaming"
)

// Streamer is one registered streamer.
type Streamer struct {
	ID     string
	POP    string
	Codecs []string
	State  State
}

// Fleet is the subset of the streamer registry the matchmaker needs.
type Fleet interface {
	// Streamers is a point-in-time copy of the registered streamers.
	Streamers() []Streamer
	// LeaseIdle atomically moves one idle streamer of pop that supports
	// codec to leased for sessionID until the deadline, and returns its id.
	// It returns ErrNoIdleStreamer (possibly wrapped) when there is none.
	// A lease not used by the deadline returns the streamer to the pool.
	LeaseIdle(pop, codec, sessionID string, until time.Time) (streamerID string, err error)
	// Release ends sessionID's lease (no-op when unknown).
	Release(sessionID string)
}

// Request is a match request (the JSON body of POST .../pxstream/match).
type Request struct {
	UserID             string   `json:"user_id,omitempty"`
	ClientRegion       string   `json:"client_region"`
	Codecs             []string `json:"codecs"`
	Entitlement        string   `json:"entitlement"`
	CrossRegionConsent bool     `json:"cross_region_consent,omitempty"`
	TenantID           string   `json:"tenant_id,omitempty"`
	EventID            string   `json:"event_id,omitempty"`
	DeviceID           string   `json:"device_id,omitempty"`

	// Set by the handler, never decoded from the body.
	Subject    string       `json:"-"` // access-token subject, else user_id
	Access     *auth.Access `json:"-"` // nil without a bearer token
	RemoteAddr netip.Addr   `json:"-"`
	// AdmissionTicket and ResumeToken are the X-Egbe-Admission and
	// X-Egbe-Resume headers: the waiting room's admission ticket and the
	// resume-token bypass lane, as on every route the room guards.
	AdmissionTicket string `json:"-"`
	ResumeToken     string `json:"-"`

	// Set by Match before it calls the Admitter.
	SessionID string `json:"-"` // the session id the lease and JWT will carry
	// EligiblePOPUtilBP is the live utilisation (basis points) of every POP
	// that could serve this request before the free-tier cuts: accepting,
	// residency allowed, RTT within budget, codec supported. Admission's
	// regional backpressure reads it.
	EligiblePOPUtilBP []int `json:"-"`
}

// Waiting-room headers (the same names the room's guard reads on the
// launch and auth routes).
const (
	HeaderAdmission = "X-Egbe-Admission"
	HeaderResume    = "X-Egbe-Resume"
)

// Entitlements.
const (
	EntitlementFree = "free"
	EntitlementPaid = "paid"
)

// Admitter is the admission seam (caps, budgets, walk-up reservations,
// abuse). A nil Admitter admits everyone.
type Admitter interface {
	Admit(ctx context.Context, req Request) (Decision, error)
}

// Decision is an admission outcome.
type Decision struct {
	// Refusal, when non-nil, refuses the request with its reason and status.
	Refusal *Refusal
	// Queued is, per POP id, how many users wait in line for a stream
	// there (the waiting room's depth for the POP's region): the score's
	// queued term, and the answer's queue_position for the chosen POP.
	Queued map[string]int
	// PriorityBoost adds programming priority per POP id for this request
	// (e.g. a booked concert window), on top of the topology's priority.
	PriorityBoost map[string]int
	// HeldBack is, per POP id, how many sessions are reserved for others
	// (an event's booked attendees): this request may only lease there
	// while more than that many session slots stay free.
	HeldBack map[string]int
	// Matched, when set, is called once the match succeeded (streamer
	// leased, token minted), before the answer leaves.
	Matched func(Match)
	// Release, when set, is called if the match fails after admission (no
	// streamer could be leased, the token could not be minted), so
	// admission can return what it reserved for Request.SessionID.
	Release func()
	// Seat, when set, says admission seated this request on an SFU of a
	// concert: the match leases no streamer, and the session token names
	// the SFU as the streamer to subscribe to.
	Seat *Seat
}

// Seat is a concert seat admission took: the SFU (its streamer id on the
// player side) at a POP, streaming a codec.
type Seat struct {
	Event string // the concert's event id
	POP   string
	SFU   string
	Codec string
}

// Reason is a typed refusal code; each maps to one HTTP status.
type Reason string

// Refusal reasons the matchmaker itself produces. Admitters define their
// own (the edge's are admission's actions: reject-user-cap 409, ...).
const (
	ReasonBadRequest           Reason = "bad_request"            // 400
	ReasonUnknownRegion        Reason = "unknown_client_region"  // 400
	ReasonUnsupportedCodec     Reason = "unsupported_codec"      // 400
	ReasonRequestTooLarge      Reason = "request_too_large"      // 413
	ReasonUnsupportedMedia     Reason = "unsupported_media_type" // 415
	ReasonMethodNotAllowed     Reason = "method_not_allowed"     // 405
	ReasonAccessTokenRequired  Reason = "access_token_required"  // 401
	ReasonInvalidAccessToken   Reason = "invalid_access_token"   // 401
	ReasonNoPOPAvailable       Reason = "no_pop_available"       // 503
	ReasonAdmissionUnavailable Reason = "admission_unavailable"  // 503
	ReasonFleetUnavailable     Reason = "fleet_unavailable"      // 503
	ReasonInternal             Reason = "internal_error"         // 500
	// ReasonCodecMismatch counts offers Hooks.CheckOffer rejected (the
	// broker tells the player; no HTTP answer carries it).
	ReasonCodecMismatch Reason = "codec_mismatch"
)

// Refusal is a typed refusal: a reason code and the HTTP status it maps to.
type Refusal struct {
	Reason  Reason
	Status  int
	Message string
	// Field names the offending request field for 400s.
	Field string
	// RetryAfter, when positive, becomes a Retry-After header.
	RetryAfter time.Duration
	// Rejected says, per POP, why it was not a candidate (no_pop_available).
	Rejected map[string]string
}

func (r *Refusal) Error() string {
	if r.Message == "" {
		return "pxstream match refused: " + string(r.Reason)
	}
	return fmt.Sprintf("pxstream match refused: %s: %s", r.Reason, r.Message)
}

func refuse(reason Reason, status int, format string, a ...any) *Refusal {
	return &Refusal{Reason: reason, Status: status, Message: fmt.Sprintf(format, a...)}
}

func badField(field, format string, a ...any) *Refusal {
	r := refuse(ReasonBadRequest, http.StatusBadRequest, format, a...)
	r.Field = field
	return r
}
