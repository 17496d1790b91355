package admission

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/state"
)

// FleetUtilisation reads a POP region's utilisation (basis points) from the
// live fleet. ok=false means no signal; the room then treats the region as
// frozen when the room is armed (fail closed).
type FleetUtilisation interface {
	RegionUtilisationBP(popRegion string) (bp int, ok bool)
}

// DownstreamHealth is the admit rate downstream can take: the largest rate
// at which cold-join p95 stays <= 5 s and session-start success >= 99.5 %
// over the trailing 10 minutes. ok=false means no clamp.
type DownstreamHealth interface {
	AdmitCeilingPerMinute() (perMinute float64, ok bool)
}

// PrewarmOracle says whether a subject is a booked attendee inside a paid
// event's pre-warm window (a bypass lane).
type PrewarmOracle interface {
	InPrewarmWindow(subject string, now time.Time) bool
}

// Bypass lanes (never queued).
const (
	BypassResume   = "resume"
	BypassPrewarm  = "paid-prewarm"
	BypassOperator = "operator"
	BypassRole     = "role"
)

// RoomDeps are the room's collaborators. Queue and Signer are required.
type RoomDeps struct {
	Queue       state.Queue
	Signer      *auth.Signer
	Utilisation FleetUtilisation // nil: every region reads 0 %
	Health      DownstreamHealth // nil: no clamp
	Prewarm     PrewarmOracle    // nil: no pre-warm lane
	Audit       *Auditor         // nil: discard
	Now         func() time.Time // nil: time.Now
	Metrics     *Metrics
	Logger      *slog.Logger // nil: slog.Default
}

// Room is the virtual waiting room.
type Room struct {
	p     *RoomPolicy // immutable after New
	d     RoomDeps    // immutable after New
	roles []string    // bypass roles; immutable after New

	mu       sync.Mutex // guards the meta cache and the last observed lines
	meta     state.Meta
	metaErr  error
	metaAt   time.Time
	metaSeen bool
	lines    map[string]line // POP region -> its line as last observed here
}

// line is a region's queue as a join or poll last answered it (the Redis
// script reads the fleet's state, so this is the fleet's line, as of then).
type line struct {
	depth, drainPerMin int64
	medianWaitSec      float64 // -1: nothing drains
	at                 time.Time
}

// NewRoom returns a Room.
func NewRoom(p *Policy, d RoomDeps) (*Room, error) {
	if d.Queue == nil || d.Signer == nil {
		return nil, errors.New("admission: room needs a queue and a signer")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Audit == nil {
		d.Audit = NewAuditor(nil, d.Now)
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	d.Logger = d.Logger.With("component", "waiting-room")
	return &Room{p: &p.WaitingRoom, d: d, roles: p.Realtime.BypassRoles, lines: map[string]line{}}, nil
}

// lineStale: a region's line not observed for this long reads as empty.
const lineStale = 2 * time.Minute

// observe records region's line from an answer.
func (r *Room) observe(region string, depth, drainPerMin int64) float64 {
	wait := 0.0
	switch {
	case depth == 0:
	case drainPerMin > 0:
		wait = math.Ceil(float64(depth) / 2 / float64(drainPerMin) * 60)
	default:
		wait = -1
	}
	r.mu.Lock()
	r.lines[region] = line{depth: depth, drainPerMin: drainPerMin, medianWaitSec: wait, at: r.d.Now()}
	r.mu.Unlock()
	return wait
}

// drained is the fleet's admits per minute as last observed (the sum of
// the regions' measured drain rates).
func (r *Room) drained() float64 {
	now := r.d.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var n float64
	for _, l := range r.lines {
		if now.Sub(l.at) <= lineStale {
			n += float64(l.drainPerMin)
		}
	}
	return n
}

// Lines is every region's queue as last observed by this edge within the
// last two minutes: depth (users in line) and the median wait in seconds
// (half the depth over the measured drain; -1 when nothing drains).
func (r *Room) Lines() (depth map[string]int64, medianWaitSec map[string]float64) {
	now := r.d.Now()
	depth, medianWaitSec = map[string]int64{}, map[string]float64{}
	r.mu.Lock()
	defer r.mu.Unlock()
	for reg, l := range r.lines {
		if now.Sub(l.at) > lineStale || l.depth == 0 {
			continue
		}
		depth[reg], medianWaitSec[reg] = l.depth, l.medianWaitSec
	}
	return depth, medianWaitSec
}

// PopRegion maps a client region to its waiting-room (POP) region.
func (r *Room) PopRegion(clientRegion string) string {
	if reg, ok := r.p.ClientRegions[clientRegion]; ok {
		return reg
	}
	if _, ok := r.p.Regions[clientRegion]; ok {
		return clientRegion
	}
	return r.p.DefaultRegion
}

// Ladder is the utilisation ladder's effect on one region.
type Ladder struct {
	RateFactor      float64 // 1 below 75 %, 0.5 from 75 %
	PxstreamAllowed bool    // false from 85 %
	Frozen          bool    // true from 90 %
	FallbackFirst   bool    // offer the Tier-2 fallback first (from 75 %)
}

// LadderFor applies the utilisation ladder to bp.
func (p *RoomPolicy) LadderFor(bp int) Ladder {
	switch {
	case bp >= p.FreezeAtBP:
		return Ladder{RateFactor: 0, Frozen: true, FallbackFirst: true}
	case bp >= p.PxstreamStopAtBP:
		return Ladder{RateFactor: 0.5, FallbackFirst: true}
	case bp >= p.HalfRateAtBP:
		return Ladder{RateFactor: 0.5, PxstreamAllowed: true, FallbackFirst: true}
	}
	return Ladder{RateFactor: 1, PxstreamAllowed: true}
}

// Rates are the effective ceilings for popRegion now: the bucket table,
// times the ladder, clamped to downstream health.
func (r *Room) Rates(popRegion string) (state.Rates, Ladder) {
	g := r.p.Global
	rb, ok := r.p.Regions[popRegion]
	if !ok {
		rb = r.p.Regions[r.p.DefaultRegion]
	}
	// No utilisation signal for an armed region reads as >= 85 %: no
	// pixel-stream admits, web joins at half rate (never admit into a
	// backpressure we cannot see).
	lad := r.p.LadderFor(r.p.PxstreamStopAtBP)
	if r.d.Utilisation != nil {
		if bp, ok := r.d.Utilisation.RegionUtilisationBP(popRegion); ok {
			lad = r.p.LadderFor(bp)
		}
	} else {
		lad = r.p.LadderFor(0)
	}
	share := rb.PerMinute / g.PerMinute
	gRate := g.PerMinute
	if r.d.Health != nil {
		if ceil, ok := r.d.Health.AdmitCeilingPerMinute(); ok && ceil >= 0 {
			gRate = math.Min(gRate, ceil)
		}
	}
	rRate := math.Min(rb.PerMinute, gRate*share) * lad.RateFactor
	rBurst := rb.Burst
	if lad.RateFactor < 1 {
		rBurst = math.Max(1, rb.Burst*lad.RateFactor)
	}
	return state.Rates{
		GlobalPerMin: gRate, GlobalBurst: g.Burst,
		RegionPerMin: rRate, RegionBurst: rBurst,
		PxstreamAllowed: lad.PxstreamAllowed, Frozen: lad.Frozen,
		JoinWindow: ms(r.p.JoinWindowMs), KeepPlace: ms(r.p.KeepPlaceMs),
		TicketTTL: ms(r.p.TicketTTLMs), MaxAdmits: r.p.MaxAdmitsPerDrain,
	}, lad
}

// Meta is the room's control state, cached for policy metaCacheMs.
func (r *Room) Meta(ctx context.Context) (state.Meta, error) {
	now := r.d.Now()
	r.mu.Lock()
	if r.metaSeen && now.Sub(r.metaAt) < ms(r.p.MetaCacheMs) && now.Sub(r.metaAt) >= 0 {
		m, err := r.meta, r.metaErr
		r.mu.Unlock()
		return m, err
	}
	r.mu.Unlock()
	m, err := r.d.Queue.Meta(ctx)
	err = mapStateErr(err)
	r.mu.Lock()
	r.meta, r.metaErr, r.metaAt, r.metaSeen = m, err, now, true
	r.mu.Unlock()
	return m, err
}

func (r *Room) invalidate() {
	r.mu.Lock()
	r.metaSeen = false
	r.mu.Unlock()
}

func mapStateErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, state.ErrStateLost):
		return fmt.Errorf("%w: %w", ErrRoomLost, err)
	case errors.Is(err, state.ErrBadArgument):
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return fmt.Errorf("%w: %w", ErrStateUnavailable, err)
}

// Armed reports whether clientRegion queues now.
func (r *Room) Armed(ctx context.Context, clientRegion string) (bool, error) {
	m, err := r.Meta(ctx)
	if err != nil {
		return true, err // fail closed
	}
	return m.Armed(r.PopRegion(clientRegion)), nil
}

// BypassLane is the bypass lane a caller qualifies for, or "".
func (r *Room) BypassLane(access *auth.Access, resumeValid bool) string {
	if resumeValid {
		return BypassResume
	}
	if access == nil {
		return ""
	}
	if access.HasRole("operator") {
		return BypassOperator
	}
	for _, role := range r.roles {
		if access.HasRole(role) {
			return BypassRole
		}
	}
	if r.d.Prewarm != nil && access.Subject != "" && r.d.Prewarm.InPrewarmWindow(access.Subject, r.d.Now()) {
		return BypassPrewarm
	}
	return ""
}

// QueueStatus is the answer of join and status.
type QueueStatus struct {
	Status               string `json:"status"` // open | bypass | queued | admitted | used | paused | gone
	Region               string `json:"region"`
	Ticket               string `json:"ticket,omitempty"` // queue ticket, silently refreshed
	Position             int64  `json:"position,omitempty"`
	Depth                int64  `json:"depth"`
	DrainPerMinute       int64  `json:"drainPerMinute"`
	EstimatedWaitSeconds int64  `json:"estimatedWaitSeconds"`
	AdmissionTicket      string `json:"admissionTicket,omitempty"`
	JoinBy               string `json:"joinBy,omitempty"`
	FallbackURL          string `json:"fallbackUrl"`
	FallbackFirst        bool   `json:"fallbackFirst"`
}

// FallbackURL is the no-penalty Tier-2 exit offered on the queue page.
const FallbackURL = "/?surface=fallback"

func newTicketID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Join puts subject in line for clientRegion (lane: state.LaneWeb or
// state.LanePxstream). subject may be "" for a visitor not yet logged in.
func (r *Room) Join(ctx context.Context, subject, clientRegion string, lane state.Lane) (QueueStatus, error) {
	if !lane.Valid() {
		return QueueStatus{}, &FieldError{Field: "lane", Message: `must be "web" or "pxstream"`}
	}
	region := r.PopRegion(clientRegion)
	m, err := r.Meta(ctx)
	if err != nil {
		return QueueStatus{}, err
	}
	if !m.Armed(region) {
		return QueueStatus{Status: "open", Region: region, FallbackURL: FallbackURL}, nil
	}
	if m.Waitlist {
		// The abort ladder stopped quoting waits we cannot honour.
		return QueueStatus{}, ErrWaitlistMode
	}
	id := newTicketID()
	if subject == "" {
		subject = "anon:" + id
	}
	rates, lad := r.Rates(region)
	now := r.d.Now()
	pos, err := r.d.Queue.Join(ctx, state.Ticket{ID: id, Region: region, Lane: lane}, rates, now)
	if err != nil {
		return QueueStatus{}, mapStateErr(err)
	}
	if pos.Depth > r.p.OverflowDepth && pos.Status == state.StatusQueued {
		_, _ = r.d.Queue.Leave(ctx, state.Ticket{ID: id, Region: region, Lane: lane}, rates, now)
		return QueueStatus{}, ErrOverflow
	}
	q := auth.QueueTicket{TicketID: id, Subject: subject, Region: region, Position: uint64(pos.Seq),
		IssuedAtMs: now.UnixMilli(), RegionWeightClass: region + ":" + string(lane), Epoch: pos.Epoch}
	return r.answer(q, lane, pos, rates, lad, m)
}

func laneOf(q auth.QueueTicket) state.Lane {
	for i := len(q.RegionWeightClass) - 1; i >= 0; i-- {
		if q.RegionWeightClass[i] == ':' {
			return state.Lane(q.RegionWeightClass[i+1:])
		}
	}
	return state.LaneWeb
}

// Status polls a queue ticket: it keeps the place (15 min without a poll
// loses it), drains the region, refreshes the ticket and, once admitted,
// hands out the admission ticket for the 5-minute join window.
func (r *Room) Status(ctx context.Context, ticket string) (QueueStatus, error) {
	q, err := r.d.Signer.VerifyQueueTicket(ticket)
	if err != nil {
		return QueueStatus{}, fmt.Errorf("%w: queue ticket: %w", ErrBadRequest, err)
	}
	lane := laneOf(q)
	rates, lad := r.Rates(q.Region)
	pos, err := r.d.Queue.Poll(ctx, state.Ticket{ID: q.TicketID, Region: q.Region, Lane: lane}, rates, r.d.Now())
	if err != nil {
		return QueueStatus{}, mapStateErr(err)
	}
	if pos.Epoch != q.Epoch {
		return QueueStatus{}, fmt.Errorf("%w: queue ticket from a previous epoch (%s, room at %s): join again", ErrBadRequest, q.Epoch, pos.Epoch)
	}
	m, err := r.Meta(ctx)
	if err != nil {
		return QueueStatus{}, err
	}
	return r.answer(q, lane, pos, rates, lad, m)
}

// answer builds the join/status answer. A place is "paused" while nothing
// can drain it: the room frozen (by an operator or the abort ladder), the
// region at the freeze rung, or a pixel-stream place at >= 85 %. Paused
// places and waitlist mode quote no wait (-1).
func (r *Room) answer(q auth.QueueTicket, lane state.Lane, pos state.Position, rates state.Rates, lad Ladder, m state.Meta) (QueueStatus, error) {
	wait := r.observe(q.Region, pos.Depth, pos.DrainPerMin)
	r.d.Metrics.queue(q.Region, pos.Depth, pos.DrainPerMin, wait)
	out := QueueStatus{Status: string(pos.Status), Region: q.Region, Depth: pos.Depth, DrainPerMinute: pos.DrainPerMin,
		FallbackURL: FallbackURL, FallbackFirst: lad.FallbackFirst}
	switch pos.Status {
	case state.StatusGone:
		return out, nil
	case state.StatusQueued:
		out.Position = pos.Ahead + 1
		rate := float64(pos.DrainPerMin)
		if rate <= 0 {
			rate = rates.RegionPerMin
		}
		if rate > 0 {
			out.EstimatedWaitSeconds = int64(math.Ceil(float64(out.Position) / rate * 60))
		} else {
			out.EstimatedWaitSeconds = -1 // paused: no estimate we can honour
		}
		if lad.Frozen || m.Frozen || (lane == state.LanePxstream && !lad.PxstreamAllowed) {
			out.Status = "paused"
			out.EstimatedWaitSeconds = -1
		}
		if m.Waitlist {
			out.EstimatedWaitSeconds = -1
		}
	case state.StatusAdmitted:
		if lane == state.LanePxstream && !lad.PxstreamAllowed {
			// The drain never does this (the script holds the pixel-stream
			// lane at >= 85 %); if it ever did, it is alert-worthy.
			r.d.Metrics.AdmitIntoBackpressure(q.Region, "room")
		}
		a, err := r.d.Signer.IssueAdmissionTicket(auth.AdmissionTicket{TicketID: q.TicketID, Subject: q.Subject,
			Region: q.Region, Epoch: pos.Epoch}, max(pos.JoinBy.Sub(r.d.Signer.Now()), time.Second))
		if err != nil {
			return QueueStatus{}, fmt.Errorf("admission: issue admission ticket: %w", err)
		}
		out.AdmissionTicket = a
		out.JoinBy = pos.JoinBy.UTC().Format(time.RFC3339Nano)
		r.d.Metrics.admitted(q.Region, string(lane))
	}
	// Silent refresh: every answer carries a fresh 4-hour ticket.
	q.Epoch = pos.Epoch
	tok, err := r.d.Signer.IssueQueueTicket(q, ms(r.p.TicketTTLMs))
	if err != nil {
		return QueueStatus{}, fmt.Errorf("admission: issue queue ticket: %w", err)
	}
	out.Ticket = tok
	return out, nil
}

// Leave gives up a place; an admitted, unused place returns its tokens.
func (r *Room) Leave(ctx context.Context, ticket string) (refunded bool, err error) {
	q, err := r.d.Signer.VerifyQueueTicket(ticket)
	if err != nil {
		return false, fmt.Errorf("%w: queue ticket: %w", ErrBadRequest, err)
	}
	rates, _ := r.Rates(q.Region)
	refunded, err = r.d.Queue.Leave(ctx, state.Ticket{ID: q.TicketID, Region: q.Region, Lane: laneOf(q)}, rates, r.d.Now())
	return refunded, mapStateErr(err)
}

// UseAdmission exercises an admission ticket (idempotent within its join
// window). subject, when not "", must match the ticket's (anonymous
// tickets match anyone).
func (r *Room) UseAdmission(ctx context.Context, ticket, subject string) error {
	a, err := r.d.Signer.VerifyAdmissionTicket(ticket)
	if err != nil {
		return fmt.Errorf("%w: admission ticket: %w", ErrBadRequest, err)
	}
	if subject != "" && a.Subject != subject && !isAnon(a.Subject) {
		return fmt.Errorf("%w: admission ticket belongs to another subject", ErrBadRequest)
	}
	ok, err := r.d.Queue.Use(ctx, state.Ticket{ID: a.TicketID, Region: a.Region}, r.d.Now())
	if err != nil {
		return mapStateErr(err)
	}
	if !ok {
		return fmt.Errorf("%w: admission not valid in this epoch or its join window passed", ErrBadRequest)
	}
	return nil
}

func isAnon(s string) bool { return len(s) > 5 && s[:5] == "anon:" }

// TakeSignup takes one token of the signup bucket (400/min, burst 800).
func (r *Room) TakeSignup(ctx context.Context) (bool, error) {
	ok, err := r.d.Queue.Take(ctx, "signup", r.p.Signup.PerMinute, r.p.Signup.Burst, r.d.Now())
	return ok, mapStateErr(err)
}

// Control runs an operator control (arm, disarm, freeze, unfreeze, halve,
// restore, rearm, waitlist, unwaitlist), audited before it runs.
func (r *Room) Control(ctx context.Context, op state.Op, region, operator, reason string) (state.Meta, error) {
	return r.control(ctx, op, region, operator, reason, "operator.queue."+string(op), nil)
}

// control runs op, audited as event (with extra members) before it runs.
func (r *Room) control(ctx context.Context, op state.Op, region, operator, reason, event string, extra map[string]any) (state.Meta, error) {
	ev := map[string]any{"gate": "room", "event": event, "op": string(op), "region": region, "operator": operator, "reason": reason}
	for k, v := range extra {
		ev[k] = v
	}
	if err := r.d.Audit.Write(ev); err != nil {
		return state.Meta{}, err
	}
	r.d.Metrics.operated(string(op))
	r.d.Logger.Warn("waiting-room control", "op", op, "region", region, "operator", operator, "reason", reason)
	defer r.invalidate()
	m, err := r.d.Queue.Control(ctx, state.Control{Op: op, Region: region})
	return m, mapStateErr(err)
}

// ArmSignals are the entry criteria of the reference's surge plan.
type ArmSignals struct {
	GlobalSessions         int
	P95LatencyMs           float64 // BFF auth / launch-resolver p95 over 5 minutes
	StartSuccessBP         int     // session-start success over 5 minutes (0: unknown)
	RegionsInBackpressure  []string
	StartSuccessLowRegions []string
}

// AutoArm arms the room when the entry criteria hold: globally for the
// global criteria, per region for regional ones. It never disarms. It
// returns the scopes it armed ("" for global).
func (r *Room) AutoArm(ctx context.Context, s ArmSignals) ([]string, error) {
	m, err := r.Meta(ctx)
	if err != nil {
		return nil, err
	}
	var armed []string
	global := s.GlobalSessions >= r.p.ArmAtGlobalSessions || s.P95LatencyMs > r.p.ArmAtP95LatencyMs ||
		(s.StartSuccessBP > 0 && s.StartSuccessBP < r.p.ArmBelowStartSuccessBP)
	if global && !m.ArmedGlobal {
		if _, err := r.Control(ctx, state.OpArm, "", "auto", "entry criteria"); err != nil {
			return armed, err
		}
		armed = append(armed, "")
	}
	for _, reg := range append(append([]string(nil), s.RegionsInBackpressure...), s.StartSuccessLowRegions...) {
		if m.Armed(reg) || global {
			continue
		}
		if _, err := r.Control(ctx, state.OpArm, reg, "auto", "regional entry criteria"); err != nil {
			return armed, err
		}
		m.ArmedRegions[reg] = true
		armed = append(armed, reg)
	}
	return armed, nil
}
