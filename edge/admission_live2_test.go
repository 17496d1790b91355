package edge

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/admission"
	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// TestEventsFileLive (point 4): an events file's grant lifts a user's cap,
// its institutional network lifts the network cap, a running concert's
// walk-up pool admits so many free walk-ups fleet-wide and sends the rest
// to the fallback, its booked attendees pass as paid, and its reserved
// sessions stay free for them: the matchmaker refuses everyone else those
// slots (event_reserved).
func TestEventsFileLive(t *testing.T) {
	rds := redistest.StartServer(t)
	clk := newTestClock()
	events := writeJSONFile(t, "events.json", map[string]any{
		"version": 1,
		"events": []any{map[string]any{"id": "gala", "pop": "us-east-1", "start": clk.Now().Add(-10 * time.Minute),
			"end": clk.Now().Add(2 * time.Hour), "prewarmMinutes": 30, "reservedSessions": 3, "walkUpSlots": 1,
			"priority": 2, "attendees": []string{"vip-1", "vip-2"}}},
		"grants":       []any{map[string]any{"subject": "teacher", "maxSessions": 4, "reason": "verified instructor"}},
		"institutions": []any{map[string]any{"name": "Loopback College", "networks": []string{"127.0.0.0/24"}}},
	})
	more := func(c *Config) {
		c.PxstreamEvents = events
		c.PxstreamTopology = topologyWith(t, 10, 0)
	}
	a := startEdge(t, pxFleet(rds, clk, more))
	b := startEdge(t, pxFleet(rds, clk, more))
	a.rawStreamers(t, "ue-", "us-east-1", 10)
	free := func(sub string) string {
		return a.accessToken(t, auth.Access{Subject: sub, Entitlement: "free", Region: "us-east"})
	}
	gala := map[string]any{"event_id": "gala"}
	expect := func(te *testEdge, who string, extra map[string]any, status int, reason string) {
		t.Helper()
		code, m := te.matchAs(t, free(who), extra)
		if code != status || (reason != "" && m["reason"] != reason) {
			t.Fatalf("%s: %d %v, want %d %s", who, code, m, status, reason)
		}
		if reason == "no_pop_available" {
			if rej, _ := m["rejected"].(map[string]any); rej["us-east-1"] != "event_reserved" {
				t.Fatalf("%s: rejected %v, want us-east-1 event_reserved", who, m["rejected"])
			}
		}
	}
	expect(a, "walker-1", gala, http.StatusOK, "")                                // the walk-up pool's one slot
	expect(b, "walker-2", gala, http.StatusServiceUnavailable, "fallback-walkup") // full, on any edge
	expect(a, "vip-1", gala, http.StatusOK, "")                                   // booked: a paid window
	for range 4 {
		expect(b, "teacher", nil, http.StatusOK, "") // grant: 4 sessions
	}
	expect(a, "teacher", nil, http.StatusConflict, "reject-user-cap")
	// 6 sessions of 10, 3 held for the attendees: 1 more for anyone else.
	expect(a, "filler", nil, http.StatusOK, "")
	expect(b, "late", nil, http.StatusServiceUnavailable, "no_pop_available")
	expect(a, "vip-2", gala, http.StatusOK, "") // the reserve is the attendees'
	// Nine sessions from 127.0.0.1: past the network cap of 8, inside the
	// institution's 64.
	if n := a.px.mm.Dashboard().Totals.Sessions; n != 8 {
		t.Fatalf("%d sessions, want 8", n)
	}
	expect(b, "vip-1", gala, http.StatusOK, "")
}

// TestLaunchSeesPOPLoad (point 5): the launch router gives a free user
// Pixel Streaming only where the match would take them — not at a POP at
// or past 85 % — while a paid user still gets it; the match's score counts
// the users queued for a POP and answers them as queue_position.
func TestLaunchSeesPOPLoad(t *testing.T) {
	te := startEdge(t, func(c *Config) {
		c.PxstreamAuth = "token"
		c.PxstreamTopology = topologyWith(t, 8, 0)
		c.PolicyFile = policyWith(t, func(p *admission.Policy) {
			// One admit, then nothing for a long while: a line forms.
			p.WaitingRoom.Regions["us-east-1"] = admission.Bucket{PerMinute: 0.001, Burst: 1}
		})
	})
	te.rawStreamers(t, "ue-", "us-east-1", 8)
	for i := range 7 { // 7 of 8: 8750 bp
		tok := te.accessToken(t, auth.Access{Subject: "payer-" + strconv.Itoa(i/2), Entitlement: "paid", Region: "us-east"})
		if code, m := te.matchAs(t, tok, nil); code != http.StatusOK {
			t.Fatalf("fill %d: %d %v", i, code, m)
		}
	}
	launch := func(tok string) map[string]any {
		code, d := te.call(t, http.MethodPost, "/api/v3/lilith/launch", tok, launchBody("us-ca", true, true))
		if code != http.StatusOK {
			t.Fatalf("launch: %d %v", code, d)
		}
		return d
	}
	free := launch(te.accessToken(t, auth.Access{Subject: "free-1", Entitlement: "free", Region: "us-ca"}))
	if free["selectedSurface"] != "fallback" || !slices.Contains(anyStrings(free["reasonCodes"]), "pop-workers-exhausted") {
		t.Fatalf("free user at 87.5 %%: %v, want the fallback (pop-workers-exhausted)", free)
	}
	paid := launch(te.accessToken(t, auth.Access{Subject: "paid-1", Entitlement: "paid", Region: "us-ca"}))
	if paid["selectedSurface"] != "pxstream" {
		t.Fatalf("paid user: %v, want pxstream", paid)
	}

	// A line for us-east-1 (its web lane: at 87.5 % the Pixel Streaming
	// lane does not drain at all): the first join takes the one token,
	// three wait.
	if code, st := te.call(t, http.MethodPost, "/api/v1/queue/arm", te.operator(t), map[string]any{"armed": true, "region": "us-east-1"}); code != http.StatusOK {
		t.Fatalf("arm: %d %v", code, st)
	}
	for i := range 4 {
		code, q := te.call(t, http.MethodPost, "/api/v1/queue/join", "", map[string]any{"clientRegion": "us-east", "lane": "web"})
		if code != http.StatusOK {
			t.Fatalf("join %d: %d %v", i, code, q)
		}
	}
	op := te.accessToken(t, auth.Access{Subject: "cmdr", Entitlement: "paid", Roles: []string{"operator"}})
	code, m := te.matchAs(t, op, nil) // a bypass lane: served now, ahead of the line
	if code != http.StatusOK || m["pop_id"] != "us-east-1" || m["queue_position"] != 3.0 {
		t.Fatalf("operator match: %d %v, want us-east-1 with queue_position 3", code, m)
	}
}

func anyStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// streamerByID finds the raw streamer a match leased.
func streamerByID(t *testing.T, sts []*rawStreamer, id string) *rawStreamer {
	t.Helper()
	for _, s := range sts {
		if s.id == id {
			return s
		}
	}
	t.Fatalf("no streamer %q", id)
	return nil
}

// TestAbuseScoredLive (point 3): the abuse classifier scores what the edge
// observes, fleet-wide and before any lease: a subject's match requests
// (a scripted loop comes back every 5 s to the millisecond) and the UE
// worker's reports of its input (mouse only, machine-regular cadence).
// The ban is audited, refuses the subject on every edge (403
// reject-abuse-ban) and ends its live stream; a safety-review verdict is
// audited and counted; a human with the same reconnect rhythm but human
// input is never refused.
func TestAbuseScoredLive(t *testing.T) {
	rds := redistest.StartServer(t)
	clk := newTestClock()
	// Start a minute into an observation window, so the loop stays in two.
	win := 10 * time.Minute
	clk.Advance(clk.Now().Truncate(win).Add(win + time.Minute).Sub(clk.Now()))
	auditLog, audit := auditTo(t)
	a := startEdge(t, pxFleet(rds, clk, audit))
	b := startEdge(t, pxFleet(rds, clk, audit))
	sts := a.rawStreamers(t, "ue-", "us-east-1", 6)
	tok := func(sub string) string {
		return a.accessToken(t, auth.Access{Subject: sub, Entitlement: "free", Region: "us-east"})
	}
	report := map[string]map[string]any{
		"bot":      {"events": 300, "spanMs": 10000, "jitterMs": 0.5, "mouse": 300, "keyboard": 0},
		"human":    {"events": 40, "spanMs": 10000, "jitterMs": 80, "mouse": 25, "keyboard": 15, "motion": 60, "zeroInertia": 3},
		"scripter": {"events": 500, "spanMs": 10000, "jitterMs": 20, "mouse": 0, "keyboard": 500},
	}
	players := map[string]*player{}
	for _, sub := range []string{"bot", "human", "scripter"} {
		code, m := a.matchAs(t, tok(sub), nil)
		if code != http.StatusOK {
			t.Fatalf("%s first match: %d %v", sub, code, m)
		}
		players[sub] = play(t, m)
		st := streamerByID(t, sts, str(m, "streamer_id"))
		msg := map[string]any{"type": "egbe.input.stats", "playerId": st.lastPlayer()}
		for k, v := range report[sub] {
			msg[k] = v
		}
		st.send(msg)
	}
	rdb := redisClient(t, rds)
	testwait.Within(t, 10*time.Second, "the workers' reports in the shared tallies", func() bool {
		for _, sub := range []string{"bot", "human", "scripter"} {
			key := "egbe:tally:abuse:" + sub + ":" + strconv.FormatInt(clk.Now().UnixMilli()/win.Milliseconds(), 10)
			if n, _ := rdb.HGet(t.Context(), key, "events").Int(); n == 0 {
				return false
			}
		}
		return true
	})
	// Five more matches each, 5 s apart, alternating edges.
	for i := 1; i <= 5; i++ {
		clk.Advance(5 * time.Second)
		te := []*testEdge{a, b}[i%2]
		for _, sub := range []string{"bot", "human", "scripter"} {
			code, m := te.matchAs(t, tok(sub), nil)
			switch {
			case sub == "bot" && i == 5:
				if code != http.StatusForbidden || m["reason"] != "reject-abuse-ban" || str(m, "fallback_url") == "" {
					t.Fatalf("bot's sixth match: %d %v, want 403 reject-abuse-ban", code, m)
				}
			case code == http.StatusForbidden:
				t.Fatalf("%s refused as abusive at match %d: %v", sub, i+1, m)
			case code != http.StatusOK && code != http.StatusConflict:
				t.Fatalf("%s match %d: %d %v", sub, i+1, code, m)
			}
		}
	}
	if bans := audits(t, auditLog, "operator.abuse.ban"); len(bans) != 1 || bans[0]["subject"] != "bot" {
		t.Fatalf("ban audits %v", bans)
	}
	if rev := audits(t, auditLog, "operator.abuse.safety_review"); len(rev) != 1 || rev[0]["subject"] != "scripter" {
		t.Fatalf("review audits %v", rev)
	}
	testwait.Within(t, 10*time.Second, "the bot's stream to end", func() bool { return players["bot"].closedWith() != nil })
	if e := players["bot"].got("egbe.session.ended"); e == nil || e["reason"] != "banned" {
		t.Fatalf("bot's end: %v", players["bot"].msgs)
	}
	for _, sub := range []string{"human", "scripter"} {
		if ce := players[sub].closedWith(); ce != nil {
			t.Fatalf("%s's stream ended: %v", sub, ce)
		}
	}
	clk.Advance(time.Hour) // long after its loop: the ban holds on any edge
	if code, m := b.matchAs(t, tok("bot"), nil); code != http.StatusForbidden {
		t.Fatalf("bot an hour later on edge B: %d %v", code, m)
	}
	if n, _ := a.metric(t, "egbe_admission_abuse_verdicts_total", map[string]string{"verdict": "ban"}); n+metricOf(t, b, "ban") != 1 {
		t.Fatalf("ban verdicts counted %v", n)
	}
}

func metricOf(t *testing.T, te *testEdge, verdict string) float64 {
	n, _ := te.metric(t, "egbe_admission_abuse_verdicts_total", map[string]string{"verdict": verdict})
	return n
}

// TestRoomRunsItself (point 6): on live signals the edge measures, the
// room arms itself (session-start success below 99.5 %), the abort ladder
// halves the admission bucket once start success stayed below 98 % for 15
// minutes — audited as operator.launch.surge_abort.executed — and unwinds
// it after its signal has been green for 30 minutes, on the fleet's Redis.
func TestRoomRunsItself(t *testing.T) {
	rds := redistest.StartServer(t)
	clk := newTestClock()
	auditLog, audit := auditTo(t)
	te := startEdge(t, pxFleet(rds, clk, audit, func(c *Config) {
		c.PolicyFile = policyWith(t, func(p *admission.Policy) { p.WaitingRoom.MinSamples = 2 })
	}))
	te.rawStreamers(t, "ue-", "us-east-1", 2)
	op := te.accessToken(t, auth.Access{Subject: "cmdr", Entitlement: "paid", Roles: []string{"operator"}})
	failed := func() float64 {
		n, _ := te.metric(t, "egbe_admission_session_starts_total", map[string]string{"outcome": "failed"})
		return n
	}
	surge := func() map[string]any { s, _ := te.queueState(t)["surge"].(map[string]any); return s }
	step := func() {
		t.Helper()
		at := clk.Now().UnixMilli()
		testwait.Within(t, 10*time.Second, "a controller step", func() bool { s := surge(); return s != nil && int64(s["at"].(float64)) >= at })
	}
	// Matches nobody plays, one every two minutes: each start fails when
	// its session token lapses. The room arms at once; the halve needs the
	// signal red for 15 minutes. Twelve (24 minutes) are enough when every
	// controller step sees the window's failures; on a loaded machine a
	// step may see too few samples to call the signal red, which restarts
	// the 15 minutes, so go on (up to 20) until the halve, and check below
	// that it came only after 15 red minutes.
	for i := 0; ; i++ {
		if code, m := te.matchAs(t, op, nil); code != http.StatusOK {
			t.Fatalf("match %d: %d %v", i, code, m)
		}
		clk.Advance(2*time.Minute + time.Second)
		testwait.Within(t, 10*time.Second, "the failed start counted", func() bool { return failed() >= float64(i+1) })
		step()
		if st := te.queueState(t); st["halved"] == true {
			if st["armedGlobal"] != true {
				t.Fatalf("halved but not armed: %v", st)
			}
			if i < 7 {
				t.Fatalf("halved after %d failed starts (%d minutes): before 15 red minutes", i+1, 2*(i+1))
			}
			break
		}
		if i == 19 {
			t.Fatalf("after 40 minutes of failed starts: %v, want armed and halved", te.queueState(t))
		}
	}
	ex := audits(t, auditLog, "operator.launch.surge_abort.executed")
	if len(ex) != 1 || ex[0]["action"] != "halve" || ex[0]["trigger"] != "start-success" || ex[0]["sustainedMs"].(float64) < 15*60*1000 {
		t.Fatalf("abort audits %v", ex)
	}
	// No more failures: green once they leave the 5-minute window, and the
	// halve unwinds 30 minutes later.
	for i := 0; te.queueState(t)["halved"] == true; i++ {
		if i == 45 {
			t.Fatal("the halve never unwound")
		}
		clk.Advance(time.Minute)
		step()
	}
	un := audits(t, auditLog, "operator.launch.surge_abort.unwound")
	if len(un) != 1 || un[0]["greenMs"].(float64) < 30*60*1000 {
		t.Fatalf("unwind audits %v", un)
	}
}

// TestAdmissionTelemetry (point 11): one launch is one decision, counted
// with its telemetry tier (its reasons counted apart); a played match is a
// session start with a cold join; a realtime hello is a handshake timed;
// routes are timed and counted by status class; the room exports median
// wait and admit ceiling; a room admission that meets backpressure at the
// match is an admit-into-backpressure.
func TestAdmissionTelemetry(t *testing.T) {
	clk := newTestClock()
	te := startEdge(t, chain(withClock(clk), func(c *Config) {
		c.PxstreamAuth = "token"
		c.PxstreamTopology = topologyWith(t, 3, 0)
	}))
	te.rawStreamers(t, "ue-", "us-east-1", 3)
	val := func(fam string, labels map[string]string) float64 { n, _ := te.metric(t, fam, labels); return n }
	if code, d := te.call(t, http.MethodPost, "/api/v3/lilith/launch", "", launchBody("gb", false, true)); code != http.StatusOK {
		t.Fatalf("launch: %d %v", code, d)
	}
	if n := val("egbe_admission_launch_decisions_total", nil); n != 1 {
		t.Fatalf("%v decisions for one launch", n)
	}
	if n := val("egbe_admission_launch_decisions_total", map[string]string{"surface": "fallback", "tier": "tier_2_webgpu"}); n != 1 {
		t.Fatal("decision not counted with its tier")
	}
	if n := val("egbe_admission_launch_reasons_total", map[string]string{"reason": "webgpu-available"}); n != 1 {
		t.Fatal("reason not counted")
	}
	if n := val("egbe_admission_http_duration_seconds", map[string]string{"route": "launch"}); n != 1 {
		t.Fatalf("launch latency samples %v", n)
	}
	op := te.accessToken(t, auth.Access{Subject: "cmdr", Entitlement: "paid", Roles: []string{"operator"}})
	code, m := te.matchAs(t, op, nil)
	if code != http.StatusOK {
		t.Fatalf("match: %d %v", code, m)
	}
	play(t, m)
	testwait.Within(t, 10*time.Second, "a session start and a cold join", func() bool {
		return val("egbe_admission_session_starts_total", map[string]string{"pop": "us-east-1", "outcome": "started"}) == 1 &&
			val("egbe_admission_cold_join_seconds", map[string]string{"pop": "us-east-1"}) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := te.dial(t, "websocket", false)
	if _, err := c.Hello(ctx, helloFor(te.devToken(t, "hello-timed"))); err != nil {
		t.Fatal(err)
	}
	if n := val("egbe_shard_handshake_seconds", map[string]string{"outcome": "accepted"}); n < 1 {
		t.Fatal("handshake not timed")
	}
	// A free user queues in an armed us-east-1 and is admitted; before it
	// plays, paid bypass users take the POP to 100 %: its match meets
	// backpressure.
	if code, st := te.call(t, http.MethodPost, "/api/v1/queue/arm", op, map[string]any{"armed": true, "region": "us-east-1"}); code != http.StatusOK {
		t.Fatalf("arm: %d %v", code, st)
	}
	fan := te.accessToken(t, auth.Access{Subject: "fan", Entitlement: "free", Region: "us-east"})
	code, q := te.call(t, http.MethodPost, "/api/v1/queue/join", fan, map[string]any{"lane": "pxstream"})
	if code != http.StatusOK || str(q, "admissionTicket") == "" {
		t.Fatalf("join: %d %v", code, q)
	}
	op2 := te.accessToken(t, auth.Access{Subject: "cmdr-2", Entitlement: "paid", Roles: []string{"operator"}})
	for _, tk := range []string{op, op2} {
		if code, m := te.matchAs(t, tk, nil); code != http.StatusOK {
			t.Fatalf("fill: %d %v", code, m)
		}
	}
	code, m = te.matchAs(t, fan, nil, "X-Egbe-Admission", str(q, "admissionTicket"))
	if code != http.StatusServiceUnavailable || m["reason"] != "fallback-backpressure" {
		t.Fatalf("admitted fan at 100 %%: %d %v", code, m)
	}
	if n := val("egbe_admission_admit_into_backpressure_total", map[string]string{"region": "us-east-1", "where": "match"}); n != 1 {
		t.Fatalf("admit-into-backpressure %v", n)
	}
	if n := val("egbe_admission_http_responses_total", map[string]string{"route": "match", "code": "5xx"}); n != 1 {
		t.Fatalf("match 5xx counted %v", n)
	}
	if _, ok := te.metric(t, "egbe_admission_median_wait_seconds", map[string]string{"region": "us-east-1"}); !ok {
		t.Fatal("no median wait")
	}
	testwait.Within(t, 10*time.Second, "the admit ceiling", func() bool {
		n, ok := te.metric(t, "egbe_admission_admit_ceiling_per_minute", nil)
		return ok && n == 600
	})
}
