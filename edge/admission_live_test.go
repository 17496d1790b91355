package edge

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// pxFleet is a token-mode edge on the given Redis, on clk.
func pxFleet(rds *redistest.Server, clk *testClock, more ...func(*Config)) func(*Config) {
	return chain(append([]func(*Config){func(c *Config) {
		c.RedisURL = "redis://" + rds.Addr + "/0"
		c.JWTSecret = strings.Repeat("admission-live-", 3)
		c.PxstreamAuth = "token"
	}, withClock(clk)}, more...)...)
}

// TestFreeMinutesCharged (issue 13, point 1): a free session is charged a
// minute per started minute while it streams, on the shared budget; at
// 120 minutes the edge ends it (egbe.session.ended "budget", close 1011)
// and every edge of the fleet refuses the user with 402
// reject-free-budget and the fallback, until the next UTC day.
func TestFreeMinutesCharged(t *testing.T) {
	rds := redistest.StartServer(t)
	clk := newTestClock()
	// Start at 00:10 UTC so 121 minutes stay inside one day.
	clk.Advance(clk.Now().UTC().Truncate(24 * time.Hour).Add(24*time.Hour + 10*time.Minute).Sub(clk.Now()))
	a := startEdge(t, pxFleet(rds, clk))
	b := startEdge(t, pxFleet(rds, clk))
	a.rawStreamers(t, "ue-", "us-east-1", 2)
	tok := a.accessToken(t, auth.Access{Subject: "free-fan", Entitlement: "free", Region: "us-east"})

	code, m := a.matchAs(t, tok, nil)
	if code != http.StatusOK {
		t.Fatalf("match: %d %v", code, m)
	}
	p := play(t, m)
	clk.Advance(30 * time.Minute)
	testwait.Within(t, 10*time.Second, "30 minutes charged", func() bool {
		return usedMinutes(t, rds, "free-fan", clk.Now()) == 30
	})
	if p.closedWith() != nil {
		t.Fatalf("closed after 30 minutes: %v", p.closedWith())
	}
	clk.Advance(90*time.Minute + time.Second) // 121 started minutes
	testwait.Within(t, 10*time.Second, "the session ended for its budget", func() bool { return p.closedWith() != nil })
	if e := p.got("egbe.session.ended"); e == nil || e["reason"] != "budget" {
		t.Fatalf("ended message %v", p.msgs)
	}
	if ce := p.closedWith(); ce.Code != 1011 || ce.Text != "budget" {
		t.Fatalf("close %v", ce)
	}
	for _, te := range []*testEdge{a, b} {
		code, m := te.matchAs(t, tok, nil)
		if code != http.StatusPaymentRequired || m["reason"] != "reject-free-budget" || str(m, "fallback_url") == "" {
			t.Fatalf("match after the budget: %d %v, want 402 reject-free-budget with a fallback", code, m)
		}
	}
	clk.Advance(24 * time.Hour)
	tok = a.accessToken(t, auth.Access{Subject: "free-fan", Entitlement: "free", Region: "us-east"}) // the old one lapsed
	if code, m := b.matchAs(t, tok, nil); code != http.StatusOK {
		t.Fatalf("next day: %d %v", code, m)
	}
}

// usedMinutes reads the day's charged minutes from the shared budget.
func usedMinutes(t *testing.T, rds *redistest.Server, subject string, now time.Time) int64 {
	t.Helper()
	c := redisClient(t, rds)
	n, _ := c.Get(t.Context(), "egbe:budget:pxfree:"+subject+":"+now.UTC().Format("2006-01-02")).Int64()
	return n
}

// TestEntitlementFromTokenOnly (point 2): with a token, its claim is the
// only entitlement — a token without the paid claim is free whatever the
// body says — and its subject the only identity; prod refuses a match
// without a token.
func TestEntitlementFromTokenOnly(t *testing.T) {
	// us-east-1 has 2 sessions, 1 held back as paid headroom: with one
	// session taken, only a paid caller gets the second.
	te := startEdge(t, func(c *Config) {
		c.PxstreamAuth = "token"
		c.PxstreamTopology = topologyWith(t, 2, 1)
	})
	te.rawStreamers(t, "ue-", "us-east-1", 2)
	paid := te.accessToken(t, auth.Access{Subject: "payer", Entitlement: "paid", Region: "us-east"})
	if code, m := te.matchAs(t, paid, nil); code != http.StatusOK {
		t.Fatalf("paid: %d %v", code, m)
	}
	claimless := te.accessToken(t, auth.Access{Subject: "claimless", Region: "us-east"})
	code, m := te.matchAs(t, claimless, map[string]any{"entitlement": "paid", "user_id": "payer"})
	rej, _ := m["rejected"].(map[string]any)
	if code != http.StatusServiceUnavailable || rej["us-east-1"] != "paid_headroom" {
		t.Fatalf("token without the paid claim, body paid: %d %v, want the free tier's 503 (paid_headroom)", code, m)
	}
	if code, m := te.matchAs(t, paid, nil); code != http.StatusOK {
		t.Fatalf("paid second: %d %v", code, m)
	}
	// The subject is the token's: "payer" holds 2 sessions (cap 2), and a
	// claimless caller naming payer in the body is not payer.
	if code, m := te.matchAs(t, paid, nil); code != http.StatusConflict {
		t.Fatalf("payer's third: %d %v, want 409", code, m)
	}

	prod := startProdEdge(t, nil)
	if code, m := prod.matchAs(t, "", map[string]any{"entitlement": "paid", "user_id": "anyone"}); code != http.StatusUnauthorized || m["reason"] != "access_token_required" {
		t.Fatalf("prod without a token: %d %v", code, m)
	}
}

// startProdEdge runs a prod edge with a real certificate, secret and a
// reference shard to serve (prod is only ready with one).
func startProdEdge(t *testing.T, mutate func(*Config)) *testEdge {
	t.Helper()
	shardAddr := startRefShard(t)
	return startEdge(t, chain(func(c *Config) {
		c.Mode = ModeProd
		c.JWTSecret = testJWTSecret
		c.TURNSecret = testTURNSecret
		c.DevShard = false
		c.PxstreamAuth = "token"
		c.TLSCert, c.TLSKey = writeTestCert(t)
		c.Shards = map[string]string{"ref": shardAddr}
		c.Instances = map[string]string{"orun-grove": "ref"}
	}, mutate))
}

// TestProdRefusesPxstreamAuthNone (point 10): prod will not run Pixel
// Streaming without tokens unless a flag says, by name, it is insecure.
func TestProdRefusesPxstreamAuthNone(t *testing.T) {
	cert, key := writeTestCert(t)
	env := []string{"EGBE_MODE=prod", "EGBE_JWT_SECRET=" + testJWTSecret, "EGBE_TURN_SECRET=" + testTURNSecret}
	base := []string{"--tls-cert", cert, "--tls-key", key, "--pxstream-auth", "none", "--http", "127.0.0.1:0", "--https", "127.0.0.1:0",
		"--ice-udp", "127.0.0.1:0", "--streamer-ws", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--turn", "127.0.0.1:0", "--sfu-ws", "127.0.0.1:0"}
	cfg, err := Load(base, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--insecure-pxstream-auth-none") {
		t.Fatalf("prod with --pxstream-auth none started: %v", err)
	}
	cfg, err = Load(append(base, "--insecure-pxstream-auth-none"), env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("with the insecure flag: %v", err)
	}
	e.closeAll()
	cfg, err = Load(base, append(env, "EGBE_INSECURE_PXSTREAM_AUTH_NONE=true"), io.Discard)
	if err != nil || !cfg.InsecurePxstreamAuthNone {
		t.Fatalf("env: %+v %v", cfg.InsecurePxstreamAuthNone, err)
	}
}

// TestDensitySignatureThroughLaunch (point 12): the WebGPU fallback's
// density signature follows the reference's backfill, max(visible*3, 12).
func TestDensitySignatureThroughLaunch(t *testing.T) {
	te := startEdge(t, nil)
	for _, tc := range []struct {
		webGpu bool
		want   string
	}{{true, "tier2-density:webgpu:balanced:visible12:backfill36"}, {false, "tier2-density:webgl2:constrained:visible6:backfill18"}} {
		code, d := te.call(t, http.MethodPost, "/api/v3/lilith/launch", "", launchBody("gb", false, tc.webGpu))
		target, _ := d["target"].(map[string]any)
		budget, _ := target["rendererBudget"].(map[string]any)
		if code != http.StatusOK || budget["densitySignature"] != tc.want {
			t.Fatalf("launch webGpu=%v: %d %v, want %s", tc.webGpu, code, d, tc.want)
		}
	}
}

// launchBody is a launch request for a browser in region with WebRTC and
// H.264; fast selects a downlink above the 8 Mbit/s floor.
func launchBody(region string, fast, webGpu bool) map[string]any {
	mbps := 2.0
	if fast {
		mbps = 50
	}
	return map[string]any{
		"v1UserId": "u-1", "tenantId": "tara-studio", "clientRegion": region,
		"nativeClient": map[string]any{"installed": false},
		"browser":      map[string]any{"webRtc": true, "codecs": []string{"H264"}, "webGpu": webGpu, "webGl2": true},
		"network":      map[string]any{"sustainedDownlinkMbps": mbps, "probeDurationMs": 3000},
		"region":       map[string]any{"pixelStreamingRestricted": false},
		"pops":         []any{},
	}
}

// readyz answers /readyz: its status and reasons.
func (te *testEdge) readyz(t *testing.T) (int, []string) {
	t.Helper()
	resp, err := http.Get(te.adminURL("/readyz"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Reasons []string `json:"reasons"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Reasons
}

func (te *testEdge) waitReady(t *testing.T, what string, wantReason string) {
	t.Helper()
	testwait.Within(t, 15*time.Second, what, func() bool {
		code, reasons := te.readyz(t)
		if wantReason == "" {
			return code == http.StatusOK
		}
		return code == http.StatusServiceUnavailable && slices.Contains(reasons, wantReason)
	})
}

// TestReadyzFollowsState (point 9): /readyz is unready while Redis is
// down, frozen, or flushed (the waiting room fails closed until re-armed),
// and ready again without a restart; /healthz stays 200 throughout. A prod
// edge with no shard is unready.
func TestReadyzFollowsState(t *testing.T) {
	rds := redistest.StartServer(t)
	te := startEdge(t, func(c *Config) { c.RedisURL = "redis://" + rds.Addr + "/0" })
	health := func() int {
		resp, err := http.Get(te.adminURL("/healthz"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	rds.Freeze()
	te.waitReady(t, "unready while Redis is frozen", "state_store_unreachable")
	if health() != http.StatusOK {
		t.Fatal("healthz failed while Redis was frozen")
	}
	rds.Thaw()
	te.waitReady(t, "ready once Redis answers again", "")
	rds.Kill()
	te.waitReady(t, "unready while Redis is down", "state_store_unreachable")
	if health() != http.StatusOK {
		t.Fatal("healthz failed while Redis was down")
	}
	rds.Restart() // back, empty: the waiting room's state is lost
	te.waitReady(t, "unready while the room fails closed", "waiting_room_state_lost")
	if code, st := te.call(t, http.MethodPost, "/api/v1/queue/rearm", te.operator(t), map[string]any{"reason": "test"}); code != http.StatusOK {
		t.Fatalf("rearm: %d %v", code, st)
	}
	te.waitReady(t, "ready after the re-arm", "")

	// Prod with no shard at all: nothing to serve.
	prod := startEdgeUnready(t, func(c *Config) {
		c.Mode = ModeProd
		c.JWTSecret = testJWTSecret
		c.TURNSecret = testTURNSecret
		c.DevShard = false
		c.PxstreamAuth = "token"
		c.TLSCert, c.TLSKey = writeTestCert(t)
	})
	prod.waitReady(t, "prod without shards unready", "no_shards")
}

// startEdgeUnready is startEdge without waiting for readiness.
func startEdgeUnready(t *testing.T, mutate func(*Config)) *testEdge {
	t.Helper()
	cfg := testConfig()
	mutate(&cfg)
	e, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	te := &testEdge{Edge: e, addrs: e.Addrs(), cancel: cancel, done: make(chan error, 1)}
	go func() { te.done <- e.Run(ctx) }()
	t.Cleanup(func() { te.stop(t) })
	return te
}

// TestMatchHonoursTheRoom (point 7): with the room armed, the match wants
// an admission ticket exactly as launch does — a plain token is refused
// (429 admission_ticket_required, with the fallback), a ticket from the
// queue passes once and only for its holder, bypass lanes (operator, a
// booked attendee's pre-warm) pass; after Redis is flushed the match fails
// closed like everything else until an operator re-arms.
func TestMatchHonoursTheRoom(t *testing.T) {
	rds := redistest.StartServer(t)
	clk := newTestClock()
	events := writeJSONFile(t, "events.json", map[string]any{"version": 1, "events": []any{map[string]any{
		"id": "gala", "pop": "us-east-1", "start": clk.Now().Add(20 * time.Minute), "end": clk.Now().Add(3 * time.Hour),
		"prewarmMinutes": 30, "reservedSessions": 0, "walkUpSlots": 10, "priority": 1, "attendees": []string{"vip"}}}})
	te := startEdge(t, pxFleet(rds, clk, func(c *Config) { c.PxstreamEvents = events }))
	te.rawStreamers(t, "ue-", "us-east-1", 4)
	if code, st := te.call(t, http.MethodPost, "/api/v1/queue/arm", te.operator(t), map[string]any{"armed": true}); code != http.StatusOK {
		t.Fatalf("arm: %d %v", code, st)
	}
	fan := te.accessToken(t, auth.Access{Subject: "fan", Entitlement: "paid", Region: "us-east"})
	code, m := te.matchAs(t, fan, nil)
	if code != http.StatusTooManyRequests || m["reason"] != "admission_ticket_required" || str(m, "fallback_url") == "" {
		t.Fatalf("plain token with the room armed: %d %v", code, m)
	}
	// Launch answers the same.
	if code, d := te.call(t, http.MethodPost, "/api/v3/lilith/launch", fan, launchBody("us-ca", true, true)); code != http.StatusTooManyRequests || d["code"] != "admission_ticket_required" {
		t.Fatalf("launch: %d %v", code, d)
	}
	code, q := te.call(t, http.MethodPost, "/api/v1/queue/join", fan, map[string]any{"clientRegion": "us-east", "lane": "pxstream"})
	ticket := str(q, "admissionTicket")
	if code != http.StatusOK || q["status"] != "admitted" || ticket == "" {
		t.Fatalf("join: %d %v", code, q)
	}
	other := te.accessToken(t, auth.Access{Subject: "other", Entitlement: "paid", Region: "us-east"})
	if code, m := te.matchAs(t, other, nil, "X-Egbe-Admission", ticket); code != http.StatusForbidden || m["reason"] != "admission_denied" {
		t.Fatalf("someone else's ticket: %d %v", code, m)
	}
	if code, m := te.matchAs(t, fan, nil, "X-Egbe-Admission", ticket); code != http.StatusOK {
		t.Fatalf("with the ticket: %d %v", code, m)
	}
	if code, m := te.matchAs(t, te.operator(t), nil); code != http.StatusOK {
		t.Fatalf("operator lane: %d %v", code, m)
	}
	vip := te.accessToken(t, auth.Access{Subject: "vip", Region: "us-east"})
	if code, m := te.matchAs(t, vip, nil); code != http.StatusOK {
		t.Fatalf("booked attendee in the pre-warm window: %d %v", code, m)
	}
	if err := redisClient(t, rds).FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	testwait.Within(t, 10*time.Second, "the match to fail closed", func() bool {
		clk.Advance(time.Second) // past the room's 1 s meta cache
		code, m := te.matchAs(t, fan, nil)
		return code == http.StatusServiceUnavailable && m["reason"] == "waiting_room_state_lost"
	})
	if code, d := te.call(t, http.MethodPost, "/api/v3/lilith/launch", fan, launchBody("us-ca", true, true)); code != http.StatusServiceUnavailable || d["code"] != "waiting_room_state_lost" {
		t.Fatalf("launch after the flush: %d %v", code, d)
	}
	if code, st := te.call(t, http.MethodPost, "/api/v1/queue/rearm", te.operator(t), map[string]any{"reason": "after the flush"}); code != http.StatusOK {
		t.Fatalf("rearm: %d %v", code, st)
	}
	if code, m := te.matchAs(t, fan, nil); code != http.StatusTooManyRequests {
		t.Fatalf("after the re-arm, no ticket: %d %v", code, m)
	}
}
