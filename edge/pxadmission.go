package edge

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/oshun/egbe-edge/admission"
	"github.com/oshun/egbe-edge/signalling"
	"github.com/oshun/egbe-edge/signalling/matchmaker"
	"github.com/oshun/egbe-edge/state"
)

// pxAdmission adapts Pixel Streaming admission to the matchmaker's seam
// (the waiting room, then admission.Admitter with what the events file
// says) and hands each admitted session to admission.PxSessions, which
// keeps its lease, charges its minutes and ends it; the broker's hooks
// and input reports are passed on to it.
type pxAdmission struct {
	a        *admission.Admitter   // immutable after New
	room     *admission.Room       // immutable after New
	events   *admission.Events     // immutable after New; nil: no events file
	m        *admission.Metrics    // immutable after New
	seats    state.Seats           // immutable after New: concert seats (the dashboard reads them)
	sessions *admission.PxSessions // immutable after New: the admitted sessions' lifecycle
	now      func() time.Time      // immutable after New
}

var _ matchmaker.Admitter = (*pxAdmission)(nil)

// roomRefusal maps the waiting room's verdict to a match refusal.
func roomRefusal(err error) (*matchmaker.Refusal, error) {
	switch {
	case errors.Is(err, admission.ErrTicketRequired):
		return &matchmaker.Refusal{Reason: "admission_ticket_required", Status: http.StatusTooManyRequests, RetryAfter: 5 * time.Second,
			Message: "the waiting room is armed: join /api/v1/queue/join and present the admission ticket in X-Egbe-Admission"}, nil
	case errors.Is(err, admission.ErrBadRequest):
		return &matchmaker.Refusal{Reason: "admission_denied", Status: http.StatusForbidden,
			Message: "admission ticket refused (forged, foreign, used elsewhere or lapsed): join /api/v1/queue/join"}, nil
	case errors.Is(err, admission.ErrRoomLost):
		return &matchmaker.Refusal{Reason: "waiting_room_state_lost", Status: http.StatusServiceUnavailable, RetryAfter: 30 * time.Second,
			Message: "waiting-room state lost: admissions stay closed until an operator re-arms the room"}, nil
	}
	return nil, err
}

// Admit runs the waiting room (as on launch), then admission (abuse
// first, caps, budget, walk-up pool, backpressure), with what the events
// file says of this subject and request.
func (p *pxAdmission) Admit(ctx context.Context, r matchmaker.Request) (matchmaker.Decision, error) {
	pass, err := p.room.Check(ctx, r.Access, r.ClientRegion, r.AdmissionTicket, r.ResumeToken)
	if err != nil {
		rf, err := roomRefusal(err)
		if rf != nil {
			return matchmaker.Decision{Refusal: rf}, nil
		}
		return matchmaker.Decision{}, err
	}
	subject := r.Subject
	if subject == "" {
		// Anonymous dev requests still count against the network cap.
		subject = "anon:" + r.SessionID
	}
	now := p.now()
	booked := p.events.Booked(subject, now)
	req := admission.PxRequest{SessionID: r.SessionID, Subject: subject, TenantID: r.TenantID, ClientIP: r.RemoteAddr,
		Paid: r.Entitlement == matchmaker.EntitlementPaid || booked != nil, Grant: p.events.Grant(subject),
		InstitutionApproved: p.events.InstitutionApproved(r.RemoteAddr), EligiblePopUtilBP: r.EligiblePOPUtilBP}
	dec := matchmaker.Decision{HeldBack: p.events.HeldBack(subject, now)}
	ev := p.events.Running(r.EventID, now)
	if ev != nil {
		dec.PriorityBoost = map[string]int{ev.POP: ev.Priority}
		if booked == nil || booked.ID != ev.ID {
			req.WalkUp = &admission.WalkUp{Event: ev.ID, Slots: ev.WalkUpSlots}
		}
		if ev.Concert != nil {
			// An SFU-fronted concert: a seat on one of its SFUs, not a
			// whole streamer.
			req.Seat = &admission.SeatPool{Event: ev.ID, SFUs: ev.Concert.SeatLimits()}
		}
	}
	d, err := p.a.Admit(ctx, req)
	if d.Action != "" && d.Action != admission.PxAdmit {
		if d.Action == admission.PxFallbackBackpressure && pass.Armed {
			// The room let this user in towards a region that bounces it.
			p.m.AdmitIntoBackpressure(pass.Region, "match")
		}
		return matchmaker.Decision{Refusal: &matchmaker.Refusal{Reason: matchmaker.Reason(d.Action), Status: d.HTTPStatus,
			Message: "pixel streaming admission: " + string(d.Action)}}, nil
	}
	if err != nil {
		return matchmaker.Decision{}, err
	}
	if err := pass.Spend(ctx); err != nil {
		_ = d.Lease.Release(context.WithoutCancel(ctx))
		rf, err := roomRefusal(err)
		if rf != nil {
			return matchmaker.Decision{Refusal: rf}, nil
		}
		return matchmaker.Decision{}, err
	}
	if depth, _ := p.room.Lines(); len(depth) > 0 {
		dec.Queued = make(map[string]int, len(depth))
		for region, n := range depth {
			dec.Queued[region] = int(n) // waiting-room regions are POP ids
		}
	}
	if st := d.Lease.Seat(); st.SFU != "" {
		dec.Seat = &matchmaker.Seat{Event: st.Event, POP: ev.POP, SFU: st.SFU, Codec: ev.Concert.Codec}
	}
	dec.Matched = func(m matchmaker.Match) {
		p.sessions.Admitted(ctx, m.SessionID, admission.PxAdmitted{Subject: subject, Paid: req.Paid, POP: m.POP,
			Lease: d.Lease, MatchedAt: now, Until: m.ExpiresAt})
	}
	dec.Release = func() { _ = d.Lease.Release(context.WithoutCancel(ctx)) }
	return dec, nil
}

// OnPlayerSubscribed: the session streams here from now on.
func (p *pxAdmission) OnPlayerSubscribed(sid, _ string) { p.sessions.Subscribed(sid) }

// OnPlayerLeft: streamed time stops; the lease is kept for the reconnect
// grace.
func (p *pxAdmission) OnPlayerLeft(sid string) { p.sessions.Left(sid) }

// CheckOffer runs after the matchmaker's codec check passed: the
// streamer's offer reaches the player, which is the session's start.
func (p *pxAdmission) CheckOffer(sid, _, _ string) error {
	p.sessions.Offered(sid)
	return nil
}

// input passes a UE worker's input report about a player to the sessions
// (the abuse classifier; a ban ends the subject's sessions).
func (p *pxAdmission) input(sid, subject string, r signalling.InputReport) {
	p.sessions.Input(sid, subject, admission.InputReport(r))
}

// brokerEnder ends sessions through the broker with its reason codes.
type brokerEnder struct{ srv *signalling.Server }

func (b brokerEnder) EndSession(sid, reason string) bool {
	switch reason {
	case admission.PxEndBudget:
		reason = signalling.EndBudget
	case admission.PxEndBanned:
		reason = signalling.EndBanned
	}
	return b.srv.EndSession(sid, reason)
}

var _ matchmaker.SeatBoard = (*pxAdmission)(nil)

// Concerts implements matchmaker.SeatBoard: every concert of the events
// file with its seats per SFU, read from the fleet's seat store.
func (p *pxAdmission) Concerts(ctx context.Context) ([]matchmaker.DashboardConcert, error) {
	if p.events == nil {
		return nil, nil
	}
	now := p.now()
	var out []matchmaker.DashboardConcert
	var errs []error
	for i := range p.events.Events {
		ev := &p.events.Events[i]
		if ev.Concert == nil {
			continue
		}
		ids := make([]string, len(ev.Concert.SFUs))
		for j, f := range ev.Concert.SFUs {
			ids[j] = f.ID
		}
		used, err := p.seats.Used(ctx, ev.ID, ids, now)
		if err != nil {
			errs = append(errs, err)
		}
		c := matchmaker.DashboardConcert{EventID: ev.ID, POP: ev.POP, Codec: ev.Concert.Codec,
			Running: p.events.Running(ev.ID, now) != nil, SFUs: make([]matchmaker.DashboardConcertSFU, len(ids))}
		for j, f := range ev.Concert.SFUs {
			c.SFUs[j] = matchmaker.DashboardConcertSFU{ID: f.ID, Used: used[f.ID], Capacity: f.Seats}
			c.Used += used[f.ID]
			c.Capacity += f.Seats
		}
		out = append(out, c)
	}
	return out, errors.Join(errs...)
}
