package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// PxAction is the outcome of Pixel Streaming admission.
type PxAction string

// Actions, in the order the checks run. Each maps to one HTTP status
// (PxDecision.HTTPStatus) so the client reacts precisely.
const (
	PxAdmit                PxAction = "admit"                 // 200: lease held, go match
	PxRejectUserCap        PxAction = "reject-user-cap"       // 409: close one of your sessions
	PxRejectNetworkCap     PxAction = "reject-network-cap"    // 429: too many sessions behind this network
	PxRejectBudget         PxAction = "reject-free-budget"    // 402: free-tier minutes used up today
	PxFallbackWalkUp       PxAction = "fallback-walkup"       // 503: concert walk-up pool full, take the fallback
	PxFallbackBackpressure PxAction = "fallback-backpressure" // 503: every eligible POP >= 85 %, take the fallback
	PxRejectAbuse          PxAction = "reject-abuse-ban"      // 403: the abuse classifier banned the subject (checked first)
	PxFallbackSeats        PxAction = "fallback-concert-full" // 503: every SFU of the concert is full, take the fallback
)

var pxStatus = map[PxAction]int{
	PxAdmit: http.StatusOK, PxRejectUserCap: http.StatusConflict, PxRejectNetworkCap: http.StatusTooManyRequests,
	PxRejectBudget: http.StatusPaymentRequired, PxFallbackWalkUp: http.StatusServiceUnavailable,
	PxFallbackBackpressure: http.StatusServiceUnavailable, PxRejectAbuse: http.StatusForbidden,
	PxFallbackSeats: http.StatusServiceUnavailable,
}

// UserGrant lifts the per-user cap (verified instructors, editorial).
type UserGrant struct {
	MaxSessions int
	Reason      string
}

// WalkUp names a running concert's walk-up pool: Slots sessions, counted
// fleet-wide as leases on one key per event.
type WalkUp struct {
	Event string
	Slots int // reserved for walk-ups
}

// PxRequest is what the matchmaker knows when it asks for admission.
type PxRequest struct {
	SessionID           string     // lease holder
	Subject             string     // user
	TenantID            string     //
	ClientIP            netip.Addr //
	Paid                bool       // inside a paid booked window: exempt from budget, walk-up and backpressure
	Grant               *UserGrant // nil: the policy cap
	InstitutionApproved bool       // approved institution: institutional network cap
	WalkUp              *WalkUp    // nil: not a walk-up of a running concert
	Seat                *SeatPool  // nil: not a match for an SFU-fronted concert
	EligiblePopUtilBP   []int      // utilisation of every eligible POP in range (basis points)
}

// SeatPool names a running concert's seats: the match takes one seat on
// one of SFUs (fleet-wide, state.Seats) instead of a whole streamer.
type SeatPool struct {
	Event string
	SFUs  []state.SeatLimit
}

// PxDecision is a typed admission answer.
type PxDecision struct {
	Action     PxAction
	HTTPStatus int
	Lease      *Lease // non-nil only for PxAdmit
}

// Lease is a held pair of concurrency leases (user, network), plus a
// walk-up pool's and a concert seat when the match took them.
type Lease struct {
	leases state.Leases
	seats  state.Seats
	holder string
	keys   []string
	seat   Seat // zero: no seat
	ttl    time.Duration
	now    func() time.Time
	once   sync.Once
}

// Seat is a concert seat: the event (the seat pool) and the SFU seating
// the session.
type Seat struct {
	Event string `json:"event,omitempty"`
	SFU   string `json:"sfu,omitempty"`
}

// Holder is the lease holder (the Pixel Streaming session id).
func (l *Lease) Holder() string { return l.holder }

// Keys are the lease's keys (user, network, and a walk-up pool's).
func (l *Lease) Keys() []string { return slices.Clone(l.keys) }

// Seat is the concert seat the lease holds (zero: none).
func (l *Lease) Seat() Seat { return l.seat }

// Lease rebuilds a lease another edge granted (holder, keys and seat from
// the session's shared record), so the edge where the session streams
// keeps and ends it.
func (a *Admitter) Lease(holder string, keys []string, seat Seat) *Lease {
	return &Lease{leases: a.leases, seats: a.seats, holder: holder, keys: slices.Clone(keys), seat: seat,
		ttl: ms(a.p.LeaseTTLMs), now: a.now}
}

// Refresh keeps the lease (and its seat) alive; call it well within the
// lease TTL.
func (l *Lease) Refresh(ctx context.Context) error {
	now := l.now()
	err := l.leases.Refresh(ctx, l.holder, l.keys, l.ttl, now)
	if l.seat.SFU != "" && l.seats != nil {
		err = errors.Join(err, l.seats.Refresh(ctx, l.seat.Event, l.seat.SFU, l.holder, l.ttl, now))
	}
	return err
}

// Release returns the lease and its seat (idempotent).
func (l *Lease) Release(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		err = l.leases.Release(ctx, l.holder, l.keys)
		if l.seat.SFU != "" && l.seats != nil {
			err = errors.Join(err, l.seats.Release(ctx, l.seat.Event, l.seat.SFU, l.holder))
		}
	})
	return err
}

// NetworkKey is the cap key of an address: its /24 (IPv4, also for
// IPv4-mapped IPv6) or /48 (IPv6) prefix, per the policy's bit counts.
func NetworkKey(ip netip.Addr, v4Bits, v6Bits int) string {
	ip = ip.Unmap()
	bits := v6Bits
	if ip.Is4() {
		bits = v4Bits
	}
	p, err := ip.Prefix(bits)
	if err != nil {
		return "invalid"
	}
	return p.String()
}

// Auditor writes one JSON line per denial, before the answer leaves.
type Auditor struct {
	mu  sync.Mutex
	w   io.Writer // guarded by mu
	now func() time.Time
}

// NewAuditor wraps w (nil: io.Discard).
func NewAuditor(w io.Writer, now func() time.Time) *Auditor {
	if w == nil {
		w = io.Discard
	}
	if now == nil {
		now = time.Now
	}
	return &Auditor{w: w, now: now}
}

// Write records one event.
func (a *Auditor) Write(event map[string]any) error {
	event["ts"] = a.now().UTC().Format(time.RFC3339Nano)
	b, err := json.Marshal(event)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAudit, err)
	}
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.w.Write(b); err != nil {
		return fmt.Errorf("%w: %w", ErrAudit, err)
	}
	return nil
}

// Admitter runs Pixel Streaming admission for the matchmaker.
type Admitter struct {
	p       *PxstreamPolicy  // immutable after New
	leases  state.Leases     // immutable after New
	budgets state.Budgets    // immutable after New
	seats   state.Seats      // immutable after New; nil: no concert seats
	audit   *Auditor         // immutable after New
	now     func() time.Time // immutable after New
	watch   *AbuseWatch      // immutable after New; nil: no abuse check
	metrics *Metrics
}

// NewAdmitter returns an Admitter. watch may be nil (no abuse check);
// seats may be nil (a concert match is then refused as full).
func NewAdmitter(p *Policy, leases state.Leases, budgets state.Budgets, seats state.Seats, watch *AbuseWatch, audit *Auditor, now func() time.Time, m *Metrics) *Admitter {
	if now == nil {
		now = time.Now
	}
	if audit == nil {
		audit = NewAuditor(nil, now)
	}
	return &Admitter{p: &p.Pxstream, leases: leases, budgets: budgets, seats: seats, watch: watch, audit: audit, now: now, metrics: m}
}

// FreeMinutes is the free tier's daily budget in minutes.
func (a *Admitter) FreeMinutes() int64 { return a.p.FreeTierDailyMinutes }

func (a *Admitter) budgetKey(subject string, now time.Time) string {
	return "pxfree:" + subject + ":" + now.UTC().Format("2006-01-02")
}

// Admit runs, in order: the abuse classifier (before any lease: a banned
// subject is refused), per-user cap, per-network cap, free-tier daily
// budget, concert walk-up pool, a concert seat (Seat set: every match for
// the concert, booked or not), regional backpressure (not for a seat: it
// takes no GPU worker). A denial is audited before it returns; an audit
// failure is returned alongside the denial. A state error admits nothing.
func (a *Admitter) Admit(ctx context.Context, req PxRequest) (PxDecision, error) {
	if req.SessionID == "" || req.Subject == "" || !req.ClientIP.IsValid() {
		return PxDecision{}, fmt.Errorf("%w: session id, subject and client address are required", ErrBadRequest)
	}
	now := a.now()
	nk := "px:net:" + NetworkKey(req.ClientIP, a.p.IPv4PrefixBits, a.p.IPv6PrefixBits)
	deny := func(act PxAction, extra ...any) (PxDecision, error) {
		d := PxDecision{Action: act, HTTPStatus: pxStatus[act]}
		a.metrics.refused("pxstream", string(act))
		ev := map[string]any{"gate": "pxstream", "action": string(act), "status": d.HTTPStatus,
			"subject": req.Subject, "tenant": req.TenantID, "network": nk, "session": req.SessionID, "paid": req.Paid}
		for i := 0; i+1 < len(extra); i += 2 {
			ev[extra[i].(string)] = extra[i+1]
		}
		err := a.audit.Write(ev)
		return d, err
	}
	if a.watch != nil {
		if err := a.watch.ObserveMatch(ctx, req.Subject); err != nil {
			return PxDecision{}, err
		}
		sc, err := a.watch.Check(ctx, req.Subject, "match")
		if err != nil && !errors.Is(err, ErrAudit) {
			return PxDecision{}, err
		}
		if sc.Verdict == VerdictBan {
			return deny(PxRejectAbuse, "basisPoints", sc.BasisPoints)
		}
	}
	userCap := a.p.UserCap
	if req.Grant != nil && req.Grant.MaxSessions > userCap {
		userCap = req.Grant.MaxSessions
	}
	netCap := a.p.NetworkCap
	if req.InstitutionApproved || slices.Contains(a.p.ApprovedInstitutions, req.TenantID) {
		netCap = a.p.InstitutionNetworkCap
	}
	limits := []state.LeaseLimit{{Key: "px:user:" + req.Subject, Limit: userCap}, {Key: nk, Limit: netCap}}
	ttl := ms(a.p.LeaseTTLMs)
	blocked, err := a.leases.Acquire(ctx, req.SessionID, limits, ttl, now)
	if err != nil {
		return PxDecision{}, fmt.Errorf("%w: %w", ErrStateUnavailable, err)
	}
	switch blocked {
	case 0:
		return deny(PxRejectUserCap)
	case 1:
		return deny(PxRejectNetworkCap)
	}
	keys := []string{limits[0].Key, limits[1].Key}
	release := func() { _ = a.leases.Release(context.WithoutCancel(ctx), req.SessionID, keys) }
	if !req.Paid {
		used, err := a.budgets.Used(ctx, a.budgetKey(req.Subject, now), now)
		if err != nil {
			release()
			return PxDecision{}, fmt.Errorf("%w: %w", ErrStateUnavailable, err)
		}
		var act PxAction
		switch {
		case used >= a.p.FreeTierDailyMinutes:
			act = PxRejectBudget
		case req.WalkUp != nil:
			// The walk-up pool is one more lease key, so every edge counts
			// the same pool.
			wk := "px:walkup:" + req.WalkUp.Event
			blocked, err := a.leases.Acquire(ctx, req.SessionID, []state.LeaseLimit{{Key: wk, Limit: req.WalkUp.Slots}}, ttl, now)
			if err != nil {
				release()
				return PxDecision{}, fmt.Errorf("%w: %w", ErrStateUnavailable, err)
			}
			if blocked >= 0 {
				act = PxFallbackWalkUp
			} else {
				keys = append(keys, wk)
			}
		}
		if act == "" && req.Seat == nil && len(req.EligiblePopUtilBP) > 0 && !slices.ContainsFunc(req.EligiblePopUtilBP, func(u int) bool { return u < a.p.BackpressureBP }) {
			act = PxFallbackBackpressure
		}
		if act != "" {
			release()
			return deny(act)
		}
	}
	var seat Seat
	if req.Seat != nil {
		sfu := ""
		if a.seats != nil {
			var err error
			sfu, err = a.seats.Take(ctx, req.Seat.Event, req.SessionID, req.Seat.SFUs, ttl, now)
			if err != nil {
				release()
				return PxDecision{}, fmt.Errorf("%w: %w", ErrStateUnavailable, err)
			}
		}
		if sfu == "" {
			release()
			return deny(PxFallbackSeats, "event", req.Seat.Event)
		}
		seat = Seat{Event: req.Seat.Event, SFU: sfu}
	}
	return PxDecision{Action: PxAdmit, HTTPStatus: http.StatusOK,
		Lease: &Lease{leases: a.leases, seats: a.seats, holder: req.SessionID, keys: keys, seat: seat, ttl: ttl, now: a.now}}, nil
}

// RecordUsage adds streamed minutes to a free-tier user's daily budget
// and returns the day's total.
func (a *Admitter) RecordUsage(ctx context.Context, subject string, minutes int64) (int64, error) {
	now := a.now()
	n, err := a.budgets.Add(ctx, a.budgetKey(subject, now), minutes, 48*time.Hour, now)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrStateUnavailable, err)
	}
	return n, nil
}
