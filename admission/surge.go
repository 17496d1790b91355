package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// HealthClamp is the waiting room's DownstreamHealth: the admit ceiling
// the surge controller last set (every edge reads the fleet's).
type HealthClamp struct {
	mu   sync.Mutex
	ceil float64 // guarded by mu; 0: no clamp
}

var _ DownstreamHealth = (*HealthClamp)(nil)

// AdmitCeilingPerMinute implements DownstreamHealth.
func (h *HealthClamp) AdmitCeilingPerMinute() (float64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ceil, h.ceil > 0
}

func (h *HealthClamp) set(c float64) {
	h.mu.Lock()
	h.ceil = c
	h.mu.Unlock()
}

// SurgeDeps are the surge controller's collaborators. Room, Meter, KV and
// Leases are required.
type SurgeDeps struct {
	Room   *Room
	Meter  *Meter
	Clamp  *HealthClamp // the Room's Health; nil: no clamp is applied
	KV     state.KV     // the ladder's state, fleet-wide
	Leases state.Leases // one leader a fleet
	Holder string       // this edge's name (leader lease holder)
	// Sessions is the fleet's count of concurrent sessions (the entry
	// criterion of 20,000); nil reads 0.
	Sessions func(ctx context.Context) (int, error)
	Audit    *Auditor
	Now      func() time.Time
	Metrics  *Metrics
	Logger   *slog.Logger
}

// Surge runs the launch surge plan on live signals: the entry criteria
// (AutoArm), the downstream-health clamp of the admit rate, the abort
// ladder with its 15-minute sustain and 30-minute unwind, and the surge
// commander's page at the freeze rung. Every edge runs it; one holds the
// leader lease and acts, and its state (state.KV) carries over when
// another takes over. Every action is audited.
type Surge struct {
	p *Policy   // immutable after New
	d SurgeDeps // immutable after New
}

// NewSurge returns a Surge.
func NewSurge(p *Policy, d SurgeDeps) (*Surge, error) {
	if d.Room == nil || d.Meter == nil || d.KV == nil || d.Leases == nil || d.Holder == "" {
		return nil, errors.New("admission: surge needs a room, a meter, a kv, leases and a holder name")
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
	d.Logger = d.Logger.With("component", "surge")
	return &Surge{p: p, d: d}, nil
}

// Abort-ladder triggers and their actions (reference 002, Abort Criteria).
const (
	TriggerStartSuccess = "start-success"     // < 98 % globally: halve the global bucket
	TriggerColdJoin     = "cold-join"         // p95 > 8 s: halve the global bucket
	TriggerServerErrors = "server-errors"     // 5xx > 2 %: freeze admissions (bypass lanes only)
	TriggerBackpressure = "pops-backpressure" // >= 4 POPs at >= 85 %: freeze admissions
	TriggerQueue        = "queue-overflow"    // depth > 50,000 or median wait > 60 min: waitlist mode

	ActionHalve    = "halve"
	ActionFreeze   = "freeze"
	ActionWaitlist = "waitlist"
)

var triggerAction = map[string]string{
	TriggerStartSuccess: ActionHalve, TriggerColdJoin: ActionHalve,
	TriggerServerErrors: ActionFreeze, TriggerBackpressure: ActionFreeze,
	TriggerQueue: ActionWaitlist,
}

// triggerOrder is the order triggers are considered in (deterministic).
var triggerOrder = []string{TriggerStartSuccess, TriggerColdJoin, TriggerServerErrors, TriggerBackpressure, TriggerQueue}

var actionOps = map[string][2]state.Op{
	ActionHalve: {state.OpHalve, state.OpRestore}, ActionFreeze: {state.OpFreeze, state.OpUnfreeze},
	ActionWaitlist: {state.OpWaitlist, state.OpUnwaitlist},
}

// Applied is one abort action on the ladder's stack.
type Applied struct {
	Action  string `json:"action"`
	Trigger string `json:"trigger"`
	At      int64  `json:"at"`   // Unix ms
	Noop    bool   `json:"noop"` // the room was already so: unwinding leaves it
}

// SurgeState is the ladder's shared state.
type SurgeState struct {
	Since   map[string]int64 `json:"since"`   // trigger -> condition true continuously since (Unix ms)
	Green   map[string]int64 `json:"green"`   // trigger -> condition false continuously since
	Applied []Applied        `json:"applied"` // in order of application
	Ceiling float64          `json:"ceiling"` // health clamp per minute (0: none)
	CutAt   int64            `json:"cutAt"`   // last time the clamp came down
	Paged   []string         `json:"paged"`   // regions paged and still at the freeze rung
	At      int64            `json:"at"`      // when the leader last stepped (Unix ms)
	Leader  string           `json:"leader"`  // who did
}

const (
	surgeStateKey  = "surge:state"
	surgeLeaderKey = "surge:leader"
	surgeStateTTL  = 24 * time.Hour
)

// State reads the ladder's shared state.
func (s *Surge) State(ctx context.Context) (SurgeState, error) {
	st := SurgeState{Since: map[string]int64{}, Green: map[string]int64{}}
	b, err := s.d.KV.Get(ctx, surgeStateKey)
	switch {
	case errors.Is(err, state.ErrNotFound):
		return st, nil
	case err != nil:
		return st, fmt.Errorf("%w: %w", ErrStateUnavailable, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%w: surge state: %w", ErrStateUnavailable, err)
	}
	if st.Since == nil {
		st.Since = map[string]int64{}
	}
	if st.Green == nil {
		st.Green = map[string]int64{}
	}
	return st, nil
}

func (s *Surge) every() time.Duration { return ms(s.p.WaitingRoom.SurgeEveryMs) }

// Run steps the controller every interval (the policy's surgeEveryMs when
// every is 0) until ctx ends.
func (s *Surge) Run(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		every = s.every()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := s.Step(ctx); err != nil && ctx.Err() == nil {
				s.d.Logger.Warn("surge step", "err", err)
			}
		}
	}
}

// Signals is the controller's read of the fleet at one step.
type Signals struct {
	Arm      Window         // the entry criteria's trailing window (5 min)
	Health   Window         // the health clamp's (10 min)
	UtilBP   map[string]int // POP region -> utilisation; a region without signal is absent
	Sessions int
	Depth    map[string]int64
	WaitSec  map[string]float64
}

func (s *Surge) signals(ctx context.Context) (Signals, error) {
	w := s.p.WaitingRoom
	var sig Signals
	var err error
	if sig.Arm, err = s.d.Meter.Window(ctx, ms(w.ArmWindowMs)); err != nil {
		return sig, err
	}
	if sig.Health, err = s.d.Meter.Window(ctx, ms(w.Health.WindowMs)); err != nil {
		return sig, err
	}
	sig.UtilBP = map[string]int{}
	if u := s.d.Room.d.Utilisation; u != nil {
		for _, reg := range slices.Sorted(maps.Keys(w.Regions)) {
			if bp, ok := u.RegionUtilisationBP(reg); ok {
				sig.UtilBP[reg] = bp
			}
		}
	}
	if s.d.Sessions != nil {
		if sig.Sessions, err = s.d.Sessions(ctx); err != nil {
			return sig, err
		}
	}
	sig.Depth, sig.WaitSec = s.d.Room.Lines()
	return sig, nil
}

// Step is one round: flush this edge's samples, adopt the fleet's clamp,
// and, on the leader, evaluate the entry criteria, the clamp, the pages
// and the abort ladder.
func (s *Surge) Step(ctx context.Context) error {
	flushErr := s.d.Meter.Flush(ctx)
	st, err := s.State(ctx)
	if err != nil {
		return errors.Join(flushErr, err)
	}
	s.adopt(ctx, st)
	now := s.d.Now()
	blocked, err := s.d.Leases.Acquire(ctx, s.d.Holder, []state.LeaseLimit{{Key: surgeLeaderKey, Limit: 1}}, 3*s.every(), now)
	if err != nil || blocked >= 0 {
		return errors.Join(flushErr, err) // not the leader (or cannot tell): act on nothing
	}
	sig, err := s.signals(ctx)
	if err != nil {
		return errors.Join(flushErr, err)
	}
	errs := []error{flushErr}
	errs = append(errs, s.arm(ctx, sig))
	s.clamp(&st, sig, now)
	errs = append(errs, s.page(&st, sig))
	errs = append(errs, s.ladder(ctx, &st, sig, now))
	st.At, st.Leader = now.UnixMilli(), s.d.Holder
	b, _ := json.Marshal(st)
	if err := s.d.KV.Put(ctx, surgeStateKey, b, surgeStateTTL); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrStateUnavailable, err))
	}
	s.adopt(ctx, st)
	return errors.Join(errs...)
}

// adopt applies the fleet's clamp here and exports the admit ceiling.
func (s *Surge) adopt(ctx context.Context, st SurgeState) {
	if s.d.Clamp != nil {
		s.d.Clamp.set(st.Ceiling)
	}
	g := s.p.WaitingRoom.Global.PerMinute
	if st.Ceiling > 0 {
		g = math.Min(g, st.Ceiling)
	}
	if m, err := s.d.Room.Meta(ctx); err == nil {
		switch {
		case m.Frozen:
			g = 0
		case m.Halved:
			g /= 2
		}
	}
	s.d.Metrics.admitCeiling(g)
}

// arm applies the entry criteria (never disarms).
func (s *Surge) arm(ctx context.Context, sig Signals) error {
	w := s.p.WaitingRoom
	a := ArmSignals{GlobalSessions: sig.Sessions}
	if p95, n := sig.Arm.LaunchP95Ms(); n >= w.MinSamples && over(p95, int64(w.ArmAtP95LatencyMs)) {
		a.P95LatencyMs = float64(p95)
		if p95 < 0 {
			a.P95LatencyMs = math.Inf(1)
		}
	}
	if bp, n := sig.Arm.StartSuccessBP(""); n >= w.MinSamples {
		a.StartSuccessBP = max(bp, 1) // 0 means "unknown" to AutoArm
	}
	for _, reg := range slices.Sorted(maps.Keys(w.Regions)) {
		if bp, ok := sig.UtilBP[reg]; ok && bp >= w.PxstreamStopAtBP {
			a.RegionsInBackpressure = append(a.RegionsInBackpressure, reg)
		}
		if bp, n := sig.Arm.StartSuccessBP(reg); n >= w.MinSamples && bp < w.ArmBelowStartSuccessBP {
			a.StartSuccessLowRegions = append(a.StartSuccessLowRegions, reg)
		}
	}
	scopes, err := s.d.Room.AutoArm(ctx, a)
	for _, sc := range scopes {
		s.d.Metrics.surgeAction("arm", "entry-criteria", "apply")
		s.d.Logger.Warn("waiting room armed by the entry criteria", "scope", sc)
	}
	return err
}

// clamp moves the health clamp: unhealthy (cold-join p95 > 5 s or start
// success < 99.5 % over the trailing 10 minutes) halves the admit rate the
// room measures, at most once per half window; healthy raises it by a
// step of the bucket rate until the clamp is gone.
func (s *Surge) clamp(st *SurgeState, sig Signals, now time.Time) {
	w := s.p.WaitingRoom
	h := w.Health
	healthy := true
	if bp, n := sig.Health.StartSuccessBP(""); n >= w.MinSamples && bp < h.StartSuccessBP {
		healthy = false
	}
	if p95, n := sig.Health.ColdJoinP95Ms(); n >= w.MinSamples && over(p95, h.ColdJoinP95Ms) {
		healthy = false
	}
	bucket := w.Global.PerMinute
	if healthy {
		if st.Ceiling > 0 {
			st.Ceiling += h.StepUpFraction * bucket
			if st.Ceiling >= bucket {
				st.Ceiling = 0
				s.d.Logger.Info("admit clamp lifted: downstream healthy")
			}
		}
		return
	}
	if now.UnixMilli()-st.CutAt < h.WindowMs/2 {
		return
	}
	cur := st.Ceiling
	if cur == 0 {
		cur = bucket
	}
	// What the fleet admits now (the regions' measured drain) is the rate
	// health is failing at: the new ceiling is half of it.
	if drained := s.d.Room.drained(); drained > 0 {
		cur = math.Min(cur, drained)
	}
	st.Ceiling = math.Max(h.MinPerMinute, cur/2)
	st.CutAt = now.UnixMilli()
	s.d.Metrics.surgeAction("clamp", "downstream-health", "apply")
	s.d.Logger.Warn("admit rate clamped to downstream health", "ceilingPerMinute", st.Ceiling)
}

// page pages the surge commander once per region reaching the freeze
// rung (>= 90 %).
func (s *Surge) page(st *SurgeState, sig Signals) error {
	w := s.p.WaitingRoom
	var still []string
	var errs []error
	for _, reg := range slices.Sorted(maps.Keys(sig.UtilBP)) {
		bp := sig.UtilBP[reg]
		if bp < w.FreezeAtBP {
			continue
		}
		still = append(still, reg)
		if slices.Contains(st.Paged, reg) {
			continue
		}
		s.d.Metrics.paged(reg)
		s.d.Logger.Error("surge commander paged: region frozen at the freeze rung", "region", reg, "utilisationBP", bp)
		errs = append(errs, s.d.Audit.Write(map[string]any{"gate": "room", "event": "operator.launch.surge_page",
			"region": reg, "utilisationBP": bp}))
	}
	st.Paged = still
	return errors.Join(errs...)
}

// conditions evaluates each abort trigger now; value is what tripped it.
func (s *Surge) conditions(sig Signals) map[string]any {
	w := s.p.WaitingRoom
	ab := w.Abort
	out := map[string]any{}
	if bp, n := sig.Arm.StartSuccessBP(""); n >= w.MinSamples && bp < ab.StartSuccessBelowBP {
		out[TriggerStartSuccess] = map[string]any{"startSuccessBasisPoints": bp, "samples": n}
	}
	if p95, n := sig.Arm.ColdJoinP95Ms(); n >= w.MinSamples && over(p95, ab.ColdJoinP95AboveMs) {
		out[TriggerColdJoin] = map[string]any{"coldJoinP95BoundMs": p95, "samples": n}
	}
	if bp, n := sig.Arm.ServerErrorsBP(); n >= w.MinSamples && bp > ab.ServerErrorsAboveBP {
		out[TriggerServerErrors] = map[string]any{"serverErrorsBasisPoints": bp, "samples": n}
	}
	var hot []string
	for reg, bp := range sig.UtilBP {
		if bp >= s.p.Pxstream.BackpressureBP {
			hot = append(hot, reg)
		}
	}
	if len(hot) >= ab.PopsInBackpressure {
		slices.Sort(hot)
		out[TriggerBackpressure] = map[string]any{"pops": hot}
	}
	var depth int64
	var worst float64
	for reg, d := range sig.Depth {
		depth += d
		worst = math.Max(worst, sig.WaitSec[reg])
	}
	if depth > w.OverflowDepth || worst*1000 > float64(ab.WaitlistMedianWaitMs) {
		out[TriggerQueue] = map[string]any{"depth": depth, "medianWaitSeconds": worst}
	}
	return out
}

// ladder tracks each trigger's sustain and green time, applies an action
// whose trigger held for the sustain, and unwinds the most recent action
// once its trigger has been green for the unwind time (one step a round,
// in reverse order of application).
func (s *Surge) ladder(ctx context.Context, st *SurgeState, sig Signals, now time.Time) error {
	ab := s.p.WaitingRoom.Abort
	nowMs := now.UnixMilli()
	cond := s.conditions(sig)
	for _, trig := range triggerOrder {
		if _, on := cond[trig]; on {
			delete(st.Green, trig)
			if _, ok := st.Since[trig]; !ok {
				st.Since[trig] = nowMs
			}
		} else {
			delete(st.Since, trig)
			if _, ok := st.Green[trig]; !ok {
				st.Green[trig] = nowMs
			}
		}
	}
	applied := func(trig string) bool {
		return slices.ContainsFunc(st.Applied, func(a Applied) bool { return a.Trigger == trig })
	}
	var errs []error
	for _, trig := range triggerOrder {
		since, on := st.Since[trig]
		if !on || applied(trig) || nowMs-since < ab.SustainMs {
			continue
		}
		act := triggerAction[trig]
		m, err := s.d.Room.Meta(ctx)
		if err != nil {
			return err
		}
		noop := (act == ActionHalve && m.Halved) || (act == ActionFreeze && m.Frozen) || (act == ActionWaitlist && m.Waitlist)
		if !noop {
			if _, err := s.d.Room.control(ctx, actionOps[act][0], "", "surge-controller", "abort ladder: "+trig, "operator.launch.surge_abort.executed",
				map[string]any{"action": act, "trigger": trig, "value": cond[trig], "sustainedMs": nowMs - since}); err != nil {
				return err
			}
		} else if err := s.d.Audit.Write(map[string]any{"gate": "room", "event": "operator.launch.surge_abort.executed",
			"action": act, "trigger": trig, "value": cond[trig], "sustainedMs": nowMs - since, "noop": true}); err != nil {
			errs = append(errs, err)
		}
		st.Applied = append(st.Applied, Applied{Action: act, Trigger: trig, At: nowMs, Noop: noop})
		s.d.Metrics.surgeAction(act, trig, "apply")
		s.d.Logger.Warn("abort ladder applied", "action", act, "trigger", trig)
	}
	if n := len(st.Applied); n > 0 {
		top := st.Applied[n-1]
		green, ok := st.Green[top.Trigger]
		if ok && nowMs-green >= ab.UnwindMs {
			st.Applied = st.Applied[:n-1]
			// Another applied step with the same action keeps it in force.
			keep := top.Noop || slices.ContainsFunc(st.Applied, func(a Applied) bool { return a.Action == top.Action && !a.Noop })
			if !keep {
				if _, err := s.d.Room.control(ctx, actionOps[top.Action][1], "", "surge-controller", "abort ladder unwound: "+top.Trigger,
					"operator.launch.surge_abort.unwound", map[string]any{"action": top.Action, "trigger": top.Trigger, "greenMs": nowMs - green}); err != nil {
					st.Applied = append(st.Applied, top)
					return err
				}
			}
			s.d.Metrics.surgeAction(top.Action, top.Trigger, "unwind")
			s.d.Logger.Warn("abort ladder unwound", "action", top.Action, "trigger", top.Trigger)
		}
	}
	return errors.Join(errs...)
}
