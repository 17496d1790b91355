package admission

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var clock0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

type staticFleet []PopCandidate

func (f staticFleet) PopCandidates(context.Context, string, bool) ([]PopCandidate, error) {
	return f, nil
}

func TestDefaultPolicyValid(t *testing.T) {
	p, err := ParsePolicy(strings.NewReader(string(defaultPolicyJSON)))
	if err != nil {
		t.Fatal(err)
	}
	if p.Launch.MaxReasonCodes != 16 || p.Launch.DecisionTTLMs != 30000 || p.Pxstream.UserCap != 2 ||
		p.Pxstream.NetworkCap != 8 || p.Pxstream.InstitutionNetworkCap != 64 || p.Pxstream.FreeTierDailyMinutes != 120 ||
		p.WaitingRoom.Global != (Bucket{600, 1200}) || p.WaitingRoom.Signup != (Bucket{400, 800}) {
		t.Fatalf("defaults drifted from the reference: %+v", p)
	}
	if len(AllReasons) != 21 {
		t.Fatalf("%d reason codes, want 21", len(AllReasons))
	}
}

func TestParsePolicyStrict(t *testing.T) {
	for name, mutate := range map[string]func(string) string{
		"unknown key": func(s string) string { return strings.Replace(s, `"version": 1,`, `"version": 1, "bogus": 2,`, 1) },
		"bad status":  func(s string) string { return strings.Replace(s, `"ru": "sanctions-prohibited"`, `"ru": "closed"`, 1) },
		"ladder order": func(s string) string {
			return strings.Replace(s, `"freezeAtBasisPoints": 9000`, `"freezeAtBasisPoints": 8000`, 1)
		},
		"bad codec":     func(s string) string { return strings.Replace(s, `["AV1", "H264"]`, `["VP9"]`, 1) },
		"trailing data": func(s string) string { return s + "{}" },
		"idle inverted": func(s string) string {
			return strings.Replace(s, `"disconnectAfterMs": 150000`, `"disconnectAfterMs": 1000`, 1)
		},
		"orphan mapping": func(s string) string { return strings.Replace(s, `"kr": "ap-northeast-1"`, `"kr": "mars-1"`, 1) },
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParsePolicy(strings.NewReader(mutate(string(defaultPolicyJSON)))); !errors.Is(err, ErrPolicy) {
				t.Fatalf("err %v, want ErrPolicy", err)
			}
		})
	}
}

func TestGate(t *testing.T) {
	p := DefaultPolicy()
	tenants := []string{"saraswati-stage", "tara-studio", "lilith-commons"}
	regions := map[string]string{"us-ca": "", "de": "", "gb": "", "in": "", "br": "", "kr": RegionWave2, "gcc": RegionWave2,
		"cn-mainland": RegionPartnerOfRecord, "ru": RegionSanctions, "atlantis": RegionWave2}
	for _, tenant := range tenants {
		for region, want := range regions {
			if want == "" && tenant == "saraswati-stage" && (region == "in" || region == "br") {
				want = WaitlistReasonTenant
			}
			t.Run(tenant+"/"+region, func(t *testing.T) {
				got, err := p.Gate(tenant, region)
				if err != nil || got != want {
					t.Fatalf("gate = %q %v, want %q", got, err, want)
				}
			})
		}
	}
	if _, err := p.Gate("nobody", "us-ca"); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("unknown tenant: %v", err)
	}
}

func pops(ps ...PopCandidate) []PopCandidate { return ps }

func pop(id string, rtt float64, workers, prio int, codecs ...string) PopCandidate {
	return PopCandidate{PopID: id, RTTMs: rtt, AvailableWorkers: workers, ProgrammingPriority: prio, Codecs: codecs}
}

func TestLadder(t *testing.T) {
	av1 := []string{"AV1", "H264"}
	near := pops(pop("a", 20, 5, 0, "AV1", "H264"))
	cases := []struct {
		name    string
		req     LaunchRequest
		fleet   LiveFleet
		surface Surface
		tier    string
		reasons []Reason
		pop     string
		codec   string
	}{
		{"native installed", probe(true, true, true, true, av1, 50, false, near, ""), nil,
			SurfaceNative, TierNative, []Reason{ReasonNativeInstalled}, "", ""},
		{"override native, missing", probe(false, true, true, true, av1, 50, false, near, "native"), nil,
			SurfaceNative, TierNative, []Reason{ReasonUserNative, ReasonNativeMissing}, "", ""},
		{"override native, installed", probe(true, false, false, false, nil, 0, false, nil, "native"), nil,
			SurfaceNative, TierNative, []Reason{ReasonUserNative, ReasonNativeInstalled}, "", ""},
		{"override pxstream skips native", probe(true, true, true, true, av1, 50, false, near, "pxstream"), nil,
			SurfacePxstream, TierPxstream, []Reason{ReasonUserPxstream, ReasonNativeInstalled, ReasonPxstreamReady, ReasonCodecAV1}, "a", "AV1"},
		{"override pxstream unready falls back", probe(true, false, true, true, av1, 50, false, near, "pxstream"), nil,
			SurfaceFallback, TierWebGPU, []Reason{ReasonUserPxstream, ReasonNativeInstalled, ReasonWebRTCUnsupported, ReasonWebGPU}, "", ""},
		{"override fallback", probe(true, true, false, true, av1, 50, false, near, "fallback"), nil,
			SurfaceFallback, TierWebGL, []Reason{ReasonUserLite, ReasonNativeInstalled, ReasonWebGL2}, "", ""},
		{"override fallback no renderer", probe(false, true, false, false, av1, 50, false, near, "fallback"), nil,
			SurfaceStatic, TierStatic, []Reason{ReasonUserLite, ReasonNativeMissing, ReasonLocalRenderNone}, "", ""},
		{"pxstream h264 only", probe(false, true, true, true, []string{"H264"}, 9, false, near, ""), nil,
			SurfacePxstream, TierPxstream, []Reason{ReasonNativeMissing, ReasonPxstreamReady, ReasonCodecH264}, "a", "H264"},
		{"priority beats rtt", probe(false, true, true, true, av1, 9, false,
			pops(pop("close", 10, 5, 0, "AV1"), pop("concert", 40, 5, 3, "AV1"), pop("far", 70, 50, 9, "AV1")), ""), nil,
			SurfacePxstream, TierPxstream, []Reason{ReasonNativeMissing, ReasonPxstreamReady, ReasonPopPriority, ReasonCodecAV1}, "concert", "AV1"},
		{"ties by rtt then workers then id", probe(false, true, true, true, av1, 9, false,
			pops(pop("z", 10, 5, 1, "AV1"), pop("y", 10, 9, 1, "AV1"), pop("x", 10, 9, 1, "AV1"), pop("w", 11, 99, 1, "AV1")), ""), nil,
			SurfacePxstream, TierPxstream, []Reason{ReasonNativeMissing, ReasonPxstreamReady, ReasonCodecAV1}, "x", "AV1"},
		{"per-pop codec: h264 pop with av1 browser", probe(false, true, true, true, av1, 9, false, pops(pop("h", 10, 1, 0, "H264")), ""), nil,
			SurfacePxstream, TierPxstream, []Reason{ReasonNativeMissing, ReasonPxstreamReady, ReasonCodecH264}, "h", "H264"},
		{"bandwidth floor is inclusive", probe(false, true, true, true, av1, 8, false, near, ""), nil,
			SurfacePxstream, TierPxstream, []Reason{ReasonNativeMissing, ReasonPxstreamReady, ReasonCodecAV1}, "a", "AV1"},
		{"bandwidth insufficient", probe(false, true, true, true, av1, 7.99, false, near, ""), nil,
			SurfaceFallback, TierWebGPU, []Reason{ReasonNativeMissing, ReasonBandwidth, ReasonWebGPU}, "", ""},
		{"webrtc unsupported", probe(false, false, true, true, av1, 50, false, near, ""), nil,
			SurfaceFallback, TierWebGPU, []Reason{ReasonNativeMissing, ReasonWebRTCUnsupported, ReasonWebGPU}, "", ""},
		{"codec unsupported", probe(false, true, false, true, nil, 50, false, near, ""), nil,
			SurfaceFallback, TierWebGL, []Reason{ReasonNativeMissing, ReasonCodecUnsupported, ReasonWebGL2}, "", ""},
		{"region restricted", probe(false, true, true, true, av1, 50, true, near, ""), nil,
			SurfaceFallback, TierWebGPU, []Reason{ReasonNativeMissing, ReasonRegionRestricted, ReasonWebGPU}, "", ""},
		{"no pops", probe(false, true, true, true, av1, 50, false, nil, ""), nil,
			SurfaceFallback, TierWebGPU, []Reason{ReasonNativeMissing, ReasonPopsMissing, ReasonWebGPU}, "", ""},
		{"workers exhausted", probe(false, true, true, true, av1, 50, false, pops(pop("a", 10, 0, 0, "AV1")), ""), nil,
			SurfaceFallback, TierWebGPU, []Reason{ReasonNativeMissing, ReasonPopWorkers, ReasonWebGPU}, "", ""},
		{"latency too high", probe(false, true, true, true, av1, 50, false, pops(pop("a", 60.5, 3, 0, "AV1")), ""), nil,
			SurfaceFallback, TierWebGPU, []Reason{ReasonNativeMissing, ReasonPopLatency, ReasonWebGPU}, "", ""},
		{"latency budget inclusive", probe(false, true, true, true, av1, 50, false, pops(pop("a", 60, 3, 0, "AV1")), ""), nil,
			SurfacePxstream, TierPxstream, []Reason{ReasonNativeMissing, ReasonPxstreamReady, ReasonCodecAV1}, "a", "AV1"},
		{"pop codec mismatch", probe(false, true, true, true, []string{"AV1"}, 50, false, pops(pop("a", 10, 3, 0, "H264")), ""), nil,
			SurfaceFallback, TierWebGPU, []Reason{ReasonNativeMissing, ReasonPopCodec, ReasonWebGPU}, "", ""},
		{"live fleet candidates", probe(false, true, true, true, av1, 50, false, nil, ""), staticFleet(near),
			SurfacePxstream, TierPxstream, []Reason{ReasonNativeMissing, ReasonLiveFleet, ReasonPxstreamReady, ReasonCodecAV1}, "a", "AV1"},
		{"every check fails", probe(false, false, false, false, nil, 1, true, pops(pop("a", 99, 0, 0)), ""), nil,
			SurfaceStatic, TierStatic, []Reason{ReasonNativeMissing, ReasonWebRTCUnsupported, ReasonCodecUnsupported, ReasonBandwidth, ReasonRegionRestricted, ReasonPopWorkers, ReasonLocalRenderNone}, "", ""},
	}
	covered := map[Reason]bool{}
	p := DefaultPolicy()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			if err := req.Validate(64); err != nil {
				t.Fatal(err)
			}
			out, err := NewResolver(p, c.fleet, func() time.Time { return clock0 }, nil).Resolve(context.Background(), &req, false)
			if err != nil || out.Decision == nil {
				t.Fatalf("%v %+v", err, out)
			}
			d := out.Decision
			if d.SelectedSurface != c.surface || d.TelemetryTier != c.tier || !slices.Equal(d.ReasonCodes, c.reasons) {
				t.Fatalf("got %s/%s %v, want %s/%s %v", d.SelectedSurface, d.TelemetryTier, d.ReasonCodes, c.surface, c.tier, c.reasons)
			}
			for _, r := range d.ReasonCodes {
				covered[r] = true
			}
			checkTarget(t, p, d, c.pop, c.codec)
		})
	}
	for _, r := range AllReasons {
		if !covered[r] {
			t.Errorf("reason %s never produced by the table", r)
		}
	}
}

// checkTarget holds the discriminated union: each kind carries exactly
// its members.
func checkTarget(t *testing.T, p *Policy, d *Decision, wantPop, wantCodec string) {
	t.Helper()
	raw, _ := json.Marshal(d.Target)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := map[string][]string{
		KindNativeDeepLink:  {"deepLink", "kind"},
		KindPxstreamBrowser: {"expectedFirstFrameBudgetMs", "kind", "matchEndpoint", "selectedCodec", "selectedPopId"},
		KindFallbackBrowser: {"fidelity", "kind", "renderer", "rendererBudget"},
		KindStaticLanding:   {"kind", "supportReason"},
	}[d.Target.Kind]
	if !slices.Equal(keys, want) {
		t.Fatalf("target %s members %v, want %v", d.Target.Kind, keys, want)
	}
	switch d.Target.Kind {
	case KindPxstreamBrowser:
		if d.Target.SelectedPopID != wantPop || d.Target.SelectedCodec != wantCodec ||
			d.Target.MatchEndpoint != "/api/v3/pxstream/match" || d.Target.ExpectedFirstFrameBudgetMs != 8000 {
			t.Fatalf("pxstream target %+v, want pop %s codec %s", d.Target, wantPop, wantCodec)
		}
	case KindFallbackBrowser:
		b := d.Target.RendererBudget
		switch d.Target.Renderer {
		case RendererWebGPU:
			if *b != (TargetRendering{"reduced", 45, 22, 32, 2, true, "tier2-density:webgpu:balanced:visible12:backfill36"}) {
				t.Fatalf("webgpu budget %+v", b)
			}
		case RendererWebGL2:
			if *b != (TargetRendering{"low", 30, 30, 18, 1, false, "tier2-density:webgl2:constrained:visible6:backfill18"}) {
				t.Fatalf("webgl2 budget %+v", b)
			}
		}
		if d.Target.Fidelity != "reduced" {
			t.Fatal(d.Target.Fidelity)
		}
	case KindNativeDeepLink:
		if !strings.HasPrefix(d.Target.DeepLink, "oshun://lilith/launch?") || !strings.Contains(d.Target.DeepLink, "decision=launch%3A") {
			t.Fatal(d.Target.DeepLink)
		}
	case KindStaticLanding:
		if d.Target.SupportReason != "local-rendering-unsupported" {
			t.Fatal(d.Target.SupportReason)
		}
	}
	if d.DecidedAt != "2026-12-02T12:00:00Z" || d.ExpiresAt != "2026-12-02T12:00:30Z" {
		t.Fatalf("times %s %s", d.DecidedAt, d.ExpiresAt)
	}
	if d.Event.DecisionID != d.DecisionID || d.Event.TelemetryTier != d.TelemetryTier || d.Event.Type != "lilith.launch.decision" {
		t.Fatalf("event mirror %+v", d.Event)
	}
}

func TestReasonsCappedAndDeduplicated(t *testing.T) {
	rs := reasons{max: 16}
	for range 3 {
		for _, r := range AllReasons {
			rs.add(r)
		}
	}
	if len(rs.list) != 16 || !slices.Equal(rs.list, AllReasons[:16]) {
		t.Fatalf("%v", rs.list)
	}
}

func TestDecisionIDStable(t *testing.T) {
	p := DefaultPolicy()
	mk := func() *LaunchRequest {
		r := probe(false, true, true, true, []string{"AV1"}, 30, false, pops(pop("a", 20, 5, 0, "AV1")), "")
		return &r
	}
	a := p.Decide(mk(), mk().Pops, false, clock0)
	b := p.Decide(mk(), mk().Pops, false, clock0)
	if a.DecisionID != b.DecisionID || !strings.HasPrefix(a.DecisionID, "launch:") || len(a.DecisionID) != len("launch:")+32 {
		t.Fatalf("ids %s %s", a.DecisionID, b.DecisionID)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatal("identical probes gave different decisions")
	}
	if c := p.Decide(mk(), mk().Pops, false, clock0.Add(time.Millisecond)); c.DecisionID == a.DecisionID {
		t.Fatal("decision time not hashed")
	}
	other := mk()
	*other.Network.SustainedDownlinkMbps = 31
	if c := p.Decide(other, other.Pops, false, clock0); c.DecisionID == a.DecisionID {
		t.Fatal("request not hashed")
	}
}

func TestDecodeLaunchRequestBadInput(t *testing.T) {
	good := `{"v1UserId":null,"tenantId":"tara-studio","clientRegion":"de","nativeClient":{"installed":false},` +
		`"browser":{"webRtc":true,"codecs":["H264"],"webGpu":true,"webGl2":true},` +
		`"network":{"sustainedDownlinkMbps":20,"probeDurationMs":3000},"region":{"pixelStreamingRestricted":false},` +
		`"pops":[{"popId":"eu-west-1","rttMs":12,"availableWorkers":3,"programmingPriority":0,"codecs":["H264"]}]}`
	if _, err := DecodeLaunchRequest(strings.NewReader(good), 64); err != nil {
		t.Fatal(err)
	}
	many := `[` + strings.TrimSuffix(strings.Repeat(`{"popId":"p","rttMs":1,"availableWorkers":1,"programmingPriority":0,"codecs":["H264"]},`, 65), ",") + `]`
	for _, c := range []struct{ name, body, field string }{
		{"unknown top-level", strings.Replace(good, `"v1UserId":null,`, `"v1UserId":null,"debug":true,`, 1), "debug"},
		{"unknown nested", strings.Replace(good, `"installed":false`, `"installed":false,"version":"1"`, 1), "version"},
		{"65 pops", strings.Replace(good, good[strings.Index(good, `[{"popId"`):len(good)-1], many, 1), "pops"},
		{"wrong type bool", strings.Replace(good, `"webRtc":true`, `"webRtc":"yes"`, 1), "browser.webRtc"},
		{"wrong type number", strings.Replace(good, `"rttMs":12`, `"rttMs":"12"`, 1), "pops.rttMs"},
		{"wrong type tenant", strings.Replace(good, `"tenantId":"tara-studio"`, `"tenantId":7`, 1), "tenantId"},
		{"missing browser", strings.Replace(good, `"browser":{"webRtc":true,"codecs":["H264"],"webGpu":true,"webGl2":true},`, ``, 1), "browser"},
		{"missing installed", strings.Replace(good, `{"installed":false}`, `{}`, 1), "nativeClient.installed"},
		{"unknown codec", strings.Replace(good, `"codecs":["H264"],"webGpu"`, `"codecs":["VP8"],"webGpu"`, 1), "browser.codecs"},
		{"bad override", strings.Replace(good, `"v1UserId":null`, `"v1UserId":null,"override":"vr"`, 1), "override"},
		{"negative rtt", strings.Replace(good, `"rttMs":12`, `"rttMs":-1`, 1), "pops[0].rttMs"},
		{"not an object", `[1,2]`, "body"},
		{"truncated", good[:40], "body"},
		{"trailing", good + `{}`, "body"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeLaunchRequest(strings.NewReader(c.body), 64)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != c.field {
				t.Fatalf("err %v, want field %q", err, c.field)
			}
		})
	}
}

func TestDistributionGate(t *testing.T) {
	rep := DistributionReport(DefaultPolicy())
	if !rep.OK || !rep.AllTiersCovered || rep.TotalWeight != 1000 {
		t.Fatalf("gate failed: %+v", rep)
	}
	for tier, want := range ExpectedShares {
		if d := rep.Shares[tier] - want; d > 0.01 || d < -0.01 {
			t.Fatalf("%s share %v", tier, rep.Shares[tier])
		}
	}
}

func TestCheckPolicy(t *testing.T) {
	if rep, err := CheckPolicy(""); err != nil || !rep.OK {
		t.Fatalf("defaults: %+v %v", rep, err)
	}
	dir := t.TempDir()
	// Raising the bandwidth floor moves the broadband profile off Pixel
	// Streaming: the gate must catch it.
	edited := strings.Replace(string(defaultPolicyJSON), `"pixelStreamingBandwidthFloorMbps": 8`, `"pixelStreamingBandwidthFloorMbps": 50`, 1)
	path := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := CheckPolicy(path)
	if err != nil || rep.OK || len(rep.Failures) == 0 {
		t.Fatalf("edited policy passed the gate: %+v %v", rep, err)
	}
	if err := os.WriteFile(path, []byte(`{"version":1,"nope":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckPolicy(path); !errors.Is(err, ErrPolicy) {
		t.Fatalf("invalid file: %v", err)
	}
}

func BenchmarkDecide(b *testing.B) {
	p := DefaultPolicy()
	for _, prof := range DeviceProfiles() {
		b.Run(prof.Name, func(b *testing.B) {
			req := prof.Request
			b.ReportAllocs()
			for b.Loop() {
				_ = p.Decide(&req, req.Pops, false, clock0)
			}
		})
	}
}

func BenchmarkLaunchHandler(b *testing.B) {
	p := DefaultPolicy()
	h := &Handlers{Policy: p, Resolver: NewResolver(p, nil, func() time.Time { return clock0 }, nil)}
	body := `{"v1UserId":"u1","tenantId":"tara-studio","clientRegion":"de","nativeClient":{"installed":false},` +
		`"browser":{"webRtc":true,"codecs":["AV1","H264"],"webGpu":true,"webGl2":true},` +
		`"network":{"sustainedDownlinkMbps":20,"probeDurationMs":3000},"region":{"pixelStreamingRestricted":false},` +
		`"pops":[{"popId":"eu-west-1","rttMs":12,"availableWorkers":3,"programmingPriority":0,"codecs":["AV1"]},` +
		`{"popId":"eu-central-1","rttMs":19,"availableWorkers":9,"programmingPriority":0,"codecs":["H264"]}]}`
	b.ReportAllocs()
	for b.Loop() {
		rec := discardRecorder{h: http.Header{}}
		h.launch(&rec, httptest.NewRequest("POST", "/api/v3/lilith/launch", strings.NewReader(body)))
		if rec.code != 200 {
			b.Fatal(rec.code)
		}
	}
}

type discardRecorder struct {
	h    http.Header
	code int
}

func (d *discardRecorder) Header() http.Header         { return d.h }
func (d *discardRecorder) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardRecorder) WriteHeader(c int)           { d.code = c }
