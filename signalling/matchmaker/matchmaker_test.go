package matchmaker

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/prometheus/client_golang/prometheus"
)

// testClock is a settable clock.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *testClock { return &testClock{t: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)} }
func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type rig struct {
	m      *Matchmaker
	fleet  *memFleet
	clock  *testClock
	signer *auth.Signer
}

func newRig(t testing.TB, topo *Topology, adm Admitter) *rig {
	t.Helper()
	clk := newClock()
	signer, err := auth.New([]byte("0123456789abcdef0123456789abcdef"), clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	fleet := newMemFleet(clk.Now)
	cfg := Default()
	cfg.LoadCacheTTL = 0 // tests change the fleet between matches
	m, err := New(cfg, Deps{Fleet: fleet, Signer: signer, Topology: topo, Admitter: adm, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{m: m, fleet: fleet, clock: clk, signer: signer}
}

func req(region, entitlement string, consent bool, codecs ...string) Request {
	if len(codecs) == 0 {
		codecs = []string{"H264"}
	}
	return Request{ClientRegion: region, Entitlement: entitlement, CrossRegionConsent: consent, Codecs: codecs}
}

func refusalOf(t *testing.T, err error) *Refusal {
	t.Helper()
	var rf *Refusal
	if !errors.As(err, &rf) {
		t.Fatalf("error %v is not a *Refusal", err)
	}
	return rf
}

func TestDefaultTopology(t *testing.T) {
	deployed, err := os.ReadFile("../../deploy/pxstream-topology.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(deployed, defaultTopologyJSON) {
		t.Fatal("deploy/pxstream-topology.json and signalling/matchmaker/topology_default.json differ; keep them identical")
	}
	if _, err := LoadTopology("../../deploy/pxstream-topology.json"); err != nil {
		t.Fatal(err)
	}
	topo := DefaultTopology()
	want := map[string][2]int{ // max sessions, GPU quota (reference)
		"us-east-1": {1200, 256}, "us-west-2": {800, 192}, "eu-west-1": {800, 160},
		"ap-northeast-1": {300, 96}, "ap-south-1": {250, 96}, "ap-southeast-2": {250, 80}, "sa-east-1": {250, 80},
	}
	if len(topo.POPs) != len(want) {
		t.Fatalf("%d POPs, want %d", len(topo.POPs), len(want))
	}
	for _, p := range topo.POPs {
		w, ok := want[p.ID]
		if !ok || p.MaxSessions != w[0] || p.GPUQuota != w[1] {
			t.Errorf("pop %s: max %d quota %d, want %v", p.ID, p.MaxSessions, p.GPUQuota, w)
		}
		if p.Health != HealthAccepting {
			t.Errorf("pop %s: health %s", p.ID, p.Health)
		}
	}
	if topo.LatencyBudgetMs != 60 || topo.FreeTierMaxUtilBP != 8500 {
		t.Errorf("budget %d ms, free cut %d bp", topo.LatencyBudgetMs, topo.FreeTierMaxUtilBP)
	}
}

func TestParseTopologyStrict(t *testing.T) {
	good := string(defaultTopologyJSON)
	for _, tc := range []struct{ name, json, want string }{
		{"unknown top-level key", strings.Replace(good, `"version": 1,`, `"version": 1, "bogus": true,`, 1), `unknown field "bogus"`},
		{"unknown pop key", strings.Replace(good, `"id": "us-east-1",`, `"id": "us-east-1", "gpus": 3,`, 1), `unknown field "gpus"`},
		{"bad residency", strings.Replace(good, `"residency": "eu"`, `"residency": "mars"`, 1), "residency"},
		{"bad health", strings.Replace(good, `"health": "accepting"`, `"health": "meh"`, 1), "health"},
		{"bad codec", strings.Replace(good, `"codecs": ["H264", "AV1", "VP8"]`, `"codecs": ["H265"]`, 1), "codec"},
		{"unknown rtt region", strings.Replace(good, `"ie": 6`, `"atlantis": 6`, 1), "unknown region"},
		{"duplicate pop", strings.Replace(good, `"id": "us-west-2"`, `"id": "us-east-1"`, 1), "duplicate"},
		{"trailing data", good + "{}", "trailing"},
		{"wrong version", strings.Replace(good, `"version": 1,`, `"version": 2,`, 1), "version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTopology([]byte(tc.json))
			if !errors.Is(err, ErrTopology) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrTopology mentioning %q", err, tc.want)
			}
		})
	}
}

func TestScoreFormula(t *testing.T) {
	for _, tc := range []struct {
		name                          string
		rtt, util, queued, avail, pri int
		want                          int64
	}{
		{"rtt only", 10, 0, 0, 0, 0, 1000},
		{"utilisation", 10, 5000, 0, 0, 0, 1000 + 15000},
		{"queued", 10, 0, 4, 0, 0, 1000 + 100},
		{"workers credit", 10, 0, 0, 100, 0, 1000 - 400},
		{"workers credit capped at 500", 10, 0, 0, 5000, 0, 1000 - 2000},
		{"priority credit", 10, 0, 0, 0, 2, 1000 - 150},
		{"all terms", 42, 1234, 3, 17, 1, 4200 + 3702 + 75 - 68 - 75},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := score(tc.rtt, tc.util, tc.queued, tc.avail, tc.pri); got != tc.want {
				t.Fatalf("score = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCandidateOrder(t *testing.T) {
	a, b := &POP{ID: "a"}, &POP{ID: "b"}
	for _, tc := range []struct {
		name string
		x, y candidate
	}{
		{"lower score wins", candidate{pop: b, score: 10, rtt: 50, home: true}, candidate{pop: a, score: 11, rtt: 1, home: true}},
		{"tie: lower rtt", candidate{pop: b, score: 10, rtt: 5, utilBP: 900, home: true}, candidate{pop: a, score: 10, rtt: 6, home: true}},
		{"tie: lower utilisation", candidate{pop: b, score: 10, rtt: 5, utilBP: 1, home: true}, candidate{pop: a, score: 10, rtt: 5, utilBP: 2, home: true}},
		{"tie: pop id", candidate{pop: a, score: 10, rtt: 5, utilBP: 1, home: true}, candidate{pop: b, score: 10, rtt: 5, utilBP: 1, home: true}},
		{"home before cross-border", candidate{pop: b, score: 99999, home: true}, candidate{pop: a, score: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if better(&tc.x, &tc.y) >= 0 || better(&tc.y, &tc.x) <= 0 {
				t.Fatalf("want %+v before %+v", tc.x, tc.y)
			}
		})
	}
}

// boost is an Admitter that adds programming priority.
type boost map[string]int

func (b boost) Admit(context.Context, Request) (Decision, error) {
	return Decision{PriorityBoost: b}, nil
}

func TestPOPSelection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *memFleet)
		adm   Admitter
		req   Request
		want  string
	}{
		{"closest POP wins at equal load", func(f *memFleet) { f.add("us-east-1", 10); f.add("us-west-2", 10) }, nil,
			req("us-central", "paid", false), "us-east-1"},
		{"busy POP loses to a farther idle one", func(f *memFleet) {
			f.add("us-east-1", 51)
			f.occupy("us-east-1", 41) // 341 bp * 3 = 1023 > 1000 (10 ms)
			f.add("us-west-2", 10)
		}, nil, req("us-central", "paid", false), "us-west-2"},
		{"programming priority wins ground back", func(f *memFleet) {
			f.add("us-east-1", 51)
			f.occupy("us-east-1", 41)
			f.add("us-west-2", 10)
		}, boost{"us-east-1": 1}, req("us-central", "paid", false), "us-east-1"},
		{"more free workers win", func(f *memFleet) { f.add("us-east-1", 1); f.add("us-west-2", 300) }, nil,
			req("us-central", "paid", false), "us-west-2"},
		{"codec is a per-POP choice; geography still dominates", func(f *memFleet) { f.add("us-east-1", 1, "H264"); f.add("us-west-2", 1, "AV1") }, nil,
			req("us-central", "paid", false, "AV1", "H264"), "us-east-1"},
		{"POP beyond 60 ms is never chosen", func(f *memFleet) { f.add("us-west-2", 1) }, nil,
			req("us-east", "paid", false), ""},
		{"POP without RTT for the region is never chosen", func(f *memFleet) { f.add("sa-east-1", 1) }, nil,
			req("gb", "paid", true), ""},
		{"streamers in unknown POPs are ignored", func(f *memFleet) { f.add("local", 5) }, nil,
			req("us-east", "paid", false), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil, tc.adm)
			tc.setup(r.fleet)
			got, err := r.m.Match(context.Background(), tc.req)
			if tc.want == "" {
				if rf := refusalOf(t, err); rf.Reason != ReasonNoPOPAvailable || rf.Status != 503 {
					t.Fatalf("refusal %+v, want no_pop_available 503", rf)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.POP != tc.want {
				t.Fatalf("pop %s (score %d), want %s", got.POP, got.Score, tc.want)
			}
		})
	}
}

// residencyTopology has every POP within budget of every region, so only
// residency decides.
func residencyTopology(t *testing.T) *Topology {
	t.Helper()
	topo, err := ParseTopology([]byte(`{
	  "version": 1, "latency_budget_ms": 60, "free_tier_max_utilisation_bp": 8500, "sessions_per_gpu_node": 6,
	  "regions": {"de": "eu", "in": "india", "us-east": "us", "any": "global"},
	  "pops": [
	    {"id": "eu-west-1", "residency": "eu", "health": "accepting", "max_sessions": 100, "gpu_quota": 10, "paid_headroom_sessions": 0, "priority": 0, "codecs": ["H264"], "rtt_ms": {"de": 40, "in": 50, "us-east": 50, "any": 40}},
	    {"id": "us-east-1", "residency": "us", "health": "accepting", "max_sessions": 100, "gpu_quota": 10, "paid_headroom_sessions": 0, "priority": 0, "codecs": ["H264"], "rtt_ms": {"de": 10, "in": 10, "us-east": 10, "any": 10}},
	    {"id": "ap-south-1", "residency": "india", "health": "accepting", "max_sessions": 100, "gpu_quota": 10, "paid_headroom_sessions": 0, "priority": 0, "codecs": ["H264"], "rtt_ms": {"de": 55, "in": 55, "us-east": 55, "any": 55}}
	  ]}`))
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func TestResidency(t *testing.T) {
	all := func(f *memFleet) { f.add("eu-west-1", 1); f.add("us-east-1", 1); f.add("ap-south-1", 1) }
	for _, tc := range []struct {
		name     string
		topo     bool // residencyTopology, else the default
		setup    func(f *memFleet)
		req      Request
		want     string
		rejected map[string]string
	}{
		{"EU stays in EU although another POP is closer", true, all, req("de", "paid", false), "eu-west-1", nil},
		{"EU stays in EU even with consent", true, func(f *memFleet) { f.add("us-east-1", 1); f.add("ap-south-1", 1) },
			req("de", "paid", true), "", map[string]string{"us-east-1": rejectResidency, "ap-south-1": rejectResidency, "eu-west-1": rejectNoIdle}},
		{"India prefers ap-south-1 over closer POPs", true, all, req("in", "paid", true), "ap-south-1", nil},
		{"India cross-border only with consent", true, func(f *memFleet) { f.add("eu-west-1", 1); f.add("us-east-1", 1) },
			req("in", "paid", false), "", map[string]string{"us-east-1": rejectResidency, "eu-west-1": rejectResidency}},
		{"India cross-border with consent takes the best foreign POP", true, func(f *memFleet) { f.add("eu-west-1", 1); f.add("us-east-1", 1) },
			req("in", "paid", true), "us-east-1", nil},
		{"global client goes anywhere", true, all, req("any", "paid", false), "us-east-1", nil},
		{"default topology: India prefers ap-south-1 even when loaded", false, func(f *memFleet) {
			f.add("ap-south-1", 201)
			f.occupy("ap-south-1", 200) // 8000 bp: scores far worse than eu-west-1
			f.add("eu-west-1", 10)
		}, req("in", "paid", true), "ap-south-1", nil},
		{"default topology: India -> eu-west-1 with consent when ap-south-1 is full", false, func(f *memFleet) {
			f.add("ap-south-1", 5)
			f.occupy("ap-south-1", 5)
			f.add("eu-west-1", 1)
		}, req("in", "paid", true), "eu-west-1", nil},
		{"default topology: India -> nowhere without consent when ap-south-1 is full", false, func(f *memFleet) {
			f.add("ap-south-1", 5)
			f.occupy("ap-south-1", 5)
			f.add("eu-west-1", 1)
		}, req("in", "paid", false), "", map[string]string{"eu-west-1": rejectResidency, "ap-south-1": rejectNoIdle}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var topo *Topology
			if tc.topo {
				topo = residencyTopology(t)
			}
			r := newRig(t, topo, nil)
			tc.setup(r.fleet)
			got, err := r.m.Match(context.Background(), tc.req)
			if tc.want != "" {
				if err != nil {
					t.Fatal(err)
				}
				if got.POP != tc.want {
					t.Fatalf("pop %s, want %s", got.POP, tc.want)
				}
				return
			}
			rf := refusalOf(t, err)
			if rf.Reason != ReasonNoPOPAvailable {
				t.Fatalf("refusal %+v", rf)
			}
			for pop, why := range tc.rejected {
				if rf.Rejected[pop] != why {
					t.Errorf("rejected[%s] = %q, want %q (all: %v)", pop, rf.Rejected[pop], why, rf.Rejected)
				}
			}
		})
	}
}

func TestFreeTier(t *testing.T) {
	headroom, err := ParseTopology([]byte(`{
	  "version": 1, "latency_budget_ms": 60, "free_tier_max_utilisation_bp": 8500, "sessions_per_gpu_node": 6,
	  "regions": {"us-east": "us"},
	  "pops": [{"id": "us-east-1", "residency": "us", "health": "accepting", "max_sessions": 10, "gpu_quota": 2,
	    "paid_headroom_sessions": 5, "priority": 0, "codecs": ["H264"], "rtt_ms": {"us-east": 10}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		topo        *Topology
		pop, region string
		busy        int
		entitlement string
		wantReject  string // "" = matched
	}{
		// ap-south-1: 250 sessions, 85 % = 212.5: 212 sessions is 8480 bp.
		{"free below 85 %", nil, "ap-south-1", "in", 212, "free", ""},
		{"free at 85 % backs off", nil, "ap-south-1", "in", 213, "free", rejectBackoff},
		{"paid above 85 %", nil, "ap-south-1", "in", 213, "paid", ""},
		{"paid takes the last slot", nil, "ap-south-1", "in", 249, "paid", ""},
		{"nobody past max sessions", nil, "ap-south-1", "in", 250, "paid", rejectFull},
		// headroom: max 10, 5 held for paid: free may use sessions 1..5.
		{"free within paid headroom", headroom, "us-east-1", "us-east", 4, "free", ""},
		{"free keeps paid headroom", headroom, "us-east-1", "us-east", 5, "free", rejectHeadroom},
		{"paid uses the headroom", headroom, "us-east-1", "us-east", 5, "paid", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, tc.topo, nil)
			r.fleet.add(tc.pop, tc.busy+1)
			r.fleet.occupy(tc.pop, tc.busy)
			got, err := r.m.Match(context.Background(), req(tc.region, tc.entitlement, false))
			if tc.wantReject == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got.POP != tc.pop {
					t.Fatalf("pop %s", got.POP)
				}
				return
			}
			rf := refusalOf(t, err)
			if rf.Status != 503 || rf.Rejected[tc.pop] != tc.wantReject {
				t.Fatalf("refusal %+v, want %s rejected for %s", rf, tc.pop, tc.wantReject)
			}
		})
	}
}

func TestCodecChoice(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(f *memFleet)
		codecs []string
		want   string
	}{
		{"first preference with an idle streamer", func(f *memFleet) { f.add("us-east-1", 1, "H264"); f.add("us-east-1", 1, "AV1") }, []string{"AV1", "H264"}, "AV1"},
		{"falls back when the preferred codec has no idle streamer", func(f *memFleet) { f.add("us-east-1", 1, "H264") }, []string{"AV1", "H264"}, "H264"},
		{"multi-codec streamer serves the first preference", func(f *memFleet) { f.add("us-east-1", 1, "H264", "AV1") }, []string{"AV1", "H264"}, "AV1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil, nil)
			tc.setup(r.fleet)
			got, err := r.m.Match(context.Background(), req("us-east", "paid", false, tc.codecs...))
			if err != nil {
				t.Fatal(err)
			}
			if got.Codec != tc.want {
				t.Fatalf("codec %s, want %s", got.Codec, tc.want)
			}
		})
	}
}

func TestLeaseExpiryReturnsStreamer(t *testing.T) {
	r := newRig(t, nil, nil)
	r.fleet.add("us-east-1", 1)
	first, err := r.m.Match(context.Background(), req("us-east", "free", false))
	if err != nil {
		t.Fatal(err)
	}
	if want := r.clock.Now().Add(auth.PxSessionDefaultTTL); !first.ExpiresAt.Equal(want) {
		t.Fatalf("expires %v, want %v", first.ExpiresAt, want)
	}
	if _, err := r.m.Match(context.Background(), req("us-east", "free", false)); refusalOf(t, err).Rejected["us-east-1"] != rejectNoIdle {
		t.Fatalf("second match while leased: %v", err)
	}
	r.clock.Advance(auth.PxSessionDefaultTTL)
	again, err := r.m.Match(context.Background(), req("us-east", "free", false))
	if err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	if again.StreamerID != first.StreamerID || again.SessionID == first.SessionID {
		t.Fatalf("after expiry got %+v, first %+v", again, first)
	}
	// An explicit release frees it at once.
	r.m.Release(again.SessionID)
	if _, err := r.m.Match(context.Background(), req("us-east", "free", false)); err != nil {
		t.Fatalf("after release: %v", err)
	}
}

// refuser is an Admitter with a fixed answer.
type refuser struct {
	d   Decision
	err error
}

func (a refuser) Admit(context.Context, Request) (Decision, error) { return a.d, a.err }

func TestAdmitter(t *testing.T) {
	capped := &Refusal{Reason: Reason("reject-user-cap"), Status: http.StatusConflict, Message: "2 sessions already"}
	for _, tc := range []struct {
		name       string
		adm        refuser
		wantStatus int
		wantReason Reason
	}{
		{"refusal in decision", refuser{d: Decision{Refusal: capped}}, 409, Reason("reject-user-cap")},
		{"refusal as error", refuser{err: &Refusal{Reason: Reason("reject-network-cap"), Status: 429}}, 429, Reason("reject-network-cap")},
		{"admission broken", refuser{err: errors.New("redis down")}, 503, ReasonAdmissionUnavailable},
		{"admitted with queue position", refuser{d: Decision{Queued: map[string]int{"us-east-1": 3}}}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil, tc.adm)
			r.fleet.add("us-east-1", 1)
			rec := post(t, r.m, `{"client_region":"us-east","codecs":["H264"],"entitlement":"free"}`, nil)
			if rec.Code != tc.wantStatus {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var body map[string]any
			_ = json.Unmarshal(rec.Body.Bytes(), &body)
			if body["fallback_url"] != "/lilith/fallback" {
				t.Errorf("fallback_url %v", body["fallback_url"])
			}
			if tc.wantReason != "" && body["reason"] != string(tc.wantReason) {
				t.Errorf("reason %v, want %s", body["reason"], tc.wantReason)
			}
			if tc.wantStatus == 200 && body["queue_position"] != 3.0 {
				t.Errorf("queue_position %v", body["queue_position"])
			}
		})
	}
}

func post(t testing.TB, m *Matchmaker, body string, mod func(*http.Request)) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "http://edge.example:8443"+PathMatch, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if mod != nil {
		mod(r)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, r)
	return rec
}

func TestMatchHTTP(t *testing.T) {
	r := newRig(t, nil, nil)
	r.fleet.add("eu-west-1", 2, "H264", "VP8")
	rec := post(t, r.m, `{"user_id":"u1","client_region":"gb","codecs":["h264"],"entitlement":"paid"}`, nil)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got matchResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.POPID != "eu-west-1" || got.Codec != "H264" || got.FirstFrameBudgetMs != 8000 || got.FallbackURL == "" || got.StreamerID == "" {
		t.Fatalf("answer %+v", got)
	}
	if want := "ws://edge.example:8443/v6/pxstream/signalling?token=" + got.Token; got.SignallingURL != want {
		t.Fatalf("signalling_url %q, want %q", got.SignallingURL, want)
	}
	claims, err := r.signer.VerifyPxSession(got.Token)
	if err != nil {
		t.Fatal(err)
	}
	if claims.SessionID != got.SessionID || claims.POP != "eu-west-1" || claims.Codec != "H264" || claims.StreamerID != got.StreamerID || claims.Subject != "u1" {
		t.Fatalf("claims %+v", claims)
	}
	if exp, _ := time.Parse(time.RFC3339, got.ExpiresAt); !exp.Equal(r.clock.Now().Add(120 * time.Second)) {
		t.Fatalf("expires_at %s", got.ExpiresAt)
	}

	t.Run("v3 alias and wss behind TLS", func(t *testing.T) {
		rec := post(t, r.m, `{"client_region":"gb","codecs":["H264"],"entitlement":"paid"}`, func(r *http.Request) {
			r.URL.Path = PathMatchV3
			r.TLS = &tls.ConnectionState{}
		})
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"signalling_url":"wss://edge.example:8443/v6/pxstream/signalling?token=`) {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
	t.Run("bearer token sets subject and entitlement", func(t *testing.T) {
		r.fleet.add("eu-west-1", 1)
		tok, _ := r.signer.IssueAccess(auth.Access{Subject: "alice", Entitlement: "free"}, time.Minute)
		rec := post(t, r.m, `{"client_region":"gb","codecs":["H264"],"entitlement":"paid"}`, func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer "+tok)
		})
		var got matchResponse
		_ = json.Unmarshal(rec.Body.Bytes(), &got)
		c, err := r.signer.VerifyPxSession(got.Token)
		if err != nil || c.Subject != "alice" {
			t.Fatalf("status %d %s: %v %+v", rec.Code, rec.Body, err, c)
		}
	})
}

func TestMatchBadRequests(t *testing.T) {
	r := newRig(t, nil, nil)
	r.fleet.add("us-east-1", 5)
	const ok = `"client_region":"us-east","codecs":["H264"],"entitlement":"free"`
	for _, tc := range []struct {
		name, body string
		mod        func(*http.Request)
		status     int
		reason     Reason
		field      string
	}{
		{"malformed JSON", `{` + ok, nil, 400, ReasonBadRequest, ""},
		{"empty body", ``, nil, 400, ReasonBadRequest, ""},
		{"unknown field", `{` + ok + `,"bogus":1}`, nil, 400, ReasonBadRequest, "bogus"},
		{"wrong type", `{"client_region":5,"codecs":["H264"],"entitlement":"free"}`, nil, 400, ReasonBadRequest, "client_region"},
		{"codecs not a list", `{"client_region":"us-east","codecs":"H264","entitlement":"free"}`, nil, 400, ReasonBadRequest, "codecs"},
		{"consent not a bool", `{` + ok + `,"cross_region_consent":"yes"}`, nil, 400, ReasonBadRequest, "cross_region_consent"},
		{"missing region", `{"codecs":["H264"],"entitlement":"free"}`, nil, 400, ReasonBadRequest, "client_region"},
		{"missing codecs", `{"client_region":"us-east","entitlement":"free"}`, nil, 400, ReasonBadRequest, "codecs"},
		{"missing entitlement", `{"client_region":"us-east","codecs":["H264"]}`, nil, 400, ReasonBadRequest, "entitlement"},
		{"bad entitlement", `{"client_region":"us-east","codecs":["H264"],"entitlement":"gold"}`, nil, 400, ReasonBadRequest, "entitlement"},
		{"unsupported codec", `{"client_region":"us-east","codecs":["H265"],"entitlement":"free"}`, nil, 400, ReasonUnsupportedCodec, "codecs"},
		{"unknown region", `{"client_region":"atlantis","codecs":["H264"],"entitlement":"free"}`, nil, 400, ReasonUnknownRegion, "client_region"},
		{"trailing data", `{` + ok + `}{}`, nil, 400, ReasonBadRequest, ""},
		{"too large", `{` + ok + `,"user_id":"` + strings.Repeat("x", 20<<10) + `"}`, nil, 413, ReasonRequestTooLarge, ""},
		{"not JSON", `{` + ok + `}`, func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }, 415, ReasonUnsupportedMedia, ""},
		{"GET", ``, func(r *http.Request) { r.Method = http.MethodGet }, 405, ReasonMethodNotAllowed, ""},
		{"forged bearer", `{` + ok + `}`, func(r *http.Request) { r.Header.Set("Authorization", "Bearer e30.e30.x") }, 401, ReasonInvalidAccessToken, ""},
		{"basic auth", `{` + ok + `}`, func(r *http.Request) { r.SetBasicAuth("a", "b") }, 401, ReasonInvalidAccessToken, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := post(t, r.m, tc.body, tc.mod)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			var got refusalResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got.Reason != tc.reason || got.Field != tc.field || got.FallbackURL == "" {
				t.Fatalf("got %+v, want reason %s field %q", got, tc.reason, tc.field)
			}
		})
	}
	t.Run("no POP: 503 with Retry-After and per-POP reasons", func(t *testing.T) {
		rec := post(t, r.m, `{"client_region":"jp","codecs":["H264"],"entitlement":"free"}`, nil)
		var got refusalResponse
		_ = json.Unmarshal(rec.Body.Bytes(), &got)
		if rec.Code != 503 || got.Reason != ReasonNoPOPAvailable || rec.Header().Get("Retry-After") == "" || got.Rejected["ap-northeast-1"] != rejectNoIdle {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
	t.Run("access token required", func(t *testing.T) {
		cfg := Default()
		cfg.RequireAccessToken = true
		m, err := New(cfg, Deps{Fleet: r.fleet, Signer: r.signer})
		if err != nil {
			t.Fatal(err)
		}
		if rec := post(t, m, `{`+ok+`}`, nil); rec.Code != 401 || !strings.Contains(rec.Body.String(), string(ReasonAccessTokenRequired)) {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}

func TestDashboardAndMetrics(t *testing.T) {
	clk := newClock()
	signer, _ := auth.New([]byte("0123456789abcdef0123456789abcdef"), clk.Now)
	fleet := newMemFleet(clk.Now)
	reg := prometheus.NewRegistry()
	m, err := New(Default(), Deps{Fleet: fleet, Signer: signer, Now: clk.Now, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	fleet.add("us-east-1", 13)
	fleet.occupy("us-east-1", 3)
	if _, err := m.Match(context.Background(), req("us-east", "free", false)); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathDashboard, nil))
	var d Dashboard
	if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	var row *DashboardPOP
	for i := range d.POPs {
		if d.POPs[i].ID == "us-east-1" {
			row = &d.POPs[i]
		}
	}
	if row == nil || row.Sessions != 4 || row.UtilisationBP != 33 || row.Registered != 13 ||
		row.Streamers["idle"] != 9 || row.Streamers["leased"] != 1 || row.Streamers["streaming"] != 3 ||
		row.GPUNodesInUse != 3 || row.QuotaHeadroom != 253 || !row.Ready {
		t.Fatalf("row %+v", row)
	}
	if len(d.POPs) != 7 || d.Totals.MaxSessions != 3850 {
		t.Fatalf("dashboard %+v", d)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["pop"] == "us-east-1" && (labels["state"] == "" || labels["state"] == "leased") {
				found[mf.GetName()] = mt.GetGauge().GetValue() + mt.GetCounter().GetValue()
			}
		}
	}
	if found["egbe_pxstream_pop_sessions"] != 4 || found["egbe_pxstream_pop_max_sessions"] != 1200 || found["egbe_pxstream_pop_matches_total"] != 1 || found["egbe_pxstream_pop_streamers"] != 1 {
		t.Fatalf("metrics %v", found)
	}
}

func TestAccessTokenRegionFallback(t *testing.T) {
	r := newRig(t, nil, nil)
	r.fleet.add("us-east-1", 1)
	tok, _ := r.signer.IssueAccess(auth.Access{Subject: "bob", Region: "us-ca", Entitlement: "paid"}, time.Minute)
	rec := post(t, r.m, `{"codecs":["H264"],"entitlement":"free"}`, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) })
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"pop_id":"us-east-1"`) {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
}

// recorder is an Admitter that records what it saw.
type recorder struct {
	seen     Request
	released int
}

func (a *recorder) Admit(_ context.Context, r Request) (Decision, error) {
	a.seen = r
	return Decision{Release: func() { a.released++ }}, nil
}

func TestAdmitterSeesSessionAndEligibleUtilisation(t *testing.T) {
	adm := &recorder{}
	r := newRig(t, nil, adm)
	// us-central: us-east-1 (30 ms) and us-west-2 (40 ms) are eligible.
	r.fleet.add("us-east-1", 120)
	r.fleet.occupy("us-east-1", 120) // 1000 bp, no idle streamer
	r.fleet.add("us-west-2", 1)
	m, err := r.m.Match(context.Background(), req("us-central", "free", false))
	if err != nil {
		t.Fatal(err)
	}
	if adm.seen.SessionID != m.SessionID || adm.seen.SessionID == "" {
		t.Fatalf("admitter saw session %q, match %q", adm.seen.SessionID, m.SessionID)
	}
	if got := adm.seen.EligiblePOPUtilBP; len(got) != 2 || got[0]+got[1] != 1000 {
		t.Fatalf("eligible utilisation %v, want [1000 0] in POP order", got)
	}
	if adm.released != 0 {
		t.Fatal("released an admitted match")
	}
	// No streamer left anywhere: the match fails after admission, which
	// gets its reservation back.
	if _, err := r.m.Match(context.Background(), req("us-central", "free", false)); err == nil {
		t.Fatal("matched without an idle streamer")
	}
	if adm.released != 1 {
		t.Fatalf("released %d times", adm.released)
	}
}

// TestTokenIsTheOnlyEntitlement: with a bearer token the body's
// entitlement, user_id and tenant_id count for nothing; a token without
// the paid claim is free.
func TestTokenIsTheOnlyEntitlement(t *testing.T) {
	adm := &recorder{}
	r := newRig(t, nil, adm)
	r.fleet.add("us-east-1", 4)
	for _, tc := range []struct {
		name  string
		claim string
		want  string
	}{{"no claim", "", EntitlementFree}, {"free claim", "free", EntitlementFree}, {"odd claim", "gold", EntitlementFree}, {"paid claim", "paid", EntitlementPaid}} {
		t.Run(tc.name, func(t *testing.T) {
			tok, _ := r.signer.IssueAccess(auth.Access{Subject: "carol", Tenant: "tara-studio", Entitlement: tc.claim}, time.Minute)
			rec := post(t, r.m, `{"user_id":"mallory","tenant_id":"rich-institution","client_region":"us-east","codecs":["H264"],"entitlement":"paid"}`, func(r *http.Request) {
				r.Header.Set("Authorization", "Bearer "+tok)
				r.Header.Set(HeaderAdmission, "adm-ticket")
			})
			if rec.Code != 200 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if s := adm.seen; s.Entitlement != tc.want || s.Subject != "carol" || s.TenantID != "tara-studio" || s.AdmissionTicket != "adm-ticket" {
				t.Fatalf("admitter saw entitlement %q subject %q tenant %q ticket %q", s.Entitlement, s.Subject, s.TenantID, s.AdmissionTicket)
			}
			r.m.Release(adm.seen.SessionID)
		})
	}
}

// TestHeldBackAndQueued: sessions an admitter holds back at a POP (an
// event's reserved seats) are not leased to this request; the queued
// counts enter the score and the chosen POP's becomes queue_position.
func TestHeldBackAndQueued(t *testing.T) {
	adm := &refuser{}
	r := newRig(t, nil, adm)
	r.fleet.add("us-east-1", 10)
	r.fleet.add("us-west-2", 10)
	// us-central: us-east-1 (30 ms) beats us-west-2 (40 ms) on RTT.
	if m, err := r.m.Match(context.Background(), req("us-central", "paid", false)); err != nil || m.POP != "us-east-1" {
		t.Fatalf("baseline: %+v %v", m, err)
	}
	// Every us-east-1 slot but the one in use held back: full for this request.
	adm.d = Decision{HeldBack: map[string]int{"us-east-1": 1199}, Queued: map[string]int{"us-west-2": 7}}
	m, err := r.m.Match(context.Background(), req("us-central", "paid", false))
	if err != nil || m.POP != "us-west-2" || m.QueuePosition != 7 {
		t.Fatalf("held back: %+v %v", m, err)
	}
	adm.d = Decision{HeldBack: map[string]int{"us-east-1": 1200, "us-west-2": 1200}}
	_, err = r.m.Match(context.Background(), req("us-central", "paid", false))
	if rf := refusalOf(t, err); rf.Reason != ReasonNoPOPAvailable || rf.Rejected["us-east-1"] != "event_reserved" || rf.Rejected["us-west-2"] != "event_reserved" {
		t.Fatalf("all held back: %+v", rf)
	}
}

// TestSeatMatch: with a seat from admission the match leases no streamer
// (none is idle at the concert's POP), the token names the SFU, the
// answer carries the seat; the POP must still suit the client (residency,
// RTT) and the player must take the concert's codec, or the match is
// no_pop_available and admission's Release runs.
func TestSeatMatch(t *testing.T) {
	released := 0
	adm := &refuser{}
	r := newRig(t, nil, adm)
	seat := func(pop, codec string) Decision {
		return Decision{Seat: &Seat{Event: "gala", POP: pop, SFU: "SFU2", Codec: codec}, Release: func() { released++ }}
	}
	adm.d = seat("us-east-1", "H264")
	rec := post(t, r.m, `{"client_region":"us-east","codecs":["AV1","H264"],"entitlement":"free"}`, nil)
	var body map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	st, _ := body["seat"].(map[string]any)
	if rec.Code != 200 || body["streamer_id"] != "SFU2" || body["codec"] != "H264" || body["pop_id"] != "us-east-1" ||
		st["event_id"] != "gala" || st["sfu_id"] != "SFU2" {
		t.Fatalf("seat match: %d %s", rec.Code, rec.Body)
	}
	tok, _ := body["token"].(string)
	sess, err := r.signer.VerifyPxSession(tok)
	if err != nil || sess.StreamerID != "SFU2" || sess.Codec != "H264" {
		t.Fatalf("token %+v %v", sess, err)
	}
	if n := r.m.Dashboard().Totals.Sessions; n != 0 {
		t.Fatalf("a seat leased a streamer: %d sessions", n)
	}
	for _, tc := range []struct {
		name, region, pop, codec, why string
	}{
		{"eu client, us concert", "de", "us-east-1", "H264", "residency"},
		{"codec the player lacks", "us-east", "us-east-1", "VP9", "codec_unsupported"},
		{"unknown POP", "us-east", "mars-1", "H264", "not_accepting"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := released
			adm.d = seat(tc.pop, tc.codec)
			_, err := r.m.Match(context.Background(), req(tc.region, "free", false, "H264"))
			if rf := refusalOf(t, err); rf.Reason != ReasonNoPOPAvailable || rf.Rejected[tc.pop] != tc.why {
				t.Fatalf("%+v, want no_pop_available %s", rf, tc.why)
			}
			if released != before+1 {
				t.Fatal("admission's seat not released")
			}
		})
	}
}
