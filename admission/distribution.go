package admission

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// DeviceProfile is one weighted synthetic device of the distribution gate.
type DeviceProfile struct {
	Name            string
	Weight          int
	Request         LaunchRequest
	ExpectedSurface Surface
	ExpectedTier    string
	RequiredReasons []Reason
}

// Expected telemetry-tier shares of the device mix, and the tolerance.
var (
	ExpectedShares = map[string]float64{
		TierNative: 0.26, TierPxstream: 0.34, TierWebGPU: 0.22, TierWebGL: 0.14, TierStatic: 0.04,
	}
	ShareTolerance = 0.01
)

func bp(b bool) *bool { return &b }

func fp(f float64) *float64 { return &f }

func probe(installed, webRTC, webGPU, webGL2 bool, codecs []string, mbps float64, restricted bool, pops []PopCandidate, override string) LaunchRequest {
	if codecs == nil {
		codecs = []string{}
	}
	return LaunchRequest{
		TenantID: "lilith-commons", ClientRegion: "us-ca",
		NativeClient: &NativeProbe{Installed: bp(installed)},
		Browser:      &BrowserProbe{WebRTC: bp(webRTC), Codecs: codecs, WebGPU: bp(webGPU), WebGL2: bp(webGL2)},
		Network:      &NetworkProbe{SustainedDownlinkMbps: fp(mbps), ProbeDurationMs: fp(3000)},
		Region:       &RegionProbe{PixelStreamingRestricted: bp(restricted)},
		Pops:         pops, Override: override,
	}
}

// DeviceProfiles is the synthetic device mix (total weight 1,000). It is
// code, not policy: the gate holds an edited policy to this mix.
func DeviceProfiles() []DeviceProfile {
	near := []PopCandidate{
		{PopID: "us-west-2", RTTMs: 18, AvailableWorkers: 40, ProgrammingPriority: 0, Codecs: []string{"AV1", "H264"}},
		{PopID: "us-east-1", RTTMs: 64, AvailableWorkers: 200, ProgrammingPriority: 0, Codecs: []string{"AV1", "H264"}},
	}
	concert := []PopCandidate{
		{PopID: "us-west-2", RTTMs: 21, AvailableWorkers: 12, ProgrammingPriority: 0, Codecs: []string{"H264"}},
		{PopID: "us-west-2-concert", RTTMs: 34, AvailableWorkers: 30, ProgrammingPriority: 2, Codecs: []string{"H264"}},
	}
	av1h264 := []string{"AV1", "H264"}
	return []DeviceProfile{
		{"native-desktop", 200, probe(true, true, true, true, av1h264, 50, false, nil, ""),
			SurfaceNative, TierNative, []Reason{ReasonNativeInstalled}},
		{"native-override-headset", 60, probe(false, true, false, true, []string{"H264"}, 20, false, nil, "native"),
			SurfaceNative, TierNative, []Reason{ReasonUserNative, ReasonNativeMissing}},
		{"broadband-browser-av1", 220, probe(false, true, true, true, av1h264, 45, false, near, ""),
			SurfacePxstream, TierPxstream, []Reason{ReasonNativeMissing, ReasonPxstreamReady, ReasonCodecAV1}},
		{"concert-attendee-h264", 120, probe(false, true, false, true, []string{"H264"}, 25, false, concert, ""),
			SurfacePxstream, TierPxstream, []Reason{ReasonPxstreamReady, ReasonPopPriority, ReasonCodecH264}},
		{"webgpu-laptop-thin-link", 130, probe(false, true, true, true, av1h264, 4, false, near, ""),
			SurfaceFallback, TierWebGPU, []Reason{ReasonBandwidth, ReasonWebGPU}},
		{"webgpu-lite-mode", 90, probe(false, true, true, true, av1h264, 60, false, near, "fallback"),
			SurfaceFallback, TierWebGPU, []Reason{ReasonUserLite, ReasonWebGPU}},
		{"webgl2-restricted-region", 140, probe(false, false, false, true, nil, 12, true, nil, ""),
			SurfaceFallback, TierWebGL, []Reason{ReasonWebRTCUnsupported, ReasonRegionRestricted, ReasonWebGL2}},
		{"legacy-no-renderer", 40, probe(false, false, false, false, nil, 2, false, nil, ""),
			SurfaceStatic, TierStatic, []Reason{ReasonLocalRenderNone}},
	}
}

// Report is the distribution gate's result.
type Report struct {
	OK               bool               `json:"ok"`
	TotalWeight      int                `json:"totalWeight"`
	Shares           map[string]float64 `json:"shares"`
	ExpectedShares   map[string]float64 `json:"expectedShares"`
	Tolerance        float64            `json:"tolerance"`
	AllTiersCovered  bool               `json:"allTiersCovered"`
	ReasonsCovered   []Reason           `json:"reasonsCovered"`
	Failures         []string           `json:"failures,omitempty"`
	ProfilesAnalysed int                `json:"profilesAnalysed"`
	// The abuse classifier's precision gate under the same policy: its
	// precision and recall over the labelled set, in basis points.
	AbusePrecisionBP int `json:"abusePrecisionBasisPoints"`
	AbuseRecallBP    int `json:"abuseRecallBasisPoints"`
	AbuseSamples     int `json:"abuseSamples"`
}

// DistributionReport runs the device mix through the real resolver (gate
// and ladder) under p.
func DistributionReport(p *Policy) Report {
	rep := Report{Shares: map[string]float64{}, ExpectedShares: ExpectedShares, Tolerance: ShareTolerance}
	res := NewResolver(p, nil, func() time.Time { return time.UnixMilli(0) }, nil)
	weights := map[string]int{}
	for _, prof := range DeviceProfiles() {
		rep.ProfilesAnalysed++
		rep.TotalWeight += prof.Weight
		req := prof.Request
		if err := req.Validate(p.Launch.MaxPops); err != nil {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s: invalid request: %v", prof.Name, err))
			continue
		}
		out, err := res.Resolve(context.Background(), &req, false)
		if err != nil || out.Decision == nil {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s: not routed (err %v, waitlist %+v)", prof.Name, err, out.Waitlist))
			continue
		}
		d := out.Decision
		weights[d.TelemetryTier] += prof.Weight
		if d.SelectedSurface != prof.ExpectedSurface || d.TelemetryTier != prof.ExpectedTier {
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s: routed to %s/%s, want %s/%s", prof.Name, d.SelectedSurface, d.TelemetryTier, prof.ExpectedSurface, prof.ExpectedTier))
		}
		for _, r := range prof.RequiredReasons {
			if !slices.Contains(d.ReasonCodes, r) {
				rep.Failures = append(rep.Failures, fmt.Sprintf("%s: required reason %s missing (got %v)", prof.Name, r, d.ReasonCodes))
			}
		}
		for _, r := range d.ReasonCodes {
			if !slices.Contains(rep.ReasonsCovered, r) {
				rep.ReasonsCovered = append(rep.ReasonsCovered, r)
			}
		}
	}
	if rep.TotalWeight != 1000 {
		rep.Failures = append(rep.Failures, fmt.Sprintf("total weight %d, want 1000", rep.TotalWeight))
	}
	rep.AllTiersCovered = true
	for _, tier := range Tiers {
		share := 0.0
		if rep.TotalWeight > 0 {
			share = float64(weights[tier]) / float64(rep.TotalWeight)
		}
		rep.Shares[tier] = share
		if weights[tier] == 0 {
			rep.AllTiersCovered = false
			rep.Failures = append(rep.Failures, fmt.Sprintf("tier %s never reached", tier))
		}
		if want := ExpectedShares[tier]; math.Abs(share-want) > ShareTolerance+1e-9 {
			rep.Failures = append(rep.Failures, fmt.Sprintf("tier %s share %.3f outside %.2f±%.2f", tier, share, want, ShareTolerance))
		}
	}
	rep.OK = len(rep.Failures) == 0
	return rep
}

// CheckPolicy loads a policy file ("" for the shipped defaults) and runs
// the distribution gate over it: what `egbe-edge policy check` prints. An
// unreadable or invalid file is an error; a gate failure is Report.OK ==
// false with the failures listed.
func CheckPolicy(path string) (Report, error) {
	p := DefaultPolicy()
	if path != "" {
		var err error
		if p, err = LoadPolicy(path); err != nil {
			return Report{}, err
		}
	}
	rep := DistributionReport(p)
	samples, err := AbuseSamples()
	if err != nil {
		return rep, err
	}
	rep.AbuseSamples = len(samples)
	rep.AbusePrecisionBP, rep.AbuseRecallBP = p.Abuse.AbusePrecision(samples)
	if rep.AbusePrecisionBP < p.Abuse.MinPrecisionBP {
		rep.OK = false
		rep.Failures = append(rep.Failures, fmt.Sprintf("abuse classifier precision %d bp below the %d bp gate", rep.AbusePrecisionBP, p.Abuse.MinPrecisionBP))
	}
	return rep, nil
}
