package admission

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// InputReport is a UE worker's account of one player's input over a
// stretch of its session (the egbe.input.stats extension message; only a
// streamer's report is trusted).
type InputReport struct {
	Events      int64   // input events seen
	SpanMs      int64   // over this long
	JitterMs    float64 // standard deviation of the gaps between them
	Mouse       int64   // mouse events among them
	Keyboard    int64   // keyboard events among them
	Motion      int64   // avatar motion samples
	ZeroInertia int64   // motion samples that changed velocity with no acceleration ramp
}

// AbuseWatch collects the behavioural signals the edge observes of each
// subject, fleet-wide (state.Tallies, one key per subject per observation
// window), scores them with the classifier, and acts: a safety-review
// verdict is audited once per window and counted; a ban is audited, kept
// for the policy's ban TTL (state.KV, fleet-wide) and refuses the subject
// until it lapses.
//
// What it observes: every match request of the subject (Pixel Streaming
// reconnects — the gaps give a rate and a jitter: a scripted reconnect
// loop is fast and regular), and what UE workers report of the subject's
// input (mouse and keyboard counts, avatar motion without inertia, input
// cadence and its jitter).
type AbuseWatch struct {
	p       *AbusePolicy     // immutable after New
	tallies state.Tallies    // immutable after New
	kv      state.KV         // immutable after New
	audit   *Auditor         // immutable after New
	now     func() time.Time // immutable after New
	metrics *Metrics
}

// NewAbuseWatch returns an AbuseWatch over shared state.
func NewAbuseWatch(p *Policy, tallies state.Tallies, kv state.KV, audit *Auditor, now func() time.Time, m *Metrics) *AbuseWatch {
	if now == nil {
		now = time.Now
	}
	if audit == nil {
		audit = NewAuditor(nil, now)
	}
	return &AbuseWatch{p: &p.Abuse, tallies: tallies, kv: kv, audit: audit, now: now, metrics: m}
}

// Fields of a subject's tally.
const (
	tallyMatch       = "match" // Gap series: .n .sum .sq .last
	tallyEvents      = "events"
	tallySpanMs      = "spanMs"
	tallyJitterUsEvt = "jitterUsEvents" // sum of jitter (µs) x events: an events-weighted mean
	tallyMouse       = "mouse"
	tallyKeyboard    = "keyboard"
	tallyMotion      = "motion"
	tallyZeroInertia = "zeroInertia"
)

func (w *AbuseWatch) window(now time.Time) int64 { return now.UnixMilli() / w.p.ObservationWindowMs }

func (w *AbuseWatch) key(subject string, win int64) string {
	return "abuse:" + subject + ":" + strconv.FormatInt(win, 10)
}

// ttl keeps a window's tally while it can still be read (it and the next).
func (w *AbuseWatch) ttl() time.Duration { return 2 * ms(w.p.ObservationWindowMs) }

// ObserveMatch records a match request of subject.
func (w *AbuseWatch) ObserveMatch(ctx context.Context, subject string) error {
	now := w.now()
	if err := w.tallies.Gap(ctx, w.key(subject, w.window(now)), tallyMatch, w.ttl(), now); err != nil {
		return fmt.Errorf("%w: %w", ErrStateUnavailable, err)
	}
	return nil
}

// ObserveInput records a worker's input report about subject.
func (w *AbuseWatch) ObserveInput(ctx context.Context, subject string, r InputReport) error {
	now := w.now()
	d := map[string]int64{
		tallyEvents: r.Events, tallySpanMs: r.SpanMs, tallyJitterUsEvt: int64(math.Round(r.JitterMs*1000)) * r.Events,
		tallyMouse: r.Mouse, tallyKeyboard: r.Keyboard, tallyMotion: r.Motion, tallyZeroInertia: r.ZeroInertia,
	}
	if err := w.tallies.Add(ctx, w.key(subject, w.window(now)), d, w.ttl(), now); err != nil {
		return fmt.Errorf("%w: %w", ErrStateUnavailable, err)
	}
	return nil
}

// Signals reads subject's signals over the current and the previous
// observation window.
func (w *AbuseWatch) Signals(ctx context.Context, subject string) (AbuseSignals, error) {
	now := w.now()
	win := w.window(now)
	rows, err := w.tallies.Read(ctx, now, w.key(subject, win-1), w.key(subject, win))
	if err != nil {
		return AbuseSignals{}, fmt.Errorf("%w: %w", ErrStateUnavailable, err)
	}
	var t = map[string]int64{}
	for _, r := range rows {
		for f, v := range r {
			if f != tallyMatch+".last" {
				t[f] += v
			}
		}
	}
	var s AbuseSignals
	s.MouseEvents = int(t[tallyMouse])
	s.KeyboardEvents = int(t[tallyKeyboard])
	s.AvatarMotionSamples = int(t[tallyMotion])
	s.ZeroInertiaSamples = int(t[tallyZeroInertia])
	if n := t[tallyMatch+".n"]; n >= w.p.ReconnectLoopMinGaps && t[tallyMatch+".sum"] > 0 {
		mean := float64(t[tallyMatch+".sum"]) / float64(n)
		s.ReconnectsPerMinute = 60000 / mean
		s.ReconnectIntervalJitterMs = math.Sqrt(math.Max(0, float64(t[tallyMatch+".sq"])/float64(n)-mean*mean))
	}
	if ev, span := t[tallyEvents], t[tallySpanMs]; ev > 0 && span > 0 {
		s.InputEventsPerSecond = float64(ev) * 1000 / float64(span)
		s.InputIntervalJitterMs = float64(t[tallyJitterUsEvt]) / 1000 / float64(ev)
	}
	return s, nil
}

// banKey names subject's ban in the shared KV.
func banKey(subject string) string { return "abuse:ban:" + subject }

// reviewKey marks subject as sent to review in the current window.
func (w *AbuseWatch) reviewKey(subject string, now time.Time) string {
	return "abuse:review:" + subject + ":" + strconv.FormatInt(w.window(now), 10)
}

// Banned reports whether subject is banned now.
func (w *AbuseWatch) Banned(ctx context.Context, subject string) (bool, error) {
	_, err := w.kv.Get(ctx, banKey(subject))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, state.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("%w: %w", ErrStateUnavailable, err)
}

// Check scores subject's signals and acts on the verdict: a ban is stored
// fleet-wide and audited (operator.abuse.ban); a safety review is audited
// once per window (operator.abuse.safety_review). A subject already banned
// reads as VerdictBan without rescoring. source names what triggered the
// check ("match", "input") for the audit line.
func (w *AbuseWatch) Check(ctx context.Context, subject, source string) (AbuseScore, error) {
	banned, err := w.Banned(ctx, subject)
	if err != nil {
		return AbuseScore{}, err
	}
	if banned {
		return AbuseScore{BasisPoints: 10000, Verdict: VerdictBan}, nil
	}
	sig, err := w.Signals(ctx, subject)
	if err != nil {
		return AbuseScore{}, err
	}
	sc := w.p.ClassifyAbuse(sig)
	now := w.now()
	switch sc.Verdict {
	case VerdictBan:
		if err := w.kv.Put(ctx, banKey(subject), []byte(strconv.Itoa(sc.BasisPoints)), ms(w.p.BanTTLMs)); err != nil {
			return sc, fmt.Errorf("%w: %w", ErrStateUnavailable, err)
		}
		w.metrics.abuse(string(sc.Verdict))
		aerr := w.audit.Write(map[string]any{"gate": "abuse", "event": "operator.abuse.ban", "subject": subject,
			"basisPoints": sc.BasisPoints, "signals": sc.Signals, "source": source, "banMs": w.p.BanTTLMs})
		return sc, aerr
	case VerdictReview:
		k := w.reviewKey(subject, now)
		if _, err := w.kv.Get(ctx, k); err == nil {
			return sc, nil // already sent to review in this window
		}
		if err := w.kv.Put(ctx, k, []byte("1"), w.ttl()); err != nil {
			return sc, fmt.Errorf("%w: %w", ErrStateUnavailable, err)
		}
		w.metrics.abuse(string(sc.Verdict))
		aerr := w.audit.Write(map[string]any{"gate": "abuse", "event": "operator.abuse.safety_review", "subject": subject,
			"basisPoints": sc.BasisPoints, "signals": sc.Signals, "source": source})
		return sc, aerr
	}
	return sc, nil
}
