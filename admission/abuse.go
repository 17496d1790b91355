package admission

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
)

// abuseSamplesJSON is the labelled sample set of the precision gate.
//
//go:embed abuse_samples.json
var abuseSamplesJSON string

// AbuseSamples is the labelled sample set the precision gate runs (50+
// sessions, humans and bots, with their signals).
func AbuseSamples() ([]LabelledSample, error) {
	dec := json.NewDecoder(strings.NewReader(abuseSamplesJSON))
	dec.DisallowUnknownFields()
	var samples []LabelledSample
	if err := dec.Decode(&samples); err != nil {
		return nil, fmt.Errorf("%w: abuse samples: %w", ErrPolicy, err)
	}
	return samples, nil
}

// AbuseSignals are the behavioural signals of one streamed session over an
// observation window.
type AbuseSignals struct {
	MouseEvents               int     `json:"mouseEvents"`
	KeyboardEvents            int     `json:"keyboardEvents"`
	AvatarMotionSamples       int     `json:"avatarMotionSamples"`
	ZeroInertiaSamples        int     `json:"zeroInertiaSamples"` // velocity changes with no acceleration ramp
	ReconnectsPerMinute       float64 `json:"reconnectsPerMinute"`
	ReconnectIntervalJitterMs float64 `json:"reconnectIntervalJitterMs"` // std dev of the gaps
	InputEventsPerSecond      float64 `json:"inputEventsPerSecond"`
	InputIntervalJitterMs     float64 `json:"inputIntervalJitterMs"` // std dev of the gaps
}

// Abuse signal names (the score's contributors).
const (
	SignalMouseOnly         = "mouse-only-no-keyboard"
	SignalZeroInertia       = "zero-inertia-avatar"
	SignalReconnectLoop     = "scripted-reconnect-loop"
	SignalImpossibleCadence = "impossible-input-cadence"
)

// AbuseVerdict is what the classifier decided.
type AbuseVerdict string

const (
	VerdictAllow  AbuseVerdict = "allow"
	VerdictReview AbuseVerdict = "safety-review" // score >= review threshold
	VerdictBan    AbuseVerdict = "ban"           // score >= ban threshold
)

// AbuseScore is the classifier's answer.
type AbuseScore struct {
	BasisPoints int          `json:"basisPoints"` // 0..10000
	Signals     []string     `json:"signals"`
	Verdict     AbuseVerdict `json:"verdict"`
}

// ClassifyAbuse scores s under p: each signal that fires adds its basis
// points, capped at 10,000.
func (p *AbusePolicy) ClassifyAbuse(s AbuseSignals) AbuseScore {
	var out AbuseScore
	add := func(name string, bp int) {
		out.Signals = append(out.Signals, name)
		out.BasisPoints += bp
	}
	if s.MouseEvents >= p.MouseOnlyMinMouseEvents && s.KeyboardEvents == 0 {
		add(SignalMouseOnly, p.MouseOnlyBP)
	}
	if s.AvatarMotionSamples >= p.ZeroInertiaMinSamples &&
		s.ZeroInertiaSamples*10000 >= p.ZeroInertiaMinRatioBP*s.AvatarMotionSamples {
		add(SignalZeroInertia, p.ZeroInertiaBP)
	}
	if s.ReconnectsPerMinute >= p.ReconnectLoopMinPerMinute && s.ReconnectIntervalJitterMs <= p.ReconnectLoopMaxJitterMs {
		add(SignalReconnectLoop, p.ReconnectLoopBP)
	}
	if s.InputEventsPerSecond > p.CadenceMaxEventsPerSecond ||
		(s.InputEventsPerSecond >= p.CadenceRegularMinPerSecond && s.InputIntervalJitterMs < p.CadenceMinJitterMs) {
		add(SignalImpossibleCadence, p.ImpossibleCadenceBP)
	}
	out.BasisPoints = min(out.BasisPoints, 10000)
	switch {
	case out.BasisPoints >= p.BanBP:
		out.Verdict = VerdictBan
	case out.BasisPoints >= p.ReviewBP:
		out.Verdict = VerdictReview
	default:
		out.Verdict = VerdictAllow
	}
	return out
}

// LabelledSample is one entry of the precision gate's sample set.
type LabelledSample struct {
	Name    string       `json:"name"`
	Bot     bool         `json:"bot"`
	Signals AbuseSignals `json:"signals"`
}

// AbusePrecision is the classifier's precision over a labelled set, in
// basis points: flagged (review or ban) sessions that really are bots, over
// all flagged. Recall is reported beside it.
func (p *AbusePolicy) AbusePrecision(samples []LabelledSample) (precisionBP, recallBP int) {
	var tp, fp, fn int
	for _, s := range samples {
		flagged := p.ClassifyAbuse(s.Signals).Verdict != VerdictAllow
		switch {
		case flagged && s.Bot:
			tp++
		case flagged:
			fp++
		case s.Bot:
			fn++
		}
	}
	if tp+fp > 0 {
		precisionBP = tp * 10000 / (tp + fp)
	}
	if tp+fn > 0 {
		recallBP = tp * 10000 / (tp + fn)
	}
	return precisionBP, recallBP
}
