package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/redisstate"
)

type utilMap struct {
	mu sync.Mutex
	m  map[string]int
}

func (u *utilMap) RegionUtilisationBP(region string) (int, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	bp, ok := u.m[region]
	return bp, ok
}

func (u *utilMap) set(region string, bp int) {
	u.mu.Lock()
	u.m[region] = bp
	u.mu.Unlock()
}

type healthCeil float64

func (h healthCeil) AdmitCeilingPerMinute() (float64, bool) { return float64(h), h >= 0 }

type roomEnv struct {
	t      *testing.T
	pol    *Policy
	room   *Room
	wipe   func()
	signer *auth.Signer
	audit  *bytes.Buffer
	util   *utilMap
	mux    *http.ServeMux
	h      *HandshakeAdmitter

	mu  sync.Mutex
	now time.Time
}

func (e *roomEnv) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *roomEnv) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mu.Unlock()
}

type queueBackend struct {
	name string
	mk   func(t *testing.T) (state.Queue, func())
}

func queueBackends(t *testing.T) []queueBackend {
	srv := redistest.StartServer(t)
	return []queueBackend{
		{"memory", func(*testing.T) (state.Queue, func()) { q := state.NewMemoryQueue(); return q, q.Wipe }},
		{"redis", func(t *testing.T) (state.Queue, func()) {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = c.Close() })
			c.FlushAll(context.Background())
			q, err := redisstate.NewQueue(context.Background(), redisstate.New(c, redisstate.Options{}), true)
			if err != nil {
				t.Fatal(err)
			}
			return q, func() { c.FlushAll(context.Background()) }
		}},
	}
}

func newRoomEnv(t *testing.T, b queueBackend) *roomEnv {
	e := &roomEnv{t: t, now: clock0, audit: &bytes.Buffer{}, util: &utilMap{m: map[string]int{}}}
	p := DefaultPolicy()
	p.WaitingRoom.MetaCacheMs = 0
	e.pol = p
	signer, err := auth.New(bytes.Repeat([]byte("k"), 32), e.clock)
	if err != nil {
		t.Fatal(err)
	}
	e.signer = signer
	q, wipe := b.mk(t)
	e.wipe = wipe
	for _, r := range []string{"us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1", "ap-south-1", "ap-southeast-2", "sa-east-1"} {
		e.util.m[r] = 0
	}
	e.room, err = NewRoom(p, RoomDeps{Queue: q, Signer: signer, Utilisation: e.util, Audit: NewAuditor(e.audit, e.clock), Now: e.clock,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.mux = http.NewServeMux()
	(&Handlers{Policy: p, Resolver: NewResolver(p, nil, e.clock, nil), Room: e.room, Signer: signer}).Register(e.mux)
	e.h = NewHandshakeAdmitter(p, state.NewMemoryLeases(), e.room, e.clock, nil)
	return e
}

func (e *roomEnv) token(sub, region string, roles ...string) string {
	tok, err := e.signer.IssueAccess(auth.Access{Subject: sub, Region: region, Roles: roles, Tenant: "tara-studio"}, time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

func (e *roomEnv) do(method, path, bearer, body string, hdr ...string) (int, map[string]any) {
	e.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	e.mux.ServeHTTP(rec, req)
	var out map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out
}

func (e *roomEnv) arm(region string) {
	e.t.Helper()
	body := `{"armed":true}`
	if region != "" {
		body = `{"armed":true,"region":"` + region + `"}`
	}
	if code, out := e.do("POST", "/api/v1/queue/arm", e.token("op", "", "operator"), body); code != 200 {
		e.t.Fatalf("arm: %d %v", code, out)
	}
}

func (e *roomEnv) guarded() http.Handler {
	return e.room.Guard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
}

func (e *roomEnv) guard(path string, hdr ...string) int {
	req := httptest.NewRequest("POST", path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	e.guarded().ServeHTTP(rec, req)
	return rec.Code
}

func TestRoom(t *testing.T) {
	ctx := context.Background()
	for _, b := range queueBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Run("DisarmedIsOpen", func(t *testing.T) {
				e := newRoomEnv(t, b)
				if code, out := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"de"}`); code != 200 || out["status"] != "open" || out["region"] != "eu-west-1" {
					t.Fatalf("%d %v", code, out)
				}
				if c := e.guard("/api/v3/lilith/launch", HeaderClientRegion, "de"); c != http.StatusTeapot {
					t.Fatalf("guard %d", c)
				}
			})
			t.Run("JoinAdmitUse", func(t *testing.T) {
				e := newRoomEnv(t, b)
				e.arm("de")
				if c := e.guard("/api/v3/lilith/launch", HeaderClientRegion, "de"); c != 429 {
					t.Fatalf("armed guard without ticket: %d", c)
				}
				if c := e.guard("/api/v3/lilith/launch", HeaderClientRegion, "us-ca"); c != http.StatusTeapot {
					t.Fatalf("other region not armed: %d", c)
				}
				code, out := e.do("POST", "/api/v1/queue/join", e.token("alice", "de"), `{"lane":"web"}`)
				if code != 200 || out["status"] != "admitted" || out["admissionTicket"] == nil || out["ticket"] == nil {
					t.Fatalf("join %d %v", code, out)
				}
				adm := out["admissionTicket"].(string)
				// Realtime handshake spends the admission; the guard accepts it too (idempotent use).
				rel, err := e.h.Admit(ctx, HandshakeRequest{SessionID: "s1", Access: auth.Access{Subject: "alice", Region: "de"},
					ClientIP: netip.MustParseAddr("10.1.1.1"), AdmissionTicket: adm})
				if err != nil {
					t.Fatal(err)
				}
				rel()
				rel()
				if c := e.guard("/api/v3/lilith/launch", HeaderClientRegion, "de", HeaderAdmission, adm); c != http.StatusTeapot {
					t.Fatalf("guard with admission: %d", c)
				}
				// Someone else's admission ticket is refused at the handshake.
				_, err = e.h.Admit(ctx, HandshakeRequest{SessionID: "s2", Access: auth.Access{Subject: "mallory", Region: "de"},
					ClientIP: netip.MustParseAddr("10.1.1.2"), AdmissionTicket: adm})
				if codec.CodeOf(err) != codec.CodeAdmissionDenied {
					t.Fatalf("foreign ticket: %v", err)
				}
				_, err = e.h.Admit(ctx, HandshakeRequest{SessionID: "s3", Access: auth.Access{Subject: "bob", Region: "de"},
					ClientIP: netip.MustParseAddr("10.1.1.3")})
				if codec.CodeOf(err) != codec.CodeTicketRequired {
					t.Fatalf("no ticket: %v", err)
				}
			})
			t.Run("ForgedAndExpiredTickets", func(t *testing.T) {
				e := newRoomEnv(t, b)
				e.arm("")
				_, out := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"de"}`)
				ticket := out["ticket"].(string)
				other, _ := auth.New(bytes.Repeat([]byte("x"), 32), e.clock)
				forged, _ := other.IssueQueueTicket(auth.QueueTicket{TicketID: "t", Region: "eu-west-1", Epoch: "1-x"}, time.Hour)
				forgedAdm, _ := other.IssueAdmissionTicket(auth.AdmissionTicket{TicketID: "t", Region: "eu-west-1"}, time.Minute)
				for name, tok := range map[string]string{"forged": forged, "garbage": "a.b.c", "tampered": ticket[:len(ticket)-3] + "AAA"} {
					if code, _ := e.do("POST", "/api/v1/queue/status", "", `{"ticket":"`+tok+`"}`); code != 400 {
						t.Fatalf("%s queue ticket: %d", name, code)
					}
				}
				if c := e.guard("/x", HeaderClientRegion, "de", HeaderAdmission, forgedAdm); c != 403 {
					t.Fatalf("forged admission ticket: %d", c)
				}
				e.advance(4*time.Hour + 3*time.Second) // past the 2 s verification leeway
				if code, _ := e.do("POST", "/api/v1/queue/status", "", `{"ticket":"`+ticket+`"}`); code != 400 {
					t.Fatalf("expired queue ticket: %d", code)
				}
			})
			t.Run("LadderAndPause", func(t *testing.T) {
				e := newRoomEnv(t, b)
				e.arm("")
				e.util.set("eu-west-1", 9000)
				_, out := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"de"}`)
				if out["status"] != "paused" || out["fallbackFirst"] != true {
					t.Fatalf(">= 90 %%: %v", out)
				}
				e.util.set("eu-west-1", 8500)
				_, px := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"de","lane":"pxstream"}`)
				if px["status"] != "paused" {
					t.Fatalf(">= 85 %% pxstream: %v", px)
				}
				_, web := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"de","lane":"web"}`)
				if web["status"] != "admitted" {
					t.Fatalf(">= 85 %% web: %v", web)
				}
				e.util.set("eu-west-1", 7000)
				_, st := e.do("POST", "/api/v1/queue/status", "", `{"ticket":"`+px["ticket"].(string)+`"}`)
				if st["status"] != "admitted" {
					t.Fatalf("< 75 %% pxstream: %v", st)
				}
			})
			t.Run("LossFailsClosedUntilRearm", func(t *testing.T) {
				e := newRoomEnv(t, b)
				e.arm("")
				_, out := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"de"}`)
				adm, ticket := out["admissionTicket"].(string), out["ticket"].(string)
				e.wipe()
				if code, out := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"de"}`); code != 503 || out["code"] != "waiting_room_state_lost" || out["tier"] != WaitlistTier {
					t.Fatalf("join after loss: %d %v", code, out)
				}
				if c := e.guard("/x", HeaderClientRegion, "de", HeaderAdmission, adm); c != 503 {
					t.Fatalf("old admission after loss: %d", c)
				}
				if c := e.guard("/x", HeaderClientRegion, "us-ca"); c != 503 {
					t.Fatalf("guard after loss: %d", c)
				}
				if c := e.guard("/x", "Authorization", "Bearer "+e.token("op", "de", "operator")); c != http.StatusTeapot {
					t.Fatalf("bypass lane after loss: %d", c)
				}
				_, err := e.h.Admit(ctx, HandshakeRequest{SessionID: "s", Access: auth.Access{Subject: "a", Region: "de"},
					ClientIP: netip.MustParseAddr("10.0.0.1"), AdmissionTicket: adm})
				if codec.CodeOf(err) != codec.CodeStateUnavailable {
					t.Fatalf("handshake after loss: %v", err)
				}
				if code, _ := e.do("POST", "/api/v1/queue/arm", e.token("op", "", "operator"), `{"armed":true}`); code != 503 {
					t.Fatalf("arm is not re-arm: %d", code)
				}
				if code, out := e.do("POST", "/api/v1/queue/rearm", e.token("op", "", "operator"), `{"reason":"redis failover"}`); code != 200 || out["armedGlobal"] != true {
					t.Fatalf("rearm %d %v", code, out)
				}
				if c := e.guard("/x", HeaderClientRegion, "de", HeaderAdmission, adm); c != 403 {
					t.Fatalf("old admission after rearm: %d", c)
				}
				if code, _ := e.do("POST", "/api/v1/queue/status", "", `{"ticket":"`+ticket+`"}`); code == 200 {
					t.Fatal("old queue ticket honoured after rearm")
				}
				if _, out := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"de"}`); out["status"] != "admitted" {
					t.Fatalf("join after rearm: %v", out)
				}
				if !strings.Contains(e.audit.String(), `"operator.queue.rearm"`) || !strings.Contains(e.audit.String(), `"redis failover"`) {
					t.Fatalf("rearm not audited: %s", e.audit.String())
				}
			})
			t.Run("LeaveRefundsOnce", func(t *testing.T) {
				e := newRoomEnv(t, b)
				e.arm("")
				_, out := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"de"}`)
				for i, want := range []bool{true, false} {
					got, err := e.room.Leave(ctx, out["ticket"].(string))
					if err != nil || got != want {
						t.Fatalf("leave %d: %v %v", i, got, err)
					}
				}
				if code, _ := e.do("POST", "/api/v1/queue/leave", "", `{"ticket":"`+out["ticket"].(string)+`"}`); code != 204 {
					t.Fatal(code)
				}
			})
			t.Run("OperatorControls", func(t *testing.T) {
				e := newRoomEnv(t, b)
				if code, _ := e.do("POST", "/api/v1/queue/freeze", e.token("u", ""), `{"frozen":true}`); code != 403 {
					t.Fatalf("non-operator: %d", code)
				}
				if code, _ := e.do("POST", "/api/v1/queue/freeze", "", `{"frozen":true}`); code != 401 {
					t.Fatalf("anonymous: %d", code)
				}
				op := e.token("cmdr", "", "operator")
				for _, c := range []struct{ path, body, key string }{
					{"/api/v1/queue/arm", `{"armed":true}`, "armedGlobal"},
					{"/api/v1/queue/freeze", `{"frozen":true}`, "frozen"},
					{"/api/v1/queue/halve", `{"halved":true}`, "halved"},
				} {
					if code, out := e.do("POST", c.path, op, c.body); code != 200 || out[c.key] != true {
						t.Fatalf("%s: %d %v", c.path, code, out)
					}
				}
				if code, out := e.do("POST", "/api/v1/queue/arm", op, `{"armed":true,"bogus":1}`); code != 400 || out["field"] != "bogus" {
					t.Fatalf("unknown field: %d %v", code, out)
				}
				_, out := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"de"}`)
				if out["status"] != "paused" || out["estimatedWaitSeconds"] != -1.0 {
					t.Fatalf("frozen room: %v, want paused with no wait quoted", out)
				}
				code, st := e.do("GET", "/api/v1/queue/state", op, "")
				if code != 200 || st["frozen"] != true || st["halved"] != true {
					t.Fatalf("state %d %v", code, st)
				}
				n := strings.Count(e.audit.String(), `"operator":"cmdr"`)
				if n != 3 {
					t.Fatalf("%d audited controls, want 3: %s", n, e.audit.String())
				}
			})
			t.Run("SignupBucket", func(t *testing.T) {
				e := newRoomEnv(t, b)
				ok := 0
				for range 801 {
					if e.guard(SignupPath) == http.StatusTeapot {
						ok++
					}
				}
				if ok != 800 {
					t.Fatalf("signup burst admitted %d, want 800", ok)
				}
				e.advance(3 * time.Second) // 400/min: 20 more
				ok = 0
				for range 30 {
					if e.guard(SignupPath) == http.StatusTeapot {
						ok++
					}
				}
				if ok != 20 {
					t.Fatalf("signup refill admitted %d, want 20", ok)
				}
			})
		})
	}
}

func TestRoomRatesAndAutoArm(t *testing.T) {
	e := newRoomEnv(t, queueBackend{"memory", func(*testing.T) (state.Queue, func()) { q := state.NewMemoryQueue(); return q, q.Wipe }})
	for _, c := range []struct {
		util         int
		rate, burst  float64
		px, frozen   bool
		fallbackHint bool
	}{
		{0, 126, 252, true, false, false},
		{7499, 126, 252, true, false, false},
		{7500, 63, 126, true, false, true},
		{8499, 63, 126, true, false, true},
		{8500, 63, 126, false, false, true},
		{8999, 63, 126, false, false, true},
		{9000, 0, 1, false, true, true},
	} {
		e.util.set("eu-west-1", c.util)
		r, lad := e.room.Rates("eu-west-1")
		if r.RegionPerMin != c.rate || r.RegionBurst != c.burst || r.PxstreamAllowed != c.px || r.Frozen != c.frozen || lad.FallbackFirst != c.fallbackHint {
			t.Fatalf("util %d: %+v %+v", c.util, r, lad)
		}
	}
	e.util.set("eu-west-1", 0)
	e.room.d.Health = healthCeil(300)
	r, _ := e.room.Rates("eu-west-1")
	if r.GlobalPerMin != 300 || r.RegionPerMin != 63 {
		t.Fatalf("health clamp: %+v", r)
	}
	delete(e.util.m, "eu-west-1")
	if r, _ := e.room.Rates("eu-west-1"); r.PxstreamAllowed {
		t.Fatal("no utilisation signal admitted pixel streaming")
	}
	ctx := context.Background()
	if got, _ := e.room.AutoArm(ctx, ArmSignals{GlobalSessions: 19999, StartSuccessBP: 9950}); len(got) != 0 {
		t.Fatalf("armed below thresholds: %v", got)
	}
	if got, _ := e.room.AutoArm(ctx, ArmSignals{RegionsInBackpressure: []string{"ap-south-1"}}); len(got) != 1 || got[0] != "ap-south-1" {
		t.Fatalf("regional arm: %v", got)
	}
	if got, _ := e.room.AutoArm(ctx, ArmSignals{GlobalSessions: 20000}); len(got) != 1 || got[0] != "" {
		t.Fatalf("global arm: %v", got)
	}
	if m, _ := e.room.Meta(ctx); !m.ArmedGlobal || !m.ArmedRegions["ap-south-1"] {
		t.Fatalf("%+v", m)
	}
}

func TestHandshakeCaps(t *testing.T) {
	ctx := context.Background()
	e := newRoomEnv(t, queueBackend{"memory", func(*testing.T) (state.Queue, func()) { q := state.NewMemoryQueue(); return q, q.Wipe }})
	req := func(s, sub, ip string) HandshakeRequest {
		return HandshakeRequest{SessionID: s, Access: auth.Access{Subject: sub, Region: "de"}, ClientIP: netip.MustParseAddr(ip)}
	}
	var rels []func()
	for i := range 3 {
		rel, err := e.h.Admit(ctx, req(string(rune('a'+i)), "u", "10.0.0.1"))
		if err != nil {
			t.Fatal(err)
		}
		rels = append(rels, rel)
	}
	if _, err := e.h.Admit(ctx, req("d", "u", "10.0.0.1")); codec.CodeOf(err) != codec.CodeUserCap {
		t.Fatalf("user cap: %v", err)
	}
	rels[0]()
	if _, err := e.h.Admit(ctx, req("d", "u", "10.0.0.1")); err != nil {
		t.Fatalf("after release: %v", err)
	}
	for i := range 61 {
		if _, err := e.h.Admit(ctx, req("n"+string(rune(i+40)), "v"+string(rune(i+40)), "10.0.0.9")); err != nil {
			t.Fatalf("network session %d: %v", i, err)
		}
	}
	if _, err := e.h.Admit(ctx, req("over", "w", "10.0.0.200")); codec.CodeOf(err) != codec.CodeNetworkCap {
		t.Fatalf("network cap: %v", err)
	}
	if err := e.h.Refresh(ctx, req("d", "u", "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	// Armed: bypass lanes pass without a ticket.
	e.arm("")
	r := req("op", "boss", "10.9.0.1")
	r.Access.Roles = []string{"editorial"}
	if _, err := e.h.Admit(ctx, r); err != nil {
		t.Fatalf("editorial bypass: %v", err)
	}
	r = req("res", "back", "10.9.0.2")
	r.ResumeValid = true
	if _, err := e.h.Admit(ctx, r); err != nil {
		t.Fatalf("resume bypass: %v", err)
	}
}

func TestLaunchHTTP(t *testing.T) {
	e := newRoomEnv(t, queueBackend{"memory", func(*testing.T) (state.Queue, func()) { q := state.NewMemoryQueue(); return q, q.Wipe }})
	body := `{"v1UserId":"u1","tenantId":"tara-studio","clientRegion":"de","nativeClient":{"installed":false},` +
		`"browser":{"webRtc":true,"codecs":["AV1"],"webGpu":true,"webGl2":true},` +
		`"network":{"sustainedDownlinkMbps":20,"probeDurationMs":3000},"region":{"pixelStreamingRestricted":false},` +
		`"pops":[{"popId":"eu-west-1","rttMs":12,"availableWorkers":3,"programmingPriority":0,"codecs":["AV1"]}]}`
	code, out := e.do("POST", "/api/v3/lilith/launch", "", body)
	if code != 200 || out["selectedSurface"] != "pxstream" || out["telemetryTier"] != TierPxstream || !strings.HasPrefix(out["decisionId"].(string), "launch:") {
		t.Fatalf("%d %v", code, out)
	}
	_, again := e.do("POST", "/api/v3/lilith/launch", "", body)
	if again["decisionId"] != out["decisionId"] {
		t.Fatal("identical probes, same clock: ids differ")
	}
	code, out = e.do("POST", "/api/v3/lilith/launch", "", strings.Replace(body, `"tara-studio","clientRegion":"de"`, `"saraswati-stage","clientRegion":"br"`, 1))
	if code != 200 || out["tier"] != "regional-waitlist" || out["reason"] != "tenant-waitlist" || out["tenantId"] != "saraswati-stage" || out["clientRegion"] != "br" {
		t.Fatalf("waitlist %d %v", code, out)
	}
	for region, reason := range map[string]string{"ru": RegionSanctions, "cn-mainland": RegionPartnerOfRecord, "kr": RegionWave2} {
		_, out = e.do("POST", "/api/v3/lilith/launch", "", strings.Replace(body, `"clientRegion":"de"`, `"clientRegion":"`+region+`"`, 1))
		if out["reason"] != reason {
			t.Fatalf("%s: %v", region, out)
		}
	}
	code, out = e.do("POST", "/api/v3/lilith/launch", "", strings.Replace(body, `"v1UserId":"u1"`, `"v1UserId":"u1","extra":1`, 1))
	if code != 400 || out["field"] != "extra" {
		t.Fatalf("unknown field: %d %v", code, out)
	}
	code, out = e.do("POST", "/api/v3/lilith/launch", "", strings.Replace(body, `"tenantId":"tara-studio"`, `"tenantId":"acme"`, 1))
	if code != 400 || out["field"] != "tenantId" {
		t.Fatalf("unknown tenant: %d %v", code, out)
	}
	code, out = e.do("POST", "/api/v3/lilith/waitlist", "", `{"email":"a@example.org","clientRegion":"kr","tenantId":"tara-studio","consent":true}`)
	if code != 503 || out["code"] != "regional_waitlist_not_configured" || out["emailStored"] != false {
		t.Fatalf("waitlist post: %d %v", code, out)
	}
	code, out = e.do("POST", "/api/v3/lilith/waitlist", "", `{"email":"nope","clientRegion":"kr","tenantId":"tara-studio","consent":true}`)
	if code != 400 || out["field"] != "email" {
		t.Fatalf("bad email: %d %v", code, out)
	}
	if code, _ := e.do("GET", "/api/v3/lilith/waitlist/123", "", ""); code != 404 {
		t.Fatal(code)
	}
}

// TestTwoRoomsShareRedis: two edges, one Redis, an arrival storm; the
// regional bucket's ceiling holds across both.
func TestTwoRoomsShareRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	mk := func(t *testing.T) (state.Queue, func()) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = c.Close() })
		q, err := redisstate.NewQueue(context.Background(), redisstate.New(c, redisstate.Options{}), true)
		if err != nil {
			t.Fatal(err)
		}
		return q, func() {}
	}
	a := newRoomEnv(t, queueBackend{"redis", mk})
	b := newRoomEnv(t, queueBackend{"redis", mk})
	b.signer = a.signer
	b.room.d.Signer = a.signer
	a.arm("")
	var wg sync.WaitGroup
	admitted := make([]int, 2)
	for i, e := range []*roomEnv{a, b} {
		wg.Go(func() {
			for range 400 {
				st, err := e.room.Join(context.Background(), "", "de", state.LaneWeb)
				if err != nil {
					t.Error(err)
					return
				}
				if st.Status == "admitted" {
					admitted[i]++
				}
			}
		})
	}
	wg.Wait()
	total := admitted[0] + admitted[1]
	// Same instant: the eu-west-1 bucket's burst (252) is the ceiling.
	if total != 252 {
		t.Fatalf("two edges admitted %d (%v), want exactly the 252 burst", total, admitted)
	}
	_ = errors.New
	_ = io.Discard
}

func TestMetricsRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	p := DefaultPolicy()
	prof := DeviceProfiles()[0]
	out, _ := NewResolver(p, nil, func() time.Time { return clock0 }, m).Resolve(context.Background(), &prof.Request, false)
	if out.Decision == nil {
		t.Fatal("no decision")
	}
	m.refused("pxstream", "reject-user-cap")
	m.queue("eu-west-1", 10, 3, 100)
	fams, _ := reg.Gather()
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	for _, n := range []string{"egbe_admission_launch_decisions_total", "egbe_admission_refusals_total", "egbe_admission_queue_depth", "egbe_admission_drain_rate_per_minute"} {
		if !names[n] {
			t.Errorf("%s not gathered", n)
		}
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Fatal("double registration accepted")
	}
}

// BenchmarkRoomRedis measures the waiting room end to end against real
// Redis: a status poll (verify the queue ticket, one drain script, re-sign
// the ticket) per operation, from many concurrent clients.
func BenchmarkRoomRedis(b *testing.B) {
	srv := redistest.StartServer(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
	b.Cleanup(func() { _ = c.Close() })
	q, err := redisstate.NewQueue(context.Background(), redisstate.New(c, redisstate.Options{}), true)
	if err != nil {
		b.Fatal(err)
	}
	p := DefaultPolicy()
	signer, _ := auth.New(bytes.Repeat([]byte("k"), 32), nil)
	room, _ := NewRoom(p, RoomDeps{Queue: q, Signer: signer, Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	if _, err := room.Control(ctx, state.OpArm, "", "bench", ""); err != nil {
		b.Fatal(err)
	}
	tickets := make([]string, 256)
	for i := range tickets {
		st, err := room.Join(ctx, "", []string{"de", "us-ca", "in", "br"}[i%4], state.LaneWeb)
		if err != nil {
			b.Fatal(err)
		}
		tickets[i] = st.Ticket
	}
	var (
		mu  sync.Mutex
		lat []time.Duration
		n   atomic.Int64
	)
	b.SetParallelism(8)
	b.ReportAllocs()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		local := make([]time.Duration, 0, 1024)
		for pb.Next() {
			i := n.Add(1)
			s := time.Now()
			if _, err := room.Status(ctx, tickets[i%int64(len(tickets))]); err != nil {
				b.Error(err)
				return
			}
			local = append(local, time.Since(s))
		}
		mu.Lock()
		lat = append(lat, local...)
		mu.Unlock()
	})
	el := time.Since(start)
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(len(lat))/el.Seconds(), "ops/s")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
}

func TestRoomOverflowAndRefresh(t *testing.T) {
	for _, b := range queueBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			e := newRoomEnv(t, b)
			e.room.p.OverflowDepth = 2
			e.room.p.Regions["eu-west-1"] = Bucket{PerMinute: 1, Burst: 1}
			e.arm("")
			_, first := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"de"}`)
			if first["status"] != "admitted" {
				t.Fatalf("first: %v", first)
			}
			for i := range 2 {
				if _, out := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"de"}`); out["status"] != "queued" || out["position"] != float64(i+1) {
					t.Fatalf("join %d: %v", i, out)
				}
			}
			code, out := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"de"}`)
			if code != 503 || out["code"] != "waiting_room_overflow" || out["waitlist"] != "/api/v3/lilith/waitlist" {
				t.Fatalf("overflow: %d %v", code, out)
			}
			// A place polled every 10 minutes outlives the 4 h ticket TTL:
			// each answer re-issues the ticket.
			e.room.p.Regions["us-west-2"] = Bucket{PerMinute: 0.0001, Burst: 1}
			_, taken := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"us-ca"}`) // takes the one token
			if err := e.room.UseAdmission(context.Background(), taken["admissionTicket"].(string), ""); err != nil {
				t.Fatal(err) // used: never refunded
			}
			_, q := e.do("POST", "/api/v1/queue/join", "", `{"clientRegion":"us-ca"}`)
			if q["status"] != "queued" {
				t.Fatalf("us-ca second join: %v", q)
			}
			tok := q["ticket"].(string)
			for range 30 { // 5 h
				e.advance(10 * time.Minute)
				code, st := e.do("POST", "/api/v1/queue/status", "", `{"ticket":"`+tok+`"}`)
				if code != 200 || st["status"] != "queued" {
					t.Fatalf("refresh: %d %v", code, st)
				}
				tok = st["ticket"].(string)
			}
		})
	}
}

// TestSurgeStorm replays the reference's GA arrival assumption (3,300
// auth requests a minute) for one simulated minute through the real
// room and checks the ceilings: no region admits more than burst + rate x
// window, the global bucket likewise, and no pixel-stream admit happens in
// a region at >= 85 %.
//
// The surge controller runs throughout, as in the edge (entry criteria,
// health clamp, abort ladder, pages), stepping every simulated second on
// what the storm's answers measure: it must not loosen a ceiling.
func TestSurgeStorm(t *testing.T) {
	for _, b := range queueBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			e := newRoomEnv(t, b)
			e.arm("")
			e.util.set("eu-west-1", 8600) // backpressure: web only, half rate
			ctx := context.Background()
			meter, err := NewMeter(state.NewMemoryTallies(), e.clock, nil)
			if err != nil {
				t.Fatal(err)
			}
			clamp := &HealthClamp{}
			e.room.d.Health = clamp
			surge, err := NewSurge(e.pol, SurgeDeps{Room: e.room, Meter: meter, Clamp: clamp, KV: state.NewMemoryKV(e.clock),
				Leases: state.NewMemoryLeases(), Holder: "storm-edge", Audit: e.room.d.Audit, Now: e.clock})
			if err != nil {
				t.Fatal(err)
			}
			clients := []string{"us-ca", "de", "gb", "in", "br", "us-ca", "de", "us-ca"}
			type entry struct {
				ticket, region string
				lane           state.Lane
			}
			var all []entry
			admitted := map[string]int{}
			pxAdmittedEU := 0
			const perSecond, seconds = 55, 60
			for s := range seconds {
				for i := range perSecond {
					lane := state.LaneWeb
					if i%3 == 0 {
						lane = state.LanePxstream
					}
					st, err := e.room.Join(ctx, "", clients[(s*perSecond+i)%len(clients)], lane)
					if err != nil {
						t.Fatal(err)
					}
					meter.HTTP("queue", http.StatusOK, time.Millisecond)
					all = append(all, entry{st.Ticket, st.Region, lane})
				}
				if err := surge.Step(ctx); err != nil {
					t.Fatal(err)
				}
				e.advance(time.Second)
			}
			if st, _ := surge.State(ctx); len(st.Applied) != 0 || st.Ceiling != 0 {
				t.Fatalf("the controller acted on a healthy storm: %+v", st)
			}
			for _, en := range all {
				st, err := e.room.Status(ctx, en.ticket)
				if err != nil {
					t.Fatal(err)
				}
				if st.Status == "admitted" {
					admitted[en.region]++
					if en.region == "eu-west-1" && en.lane == state.LanePxstream {
						pxAdmittedEU++
					}
				}
			}
			total := 0
			window := float64(seconds+1) / 60
			for region, n := range admitted {
				bk := e.room.p.Regions[region]
				limit := bk.Burst + bk.PerMinute*window
				if region == "eu-west-1" {
					limit = bk.Burst/2 + bk.PerMinute/2*window
				}
				if float64(n) > limit {
					t.Errorf("%s admitted %d > ceiling %.0f", region, n, limit)
				}
				total += n
			}
			if g := e.room.p.Global; float64(total) > g.Burst+g.PerMinute*window {
				t.Errorf("global admitted %d", total)
			}
			if pxAdmittedEU != 0 {
				t.Errorf("%d pixel-stream admits into a region at 86 %%", pxAdmittedEU)
			}
			t.Logf("%d arrivals, %d admitted: %v", len(all), total, admitted)
		})
	}
}
