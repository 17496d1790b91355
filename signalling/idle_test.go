package signalling

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/testwait"
)

// testIdle: prompt after 90 s without input, disconnect 60 s after an
// unanswered prompt or 150 s after the last input.
type testIdle struct{ last, prompted time.Time }

func (m *testIdle) Input(now time.Time) { m.last, m.prompted = now, time.Time{} }
func (m *testIdle) DisconnectAt() time.Time {
	if !m.prompted.IsZero() {
		return m.prompted.Add(60 * time.Second)
	}
	return m.last.Add(150 * time.Second)
}
func (m *testIdle) Tick(now time.Time) IdleStep {
	switch {
	case !now.Before(m.DisconnectAt()):
		return IdleDisconnect
	case m.prompted.IsZero() && now.Sub(m.last) >= 90*time.Second:
		m.prompted = now
		return IdlePrompt
	}
	return IdleNone
}

// TestIdleLifecycle: a leased session that speaks the extension (its
// streamer reported input once) is prompted after 90 s without input,
// input (from the streamer) answers the prompt, and an unanswered prompt
// disconnects the player (1011 idle), releases the streamer, and leaves the
// session's token unable to subscribe again.
func TestIdleLifecycle(t *testing.T) {
	clk := newFakeClock()
	signer := mustSigner(t, secret, clk.Now)
	cfg := Default()
	cfg.Auth = AuthToken
	cfg.IdleTick = 5 * time.Millisecond
	h := newHarness(t, cfg, Deps{Signer: signer, Now: clk.Now,
		Idle: func(start time.Time) IdleMachine { return &testIdle{last: start} }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	st := h.streamerUp("S", streamerToken(t, signer, "ue-1", "us-east-1", "H264"), "ue-1")
	if err := h.srv.Registry().Lease("ue-1", "s1", clk.Now().Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	tok := sessionToken(t, signer, "s1", "ue-1")
	p := h.playerUp("P", tok)
	p.send(`{"type":"subscribe","streamerId":"ue-1"}`)
	pid := st.expect("playerConnected")["playerId"].(string)
	st.send(`{"type":"egbe.idle.input","playerId":"` + pid + `"}`) // enrols the session
	st.sync()

	clk.Add(91 * time.Second)
	prompt := p.expect("egbe.idle.prompt")
	if !strings.Contains(prompt["message"].(string), "Still there?") || prompt["disconnectAtMs"] == nil {
		t.Fatalf("prompt %v", prompt)
	}
	// The streamer saw input on the player's data channel: the prompt is answered.
	st.send(`{"type":"egbe.idle.input","playerId":"` + pid + `"}`)
	st.sync()
	clk.Add(61 * time.Second) // past the first prompt's grace, but input came in between
	p.send(`{"type":"ping","time":1}`)
	p.expectRaw(`{"type":"pong","time":1}`)

	clk.Add(30 * time.Second) // 91 s after the input: prompted again
	p.expect("egbe.idle.prompt")
	clk.Add(61 * time.Second) // unanswered
	d := p.expect("egbe.idle.disconnect")
	if d["reason"] != "idle" || d["reconnect"] != "new-match" {
		t.Fatalf("disconnect %v", d)
	}
	p.expectClose(CloseDisconnectPlayer, "idle")
	st.expect("playerDisconnected")
	testwait.For(t, "the streamer back in the pool", func() bool {
		info, _ := h.srv.Registry().Get("ue-1")
		return info.State == StateIdle
	})
	// The session cannot take the streamer again (a token for it minted now,
	// so it has not simply expired): a new match is needed.
	again := h.playerUp("P2", sessionToken(t, signer, "s1", "ue-1"))
	again.send(`{"type":"subscribe","streamerId":"ue-1"}`)
	again.expectRaw(`{"type":"subscribeFailed","message":"Session ended for inactivity: a new match is required."}`)
}

// TestIdleNeedsTheExtension: a session whose peers never speak the idle
// extension (an unmodified Epic frontend and UE worker: input rides the
// data channel the broker never sees) is not prompted nor cut at 150 s;
// EndSession (the edge's budget) still ends it, and its token can no longer
// subscribe.
func TestIdleNeedsTheExtension(t *testing.T) {
	clk := newFakeClock()
	signer := mustSigner(t, secret, clk.Now)
	cfg := Default()
	cfg.Auth = AuthToken
	cfg.IdleTick = 5 * time.Millisecond
	h := newHarness(t, cfg, Deps{Signer: signer, Now: clk.Now,
		Idle: func(start time.Time) IdleMachine { return &testIdle{last: start} }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	st := h.streamerUp("S", streamerToken(t, signer, "ue-1", "us-east-1", "H264"), "ue-1")
	if err := h.srv.Registry().Lease("ue-1", "s1", clk.Now().Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	p := h.playerUp("P", sessionToken(t, signer, "s1", "ue-1"))
	p.send(`{"type":"subscribe","streamerId":"ue-1"}`)
	st.expect("playerConnected")
	for i := range 5 { // 250 s of edge time, 50 s at a time, ticked in between
		clk.Add(50 * time.Second)
		p.send(`{"type":"ping","time":` + string(rune('1'+i)) + `}`)
		p.expectRaw(`{"type":"pong","time":` + string(rune('1'+i)) + `}`)
	}
	if info, _ := h.srv.Registry().Get("ue-1"); info.State != StateStreaming {
		t.Fatalf("after 250 s without the extension: %+v, want streaming", info)
	}
	if !h.srv.EndSession("s1", EndBudget) {
		t.Fatal("EndSession found no player")
	}
	e := p.expect("egbe.session.ended")
	if e["reason"] != EndBudget || e["reconnect"] != "new-match" {
		t.Fatalf("ended %v", e)
	}
	p.expectClose(CloseDisconnectPlayer, EndBudget)
	again := h.playerUp("P2", sessionToken(t, signer, "s1", "ue-1"))
	again.send(`{"type":"subscribe","streamerId":"ue-1"}`)
	again.expectRaw(`{"type":"subscribeFailed","message":"Session ended: today's free streaming minutes are used up."}`)
}
