package edge

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/admission"
	"github.com/oshun/egbe-edge/signalling"
	"github.com/oshun/egbe-edge/signalling/matchmaker"
	"github.com/oshun/egbe-edge/state"
)

// sessionEnder ends a streaming session on the edge's authority (the
// signalling broker).
type sessionEnder interface {
	EndSession(sessionID, reason string) bool
}

// pxAdmission adapts Pixel Streaming admission to the matchmaker's seam and
// follows each admitted session through the broker's hooks for as long as
// it lives: it holds the concurrency lease (refreshed while a player
// streams), charges the free tier's minutes per started minute of
// streaming and ends the session when the day's budget is used up,
// watches for bans, and measures session starts and cold joins.
//
// A session's facts live in a shared record (state.KV, pxsess:<id>), so
// the edge where its player streams — in a fleet, the streamer's edge,
// where the broker's hooks fire — takes it over from the edge that made
// the match: that edge is its owner from then on.
type pxAdmission struct {
	a      *admission.Admitter   // immutable after New
	room   *admission.Room       // immutable after New
	events *admission.Events     // immutable after New; nil: no events file
	watch  *admission.AbuseWatch // immutable after New
	meter  *admission.Meter      // immutable after New
	m      *admission.Metrics    // immutable after New
	kv     state.KV              // immutable after New
	seats  state.Seats           // immutable after New: concert seats (the dashboard reads them)
	now    func() time.Time      // immutable after New
	edge   string                // immutable after New: this edge's name
	ttl    time.Duration         // immutable after New: the admission lease TTL
	every  time.Duration         // immutable after New: refresh and charge interval
	log    *slog.Logger          // immutable after New
	ender  sessionEnder          // set once by buildPxstream before Run
	grace  time.Duration         // set once by buildPxstream before Run: the broker's LeaseGrace

	mu       sync.Mutex
	sessions map[string]*pxSession // guarded by mu: by Pixel Streaming session id
}

// pxRecord is a session's shared record.
type pxRecord struct {
	Subject   string   `json:"sub"`
	Paid      bool     `json:"paid"`
	POP       string   `json:"pop,omitempty"`
	Holder    string   `json:"holder"`
	Keys      []string `json:"keys"`
	MatchedAt int64    `json:"matchedAt"` // Unix ms
	Until     int64    `json:"until"`     // Unix ms: the session token's expiry
	Owner     string   `json:"owner"`     // the edge keeping it
	LiveMs    int64    `json:"liveMs"`    // streamed time accounted
	Charged   int64    `json:"charged"`   // free minutes charged
	Started   bool     `json:"started"`   // its start was counted (either way)
	// Seat is the concert seat the lease holds (zero: a whole streamer).
	Seat admission.Seat `json:"seat,omitzero"`
}

// pxSession is a session this edge keeps.
type pxSession struct {
	rec   pxRecord
	lease *admission.Lease
	hold  time.Time // keep the lease until then without a player (connect, reconnect grace)
	live  bool      // a player is subscribed here
	mark  time.Time // live: streamed time is accounted up to here
	ended bool      // ended by the edge (budget, ban): the lease goes
}

// pxRecordTTL outlives any session token and the reconnect grace; the
// owner rewrites the record every round while it keeps the session.
const pxRecordTTL = 20 * time.Minute

func (p *pxAdmission) recordKey(sid string) string { return "pxsess:" + sid }

func (p *pxAdmission) save(ctx context.Context, sid string, rec pxRecord) {
	b, _ := json.Marshal(rec)
	if err := p.kv.Put(ctx, p.recordKey(sid), b, pxRecordTTL); err != nil {
		p.log.Warn("pxstream session record", "session", sid, "err", err)
	}
}

func (p *pxAdmission) load(ctx context.Context, sid string) (pxRecord, bool) {
	var rec pxRecord
	b, err := p.kv.Get(ctx, p.recordKey(sid))
	if err != nil || json.Unmarshal(b, &rec) != nil {
		return rec, false
	}
	return rec, true
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
	rec := pxRecord{Subject: subject, Paid: req.Paid, Holder: d.Lease.Holder(), Keys: d.Lease.Keys(),
		MatchedAt: now.UnixMilli(), Owner: p.edge, Seat: d.Lease.Seat()}
	if seat := d.Lease.Seat(); seat.SFU != "" {
		dec.Seat = &matchmaker.Seat{Event: seat.Event, POP: ev.POP, SFU: seat.SFU, Codec: ev.Concert.Codec}
	}
	dec.Matched = func(m matchmaker.Match) {
		rec.POP, rec.Until = m.POP, m.ExpiresAt.UnixMilli()
		p.mu.Lock()
		// Until the match's session token lapses, the lease is held for the
		// player to connect; after that only while a player streams.
		p.sessions[m.SessionID] = &pxSession{rec: rec, lease: d.Lease, hold: m.ExpiresAt}
		p.mu.Unlock()
		p.save(context.WithoutCancel(ctx), m.SessionID, rec)
	}
	dec.Release = func() { _ = d.Lease.Release(context.WithoutCancel(ctx)) }
	return dec, nil
}

// take returns the session sid, taking it over from its shared record
// when another edge made the match. Caller holds p.mu.
func (p *pxAdmission) takeLocked(ctx context.Context, sid string) *pxSession {
	if s := p.sessions[sid]; s != nil {
		return s
	}
	p.mu.Unlock()
	rec, ok := p.load(ctx, sid)
	p.mu.Lock()
	if s := p.sessions[sid]; s != nil {
		return s
	}
	if !ok {
		return nil
	}
	rec.Owner = p.edge
	s := &pxSession{rec: rec, lease: p.a.Lease(rec.Holder, rec.Keys, rec.Seat), hold: time.UnixMilli(rec.Until)}
	p.sessions[sid] = s
	return s
}

// OnPlayerSubscribed: the session streams here from now on.
func (p *pxAdmission) OnPlayerSubscribed(sid, _ string) {
	ctx := context.Background()
	p.mu.Lock()
	s := p.takeLocked(ctx, sid)
	if s == nil || s.ended {
		p.mu.Unlock()
		return
	}
	if !s.live {
		s.live, s.mark = true, p.now()
	}
	s.rec.Owner = p.edge
	rec := s.rec
	p.mu.Unlock()
	p.save(ctx, sid, rec)
}

// OnPlayerLeft: streamed time stops; the lease is kept for the reconnect
// grace.
func (p *pxAdmission) OnPlayerLeft(sid string) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.sessions[sid]
	if s == nil {
		return
	}
	if s.live {
		s.rec.LiveMs += now.Sub(s.mark).Milliseconds()
		s.live = false
	}
	// The lease is kept for the frontend to come back as long as the
	// broker keeps the streamer's (signalling's LeaseGrace).
	s.hold = now.Add(p.grace)
}

// CheckOffer runs after the matchmaker's codec check passed: the
// streamer's offer reaches the player, which is the session's start.
func (p *pxAdmission) CheckOffer(sid, _, _ string) error {
	ctx := context.Background()
	now := p.now()
	p.mu.Lock()
	s := p.takeLocked(ctx, sid)
	if s == nil || s.rec.Started {
		p.mu.Unlock()
		return nil
	}
	s.rec.Started = true
	rec := s.rec
	p.mu.Unlock()
	p.meter.Start(rec.POP, true)
	p.meter.ColdJoin(rec.POP, now.Sub(time.UnixMilli(rec.MatchedAt)))
	p.save(ctx, sid, rec)
	return nil
}

// input takes a UE worker's input report about a player: it feeds the
// abuse classifier, and a ban ends the subject's sessions here (other
// edges end theirs on their next round).
func (p *pxAdmission) input(sid, subject string, r signalling.InputReport) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if subject == "" {
		return
	}
	if err := p.watch.ObserveInput(ctx, subject, admission.InputReport(r)); err != nil {
		p.log.Warn("abuse signals", "session", sid, "err", err)
		return
	}
	sc, err := p.watch.Check(ctx, subject, "input")
	if err != nil && !errors.Is(err, admission.ErrAudit) {
		p.log.Warn("abuse check", "session", sid, "err", err)
		return
	}
	if sc.Verdict == admission.VerdictBan {
		p.endSubject(subject, signalling.EndBanned)
	}
}

// endSubject ends every session of subject this edge keeps.
func (p *pxAdmission) endSubject(subject, reason string) {
	p.mu.Lock()
	var sids []string
	for sid, s := range p.sessions {
		if s.rec.Subject == subject && !s.ended {
			s.ended = true
			sids = append(sids, sid)
		}
	}
	p.mu.Unlock()
	for _, sid := range sids {
		p.end(sid, reason)
	}
}

// end asks the broker to end sid and drops its lease.
func (p *pxAdmission) end(sid, reason string) {
	if p.ender != nil {
		p.ender.EndSession(sid, reason)
	}
	p.log.Info("pxstream session ended by the edge", "session", sid, "reason", reason)
	p.release(sid)
}

func (p *pxAdmission) release(sid string) {
	p.mu.Lock()
	s := p.sessions[sid]
	delete(p.sessions, sid)
	p.mu.Unlock()
	if s != nil && s.lease != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.lease.Release(ctx)
		cancel()
	}
}

// run is the sessions' round, every p.every until ctx ends.
func (p *pxAdmission) run(ctx context.Context) error {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.round(ctx)
		}
	}
}

// round accounts streamed time, charges free minutes (a started minute is
// a charged minute) and ends a session whose day is used up or whose
// subject is banned; it refreshes the leases of live sessions and of those
// still waiting for their player, and lets the rest go (counting a session
// that never started as a failed start).
func (p *pxAdmission) round(ctx context.Context) {
	now := p.now()
	type work struct {
		sid   string
		s     *pxSession
		due   int64
		rec   pxRecord
		drop  bool
		fail  bool
		check bool
	}
	var todo []work
	p.mu.Lock()
	for sid, s := range p.sessions {
		if s.ended {
			continue
		}
		w := work{sid: sid, s: s}
		if s.live {
			s.rec.LiveMs += now.Sub(s.mark).Milliseconds()
			s.mark = now
			if !s.rec.Paid {
				if due := (s.rec.LiveMs+59_999)/60_000 - s.rec.Charged; due > 0 {
					w.due = due
					s.rec.Charged += due
				}
			}
			w.check = true
		} else if !now.Before(s.hold) {
			w.drop = true
			if !s.rec.Started {
				s.rec.Started = true
				w.fail = true
			}
		}
		w.rec = s.rec
		todo = append(todo, w)
	}
	p.mu.Unlock()
	for _, w := range todo {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		switch {
		case w.drop:
			if w.fail {
				p.meter.Start(w.rec.POP, false)
			}
			// Another edge may have taken the session over (its player
			// streams there): it is that edge's to end.
			if rec, ok := p.load(rctx, w.sid); ok && rec.Owner != p.edge {
				p.mu.Lock()
				delete(p.sessions, w.sid)
				p.mu.Unlock()
			} else {
				p.release(w.sid)
			}
		default:
			ended := false
			if w.due > 0 {
				total, err := p.a.RecordUsage(rctx, w.rec.Subject, w.due)
				if err != nil {
					p.log.Warn("free-tier minutes", "session", w.sid, "err", err)
				} else if total >= p.a.FreeMinutes() {
					p.markEnded(w.sid)
					p.end(w.sid, signalling.EndBudget)
					ended = true
				}
			}
			if !ended && w.check {
				if banned, err := p.watch.Banned(rctx, w.rec.Subject); err == nil && banned {
					p.markEnded(w.sid)
					p.end(w.sid, signalling.EndBanned)
					ended = true
				}
			}
			if !ended {
				_ = w.s.lease.Refresh(rctx) // a failed refresh lets the lease lapse: fail-safe for caps
				p.save(rctx, w.sid, w.rec)
			}
		}
		cancel()
	}
}

func (p *pxAdmission) markEnded(sid string) {
	p.mu.Lock()
	if s := p.sessions[sid]; s != nil {
		s.ended = true
	}
	p.mu.Unlock()
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
