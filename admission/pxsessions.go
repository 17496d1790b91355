package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// Why the edge ends a Pixel Streaming session (the broker's
// egbe.session.ended reasons).
const (
	PxEndBudget = "budget" // the free tier's minutes of the day are used up
	PxEndBanned = "banned" // the abuse classifier banned the subject
)

// SessionEnder ends a streaming session on the edge's authority (the
// signalling broker).
type SessionEnder interface {
	EndSession(sessionID, reason string) bool
}

// PxSessions follows each admitted Pixel Streaming session for as long as
// it lives: it holds the session's admission lease (caps, walk-up slot,
// concert seat) — for the player to connect until the session token
// lapses, while a player streams, and for the reconnect grace after it
// leaves — charges the free tier's minutes per started minute of
// streaming and ends the session when the day's budget is used up,
// watches for bans, and measures session starts and cold joins.
//
// A session's facts live in a shared record (state.KV, pxsess:<id>), so
// the edge where its player streams — in a fleet, the streamer's edge,
// where the broker's events arrive — takes it over from the edge that
// admitted it: that edge is its owner from then on.
type PxSessions struct {
	a     *Admitter        // immutable after New
	watch *AbuseWatch      // immutable after New
	meter *Meter           // immutable after New
	kv    state.KV         // immutable after New
	now   func() time.Time // immutable after New
	cfg   PxSessionsConfig // immutable after New
	log   *slog.Logger     // immutable after New

	mu       sync.Mutex
	ender    SessionEnder          // guarded by mu; nil until SetEnder
	sessions map[string]*pxSession // guarded by mu: by Pixel Streaming session id
}

// PxSessionsConfig configures PxSessions.
type PxSessionsConfig struct {
	// Edge is this edge's name (the record's owner).
	Edge string
	// Every is the round: streamed time accounted, minutes charged,
	// leases refreshed (well within the lease TTL).
	Every time.Duration
	// Grace is how long a session whose player left keeps its lease for
	// the frontend to come back: the broker's own lease grace
	// (signalling's LeaseGrace), so both let go together.
	Grace time.Duration
}

// PxSessionsDeps are PxSessions' collaborators.
type PxSessionsDeps struct {
	Admitter *Admitter   // required: leases, minutes
	Watch    *AbuseWatch // required: bans
	Meter    *Meter      // required: starts, cold joins
	KV       state.KV    // required: the shared records
	Now      func() time.Time
	Logger   *slog.Logger
}

// NewPxSessions returns an empty PxSessions.
func NewPxSessions(cfg PxSessionsConfig, d PxSessionsDeps) (*PxSessions, error) {
	if d.Admitter == nil || d.Watch == nil || d.Meter == nil || d.KV == nil {
		return nil, fmt.Errorf("%w: pxstream sessions need an admitter, an abuse watch, a meter and a KV", ErrBadRequest)
	}
	if cfg.Every <= 0 || cfg.Grace < 0 {
		return nil, fmt.Errorf("%w: pxstream sessions: round %v, grace %v", ErrBadRequest, cfg.Every, cfg.Grace)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	return &PxSessions{a: d.Admitter, watch: d.Watch, meter: d.Meter, kv: d.KV, now: d.Now, cfg: cfg,
		log: d.Logger, sessions: map[string]*pxSession{}}, nil
}

// SetEnder names who ends sessions (the broker, built after admission).
func (p *PxSessions) SetEnder(e SessionEnder) {
	p.mu.Lock()
	p.ender = e
	p.mu.Unlock()
}

// Grace is the reconnect grace.
func (p *PxSessions) Grace() time.Duration { return p.cfg.Grace }

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
	Seat Seat `json:"seat,omitzero"`
}

// pxSession is a session this edge keeps.
type pxSession struct {
	rec   pxRecord
	lease *Lease
	hold  time.Time // keep the lease until then without a player (connect, reconnect grace)
	live  bool      // a player is subscribed here
	mark  time.Time // live: streamed time is accounted up to here
	ended bool      // ended by the edge (budget, ban): the lease goes
}

// pxRecordTTL outlives any session token and the reconnect grace; the
// owner rewrites the record every round while it keeps the session.
const pxRecordTTL = 20 * time.Minute

func recordKey(sid string) string { return "pxsess:" + sid }

func (p *PxSessions) save(ctx context.Context, sid string, rec pxRecord) {
	b, _ := json.Marshal(rec)
	if err := p.kv.Put(ctx, recordKey(sid), b, pxRecordTTL); err != nil {
		p.log.Warn("pxstream session record", "session", sid, "err", err)
	}
}

func (p *PxSessions) load(ctx context.Context, sid string) (pxRecord, bool) {
	var rec pxRecord
	b, err := p.kv.Get(ctx, recordKey(sid))
	if err != nil || json.Unmarshal(b, &rec) != nil {
		return rec, false
	}
	return rec, true
}

// PxAdmitted is a session the match admitted and answered.
type PxAdmitted struct {
	Subject   string
	Paid      bool
	POP       string
	Lease     *Lease    // the admission lease (caps, walk-up slot, seat)
	MatchedAt time.Time // when admission ran
	Until     time.Time // the session token's expiry
}

// Admitted starts following session sid: until its token lapses the
// lease is held for the player to connect; after that only while a player
// streams (and for the grace after it leaves).
func (p *PxSessions) Admitted(ctx context.Context, sid string, s PxAdmitted) {
	rec := pxRecord{Subject: s.Subject, Paid: s.Paid, POP: s.POP, Holder: s.Lease.Holder(), Keys: s.Lease.Keys(),
		Seat: s.Lease.Seat(), MatchedAt: s.MatchedAt.UnixMilli(), Until: s.Until.UnixMilli(), Owner: p.cfg.Edge}
	p.mu.Lock()
	p.sessions[sid] = &pxSession{rec: rec, lease: s.Lease, hold: s.Until}
	p.mu.Unlock()
	p.save(context.WithoutCancel(ctx), sid, rec)
}

// takeLocked returns the session sid, taking it over from its shared
// record when another edge admitted it. Caller holds p.mu.
func (p *PxSessions) takeLocked(ctx context.Context, sid string) *pxSession {
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
	rec.Owner = p.cfg.Edge
	s := &pxSession{rec: rec, lease: p.a.Lease(rec.Holder, rec.Keys, rec.Seat), hold: time.UnixMilli(rec.Until)}
	p.sessions[sid] = s
	return s
}

// Subscribed: a player of sid subscribed here; the session streams here
// from now on.
func (p *PxSessions) Subscribed(sid string) {
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
	s.rec.Owner = p.cfg.Edge
	rec := s.rec
	p.mu.Unlock()
	p.save(ctx, sid, rec)
}

// Left: sid's player left; streamed time stops and the lease is kept for
// the reconnect grace.
func (p *PxSessions) Left(sid string) {
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
	s.hold = now.Add(p.cfg.Grace)
}

// Offered: the streamer's offer reached sid's player, which is the
// session's start (and the end of its cold join).
func (p *PxSessions) Offered(sid string) {
	ctx := context.Background()
	now := p.now()
	p.mu.Lock()
	s := p.takeLocked(ctx, sid)
	if s == nil || s.rec.Started {
		p.mu.Unlock()
		return
	}
	s.rec.Started = true
	rec := s.rec
	p.mu.Unlock()
	p.meter.Start(rec.POP, true)
	p.meter.ColdJoin(rec.POP, now.Sub(time.UnixMilli(rec.MatchedAt)))
	p.save(ctx, sid, rec)
}

// Input takes a UE worker's input report about sid's player (subject): it
// feeds the abuse classifier, and a ban ends the subject's sessions here
// (other edges end theirs on their next round).
func (p *PxSessions) Input(sid, subject string, r InputReport) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if subject == "" {
		return
	}
	if err := p.watch.ObserveInput(ctx, subject, r); err != nil {
		p.log.Warn("abuse signals", "session", sid, "err", err)
		return
	}
	sc, err := p.watch.Check(ctx, subject, "input")
	if err != nil && !errors.Is(err, ErrAudit) {
		p.log.Warn("abuse check", "session", sid, "err", err)
		return
	}
	if sc.Verdict == VerdictBan {
		p.endSubject(subject, PxEndBanned)
	}
}

// endSubject ends every session of subject this edge keeps.
func (p *PxSessions) endSubject(subject, reason string) {
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
func (p *PxSessions) end(sid, reason string) {
	p.mu.Lock()
	ender := p.ender
	p.mu.Unlock()
	if ender != nil {
		ender.EndSession(sid, reason)
	}
	p.log.Info("pxstream session ended by the edge", "session", sid, "reason", reason)
	p.Release(sid)
}

// Release stops following sid and returns its lease (and seat) now.
func (p *PxSessions) Release(sid string) {
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

// kept reports whether this edge keeps sid now.
func (p *PxSessions) kept(sid string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.sessions[sid]
	return ok
}

// Run is the sessions' round, every Config.Every until ctx ends.
func (p *PxSessions) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.Round(ctx)
		}
	}
}

// Round accounts streamed time, charges free minutes (a started minute is
// a charged minute) and ends a session whose day is used up or whose
// subject is banned; it refreshes the leases of live sessions and of those
// still waiting for their player, and lets the rest go (counting a session
// that never started as a failed start).
func (p *PxSessions) Round(ctx context.Context) {
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
			if rec, ok := p.load(rctx, w.sid); ok && rec.Owner != p.cfg.Edge {
				p.mu.Lock()
				delete(p.sessions, w.sid)
				p.mu.Unlock()
			} else {
				p.Release(w.sid)
			}
		default:
			ended := false
			if w.due > 0 {
				total, err := p.a.RecordUsage(rctx, w.rec.Subject, w.due)
				if err != nil {
					p.log.Warn("free-tier minutes", "session", w.sid, "err", err)
				} else if total >= p.a.FreeMinutes() {
					p.markEnded(w.sid)
					p.end(w.sid, PxEndBudget)
					ended = true
				}
			}
			if !ended && w.check {
				if banned, err := p.watch.Banned(rctx, w.rec.Subject); err == nil && banned {
					p.markEnded(w.sid)
					p.end(w.sid, PxEndBanned)
					ended = true
				}
			}
			if !ended {
				_ = w.s.lease.Refresh(rctx) // a failed refresh lets the lease lapse: fail-safe for caps
				if w.check {
					// Only the edge where the player streams writes the
					// record: a session still waiting here for its player
					// must not take the record back from the edge that
					// took it over (it would then release the lease that
					// edge keeps).
					p.save(rctx, w.sid, w.rec)
				}
			}
		}
		cancel()
	}
}

func (p *PxSessions) markEnded(sid string) {
	p.mu.Lock()
	if s := p.sessions[sid]; s != nil {
		s.ended = true
	}
	p.mu.Unlock()
}
