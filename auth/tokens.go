package auth

import (
	"fmt"
	"time"
)

// Voice modes a parent can set in an access token (claim "voice").
const (
	VoiceOpen        = ""             // no restriction
	VoiceOff         = "off"          // hears and speaks to no one
	VoiceSquadOnly   = "squad-only"   // squad members only
	VoiceFriendsOnly = "friends-only" // listed friends (and squad members) only
)

// Access are the claims of an access token: who the client is.
type Access struct {
	Subject     string    `json:"-"`
	Tenant      string    `json:"tenant,omitempty"`
	Region      string    `json:"region,omitempty"`
	Entitlement string    `json:"entitlement,omitempty"` // "free", "paid", ...
	Roles       []string  `json:"roles,omitempty"`       // "operator", "instructor", "editorial"
	Minor       bool      `json:"minor,omitempty"`
	Voice       string    `json:"voice,omitempty"`   // parental voice mode
	Friends     []string  `json:"friends,omitempty"` // subjects a minor may hear in friends-only mode
	ExpiresAt   time.Time `json:"-"`
}

// HasRole reports whether the token grants role.
func (a Access) HasRole(role string) bool {
	for _, r := range a.Roles {
		if r == role {
			return true
		}
	}
	return false
}

type accessClaims struct {
	base
	Access
}

// IssueAccess mints an access token for the realtime audience.
func (s *Signer) IssueAccess(a Access, ttl time.Duration) (string, error) {
	if a.Subject == "" {
		return "", fmt.Errorf("%w: subject required", ErrInvalid)
	}
	return s.sign(accessClaims{base{TypeAccess, s.registered(a.Subject, AudienceRealtime, ttl)}, a})
}

// VerifyAccess checks an access token.
func (s *Signer) VerifyAccess(tok string) (Access, error) {
	var c accessClaims
	if err := s.parse(tok, TypeAccess, AudienceRealtime, &c); err != nil {
		return Access{}, err
	}
	if c.RegisteredClaims.Subject == "" {
		return Access{}, fmt.Errorf("%w: no subject", ErrInvalid)
	}
	a := c.Access
	a.Subject = c.RegisteredClaims.Subject
	a.ExpiresAt = c.RegisteredClaims.ExpiresAt.Time
	return a, nil
}

// Resume names the session and shard a client may return to.
type Resume struct {
	SessionID  string    `json:"sid"`
	ShardID    string    `json:"shard"`
	InstanceID string    `json:"inst"`
	Subject    string    `json:"-"`
	EntityID   uint32    `json:"ent,omitempty"`
	ExpiresAt  time.Time `json:"-"`
}

type resumeClaims struct {
	base
	Resume
}

// IssueResume mints a resume token valid for ttl.
func (s *Signer) IssueResume(r Resume, ttl time.Duration) (string, error) {
	if r.SessionID == "" || r.ShardID == "" {
		return "", fmt.Errorf("%w: session and shard required", ErrInvalid)
	}
	c := resumeClaims{base{TypeResume, s.registered(r.Subject, AudienceRealtime, ttl)}, r}
	c.RegisteredClaims.ID = r.SessionID
	return s.sign(c)
}

// VerifyResume checks a resume token.
func (s *Signer) VerifyResume(tok string) (Resume, error) {
	var c resumeClaims
	if err := s.parse(tok, TypeResume, AudienceRealtime, &c); err != nil {
		return Resume{}, err
	}
	if c.SessionID == "" || c.ShardID == "" {
		return Resume{}, fmt.Errorf("%w: resume token without session or shard", ErrInvalid)
	}
	r := c.Resume
	r.Subject = c.RegisteredClaims.Subject
	r.ExpiresAt = c.RegisteredClaims.ExpiresAt.Time
	return r, nil
}

// PxSession TTL bounds (reference: default 120 s, clamped 30-900 s).
const (
	PxSessionDefaultTTL = 120 * time.Second
	PxSessionMinTTL     = 30 * time.Second
	PxSessionMaxTTL     = 900 * time.Second
	// PxScope is the scope claim of a Pixel Streaming session token.
	PxScope = "v3:pxstream"
)

// ClampPxSessionTTL clamps ttl into [30 s, 900 s]; 0 means the default.
func ClampPxSessionTTL(ttl time.Duration) time.Duration {
	switch {
	case ttl == 0:
		return PxSessionDefaultTTL
	case ttl < PxSessionMinTTL:
		return PxSessionMinTTL
	case ttl > PxSessionMaxTTL:
		return PxSessionMaxTTL
	}
	return ttl
}

// PxSession is a Pixel Streaming session lease: which streamer a player may
// signal with.
type PxSession struct {
	SessionID  string    `json:"sid"`
	Subject    string    `json:"-"`
	Scope      string    `json:"scope"`
	POP        string    `json:"pop"`
	Codec      string    `json:"codec"`
	StreamerID string    `json:"streamer"`
	ExpiresAt  time.Time `json:"-"`
}

type pxSessionClaims struct {
	base
	PxSession
}

// IssuePxSession mints a session JWT; ttl is clamped (ClampPxSessionTTL).
func (s *Signer) IssuePxSession(p PxSession, ttl time.Duration) (string, error) {
	if p.SessionID == "" || p.StreamerID == "" || p.POP == "" || p.Codec == "" {
		return "", fmt.Errorf("%w: session, streamer, pop and codec required", ErrInvalid)
	}
	p.Scope = PxScope
	c := pxSessionClaims{base{TypePxSession, s.registered(p.Subject, AudiencePxstream, ClampPxSessionTTL(ttl))}, p}
	c.RegisteredClaims.ID = p.SessionID
	return s.sign(c)
}

// VerifyPxSession checks a session JWT, including its scope.
func (s *Signer) VerifyPxSession(tok string) (PxSession, error) {
	var c pxSessionClaims
	if err := s.parse(tok, TypePxSession, AudiencePxstream, &c); err != nil {
		return PxSession{}, err
	}
	if c.Scope != PxScope {
		return PxSession{}, fmt.Errorf("%w: scope %q", ErrInvalid, c.Scope)
	}
	if c.SessionID == "" || c.StreamerID == "" {
		return PxSession{}, fmt.Errorf("%w: no session or streamer", ErrInvalid)
	}
	p := c.PxSession
	p.Subject = c.RegisteredClaims.Subject
	p.ExpiresAt = c.RegisteredClaims.ExpiresAt.Time
	return p, nil
}

// Streamer entitles a UE worker to register under one streamer id.
type Streamer struct {
	StreamerID string    `json:"streamer"`
	POP        string    `json:"pop,omitempty"`
	Codecs     []string  `json:"codecs,omitempty"`
	ExpiresAt  time.Time `json:"-"`
}

type streamerClaims struct {
	base
	Streamer
}

// IssueStreamer mints a streamer token.
func (s *Signer) IssueStreamer(st Streamer, ttl time.Duration) (string, error) {
	if st.StreamerID == "" {
		return "", fmt.Errorf("%w: streamer id required", ErrInvalid)
	}
	return s.sign(streamerClaims{base{TypeStreamer, s.registered(st.StreamerID, AudiencePxstream, ttl)}, st})
}

// VerifyStreamer checks a streamer token.
func (s *Signer) VerifyStreamer(tok string) (Streamer, error) {
	var c streamerClaims
	if err := s.parse(tok, TypeStreamer, AudiencePxstream, &c); err != nil {
		return Streamer{}, err
	}
	if c.StreamerID == "" {
		return Streamer{}, fmt.Errorf("%w: no streamer id", ErrInvalid)
	}
	st := c.Streamer
	st.ExpiresAt = c.RegisteredClaims.ExpiresAt.Time
	return st, nil
}

// SFU entitles a Pixel Streaming SFU (Epic's, or signalling/pxsfu) to
// connect to the SFU port and register under one id. Upstream, when set,
// is the only streamer it may subscribe to.
type SFU struct {
	SFUID     string    `json:"sfu"`
	Upstream  string    `json:"upstream,omitempty"`
	POP       string    `json:"pop,omitempty"`
	ExpiresAt time.Time `json:"-"`
}

type sfuClaims struct {
	base
	SFU
}

// IssueSFU mints an SFU token.
func (s *Signer) IssueSFU(f SFU, ttl time.Duration) (string, error) {
	if f.SFUID == "" {
		return "", fmt.Errorf("%w: sfu id required", ErrInvalid)
	}
	return s.sign(sfuClaims{base{TypeSFU, s.registered(f.SFUID, AudiencePxstream, ttl)}, f})
}

// VerifySFU checks an SFU token.
func (s *Signer) VerifySFU(tok string) (SFU, error) {
	var c sfuClaims
	if err := s.parse(tok, TypeSFU, AudiencePxstream, &c); err != nil {
		return SFU{}, err
	}
	if c.SFUID == "" {
		return SFU{}, fmt.Errorf("%w: no sfu id", ErrInvalid)
	}
	f := c.SFU
	f.ExpiresAt = c.RegisteredClaims.ExpiresAt.Time
	return f, nil
}

// QueueTicket holds a place in the waiting room (reference: TTL 4 h).
type QueueTicket struct {
	TicketID          string    `json:"tid"`
	Subject           string    `json:"-"`
	Region            string    `json:"region"`
	Position          uint64    `json:"position"`
	IssuedAtMs        int64     `json:"issuedAt"`
	RegionWeightClass string    `json:"regionWeightClass"`
	Epoch             string    `json:"epoch"`
	ExpiresAt         time.Time `json:"-"`
}

type queueTicketClaims struct {
	base
	QueueTicket
}

// QueueTicketTTL is the reference's queue-ticket lifetime.
const QueueTicketTTL = 4 * time.Hour

// IssueQueueTicket mints a queue ticket.
func (s *Signer) IssueQueueTicket(q QueueTicket, ttl time.Duration) (string, error) {
	if q.TicketID == "" {
		return "", fmt.Errorf("%w: ticket id required", ErrInvalid)
	}
	c := queueTicketClaims{base{TypeQueueTicket, s.registered(q.Subject, AudienceQueue, ttl)}, q}
	c.RegisteredClaims.ID = q.TicketID
	return s.sign(c)
}

// VerifyQueueTicket checks a queue ticket.
func (s *Signer) VerifyQueueTicket(tok string) (QueueTicket, error) {
	var c queueTicketClaims
	if err := s.parse(tok, TypeQueueTicket, AudienceQueue, &c); err != nil {
		return QueueTicket{}, err
	}
	if c.TicketID == "" {
		return QueueTicket{}, fmt.Errorf("%w: no ticket id", ErrInvalid)
	}
	q := c.QueueTicket
	q.Subject = c.RegisteredClaims.Subject
	q.ExpiresAt = c.RegisteredClaims.ExpiresAt.Time
	return q, nil
}

// AdmissionTicket lets its holder open a new session while the waiting room
// is armed (reference: a 5-minute join window).
type AdmissionTicket struct {
	TicketID  string    `json:"tid"`
	Subject   string    `json:"-"`
	Region    string    `json:"region"`
	Epoch     string    `json:"epoch"`
	ExpiresAt time.Time `json:"-"`
}

type admissionTicketClaims struct {
	base
	AdmissionTicket
}

// AdmissionJoinWindow is how long an admission ticket may be used.
const AdmissionJoinWindow = 5 * time.Minute

// IssueAdmissionTicket mints an admission ticket.
func (s *Signer) IssueAdmissionTicket(a AdmissionTicket, ttl time.Duration) (string, error) {
	if a.TicketID == "" {
		return "", fmt.Errorf("%w: ticket id required", ErrInvalid)
	}
	c := admissionTicketClaims{base{TypeAdmissionTicket, s.registered(a.Subject, AudienceQueue, ttl)}, a}
	c.RegisteredClaims.ID = a.TicketID
	return s.sign(c)
}

// VerifyAdmissionTicket checks an admission ticket.
func (s *Signer) VerifyAdmissionTicket(tok string) (AdmissionTicket, error) {
	var c admissionTicketClaims
	if err := s.parse(tok, TypeAdmissionTicket, AudienceQueue, &c); err != nil {
		return AdmissionTicket{}, err
	}
	if c.TicketID == "" {
		return AdmissionTicket{}, fmt.Errorf("%w: no ticket id", ErrInvalid)
	}
	a := c.AdmissionTicket
	a.Subject = c.RegisteredClaims.Subject
	a.ExpiresAt = c.RegisteredClaims.ExpiresAt.Time
	return a, nil
}
