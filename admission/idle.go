package admission

import "time"

// IdleAction is what the idle lifecycle asks the edge to do.
type IdleAction int

const (
	IdleNone       IdleAction = iota // nothing to do
	IdlePrompt                       // send the player "Still there? Move, press a key…"
	IdleDisconnect                   // disconnect, return the worker to the pool; reconnect needs a new match
)

// IdleTracker is the idle lifecycle of one leased streamer: a prompt after
// 90 s without input; a disconnect after 150 s without input, or 60 s after
// an unanswered prompt, whichever comes first. It is a pure state machine:
// the caller feeds it input times and ticks with its own clock, and is not
// safe for concurrent use (one owner per session).
type IdleTracker struct {
	p          IdlePolicy
	lastInput  time.Time
	promptedAt time.Time // zero: no prompt outstanding
	done       bool
}

// NewIdleTracker starts tracking at start (the lease time counts as input).
func NewIdleTracker(p IdlePolicy, start time.Time) *IdleTracker {
	return &IdleTracker{p: p, lastInput: start}
}

// Input records player input at now; it answers an outstanding prompt.
// Input after the disconnect changes nothing.
func (t *IdleTracker) Input(now time.Time) {
	if t.done {
		return
	}
	if now.After(t.lastInput) {
		t.lastInput = now
	}
	t.promptedAt = time.Time{}
}

// Tick advances the machine to now and returns the action due, once:
// IdlePrompt at most once per idle spell, IdleDisconnect once, then
// IdleNone forever.
func (t *IdleTracker) Tick(now time.Time) IdleAction {
	if t.done {
		return IdleNone
	}
	idle := now.Sub(t.lastInput)
	if idle >= ms(t.p.DisconnectAfterMs) ||
		(!t.promptedAt.IsZero() && now.Sub(t.promptedAt) >= ms(t.p.PromptGraceMs)) {
		t.done = true
		return IdleDisconnect
	}
	if t.promptedAt.IsZero() && idle >= ms(t.p.PromptAfterMs) {
		t.promptedAt = now
		return IdlePrompt
	}
	return IdleNone
}

// Next is when the next action can fall due (for the caller's timer).
func (t *IdleTracker) Next() time.Time {
	if t.done {
		return time.Time{}
	}
	dl := t.lastInput.Add(ms(t.p.DisconnectAfterMs))
	if t.promptedAt.IsZero() {
		return t.lastInput.Add(ms(t.p.PromptAfterMs))
	}
	if g := t.promptedAt.Add(ms(t.p.PromptGraceMs)); g.Before(dl) {
		return g
	}
	return dl
}
