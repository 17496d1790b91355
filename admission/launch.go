package admission

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Surface is what the visitor gets.
type Surface string

const (
	SurfaceNative   Surface = "native"
	SurfacePxstream Surface = "pxstream"
	SurfaceFallback Surface = "fallback"
	SurfaceStatic   Surface = "static"
)

// Target kinds (the discriminator of Target).
const (
	KindNativeDeepLink  = "native-deep-link"
	KindPxstreamBrowser = "pxstream-browser"
	KindFallbackBrowser = "fallback-browser"
	KindStaticLanding   = "static-landing"
)

// Renderers of the fallback surface.
const (
	RendererWebGPU = "webgpu"
	RendererWebGL2 = "webgl2"
)

// Telemetry tiers.
const (
	TierStatic   = "tier_0_static"
	TierWebGL    = "tier_1_webgl"
	TierWebGPU   = "tier_2_webgpu"
	TierPxstream = "tier_3_pxstream"
	TierNative   = "tier_4_native"
)

// Tiers lists the telemetry tiers, lowest first.
var Tiers = []string{TierStatic, TierWebGL, TierWebGPU, TierPxstream, TierNative}

// Reason is a launch reason code. A decision carries 1..16 of them,
// deduplicated, in the order the ladder met them.
type Reason string

// The 21 reason codes.
const (
	// Native rung.
	ReasonNativeInstalled Reason = "native-client-installed" // native client present: deep link
	ReasonNativeMissing   Reason = "native-client-missing"   // no native client: browser surfaces
	// Overrides (rung 1).
	ReasonUserNative   Reason = "user-selected-native"    // override "native": deep link forced
	ReasonUserPxstream Reason = "user-selected-pxstream"  // override "pxstream": native preference skipped
	ReasonUserLite     Reason = "user-selected-lite-mode" // override "fallback": local render
	// Pixel Streaming readiness (rung 3); every failing check is recorded.
	ReasonWebRTCUnsupported Reason = "webrtc-unsupported"     // browser.webRtc false
	ReasonCodecUnsupported  Reason = "codec-unsupported"      // browser offers neither AV1 nor H264
	ReasonBandwidth         Reason = "bandwidth-insufficient" // downlink below the 8 Mbit/s floor
	ReasonRegionRestricted  Reason = "region-restricted"      // region probe forbids Pixel Streaming
	ReasonPopsMissing       Reason = "pop-candidates-missing" // no POP candidates (request nor fleet)
	ReasonPopWorkers        Reason = "pop-workers-exhausted"  // no candidate has an idle worker
	ReasonPopLatency        Reason = "pop-latency-too-high"   // no candidate with workers within 60 ms
	ReasonPopCodec          Reason = "pop-codec-mismatch"     // no reachable candidate shares a codec
	ReasonLiveFleet         Reason = "live-fleet-candidates"  // candidates came from the live fleet
	// Pixel Streaming chosen.
	ReasonPxstreamReady Reason = "pxstream-ready"        // all five readiness checks passed
	ReasonPopPriority   Reason = "pop-priority-selected" // a programming-priority POP beat a closer one
	ReasonCodecAV1      Reason = "codec-av1-selected"    // AV1 negotiated
	ReasonCodecH264     Reason = "codec-h264-selected"   // H264 negotiated
	// Local render (rung 4) and the floor (rung 5).
	ReasonWebGPU          Reason = "webgpu-available"            // fallback on WebGPU
	ReasonWebGL2          Reason = "webgl2-fallback"             // no WebGPU: fallback on WebGL2
	ReasonLocalRenderNone Reason = "local-rendering-unsupported" // neither: static landing
)

// AllReasons lists every reason code.
var AllReasons = []Reason{
	ReasonNativeInstalled, ReasonNativeMissing, ReasonUserNative, ReasonUserPxstream, ReasonUserLite,
	ReasonWebRTCUnsupported, ReasonCodecUnsupported, ReasonBandwidth, ReasonRegionRestricted,
	ReasonPopsMissing, ReasonPopWorkers, ReasonPopLatency, ReasonPopCodec, ReasonLiveFleet,
	ReasonPxstreamReady, ReasonPopPriority, ReasonCodecAV1, ReasonCodecH264,
	ReasonWebGPU, ReasonWebGL2, ReasonLocalRenderNone,
}

// LaunchRequest is the body of POST /api/v3/lilith/launch. Pointers mark
// required members so a missing one is named in the 400.
type LaunchRequest struct {
	V1UserID     *string        `json:"v1UserId"`
	TenantID     string         `json:"tenantId"`
	ClientRegion string         `json:"clientRegion"`
	NativeClient *NativeProbe   `json:"nativeClient"`
	Browser      *BrowserProbe  `json:"browser"`
	Network      *NetworkProbe  `json:"network"`
	Region       *RegionProbe   `json:"region"`
	Pops         []PopCandidate `json:"pops"`
	Override     string         `json:"override,omitempty"`
}

// NativeProbe says whether the native client is installed.
type NativeProbe struct {
	Installed *bool `json:"installed"`
}

// BrowserProbe is what the browser can do.
type BrowserProbe struct {
	WebRTC *bool    `json:"webRtc"`
	Codecs []string `json:"codecs"`
	WebGPU *bool    `json:"webGpu"`
	WebGL2 *bool    `json:"webGl2"`
}

// NetworkProbe is the measured downlink.
type NetworkProbe struct {
	SustainedDownlinkMbps *float64 `json:"sustainedDownlinkMbps"`
	ProbeDurationMs       *float64 `json:"probeDurationMs"`
}

// RegionProbe carries the region's Pixel Streaming restriction.
type RegionProbe struct {
	PixelStreamingRestricted *bool `json:"pixelStreamingRestricted"`
}

// PopCandidate is one Pixel Streaming point of presence.
type PopCandidate struct {
	PopID               string   `json:"popId"`
	RTTMs               float64  `json:"rttMs"`
	AvailableWorkers    int      `json:"availableWorkers"`
	ProgrammingPriority int      `json:"programmingPriority"`
	Codecs              []string `json:"codecs"`
}

// LiveFleet supplies POP candidates for a client region when the request
// carries none. The edge wires it to the streamer registry. A POP's
// AvailableWorkers are the idle streamers the caller could really lease:
// for a free user (paid false) none at a POP at or above the free tier's
// 85 % backpressure or without room beyond the paid headroom, exactly as
// the matchmaker will judge, so the router never sends a free user to a
// match that bounces it.
type LiveFleet interface {
	PopCandidates(ctx context.Context, clientRegion string, paid bool) ([]PopCandidate, error)
}

// Target is the discriminated union (on Kind): each kind carries exactly
// its own members.
type Target struct {
	Kind string `json:"kind"`
	// native-deep-link
	DeepLink string `json:"deepLink,omitempty"`
	// pxstream-browser
	MatchEndpoint              string `json:"matchEndpoint,omitempty"`
	SelectedPopID              string `json:"selectedPopId,omitempty"`
	SelectedCodec              string `json:"selectedCodec,omitempty"`
	ExpectedFirstFrameBudgetMs int    `json:"expectedFirstFrameBudgetMs,omitempty"`
	// fallback-browser
	Renderer       string           `json:"renderer,omitempty"`
	Fidelity       string           `json:"fidelity,omitempty"`
	RendererBudget *TargetRendering `json:"rendererBudget,omitempty"`
	// static-landing
	SupportReason string `json:"supportReason,omitempty"`
}

// TargetRendering is the renderer budget of a fallback target.
type TargetRendering struct {
	Quality            string  `json:"quality"`
	FPSTarget          int     `json:"fpsTarget"`
	FrameCostCeilingMs float64 `json:"frameCostCeilingMs"`
	VisibleAgents      int     `json:"visibleAgents"`
	MaxLOD             int     `json:"maxLod"`
	Foliage            bool    `json:"foliage"`
	DensitySignature   string  `json:"densitySignature"`
}

// Narrative backfill (reference selectTier2AgentDensityBudget): culled
// agents stay present as narrative summary, max(visible*3, 12) of them.
const (
	backfillPerVisible = 3
	backfillFloor      = 12
)

// DensitySignature is the Tier-2 density budget's parity string,
// tier2-density:<renderer>:<profile>:visible<n>:backfill<max(n*3,12)>,
// where n is the agents drawn at full fidelity.
func DensitySignature(renderer string, b RendererBudget) string {
	visible := b.FullFidelityAgents
	backfill := max(visible*backfillPerVisible, backfillFloor)
	return "tier2-density:" + renderer + ":" + b.DensityProfile + ":visible" + strconv.Itoa(visible) + ":backfill" + strconv.Itoa(backfill)
}

// Decision is the 200 answer of the launch endpoint.
type Decision struct {
	DecisionID      string        `json:"decisionId"`
	V1UserID        *string       `json:"v1UserId"`
	SelectedSurface Surface       `json:"selectedSurface"`
	ReasonCodes     []Reason      `json:"reasonCodes"`
	Target          Target        `json:"target"`
	ClientRegion    string        `json:"clientRegion"`
	DecidedAt       string        `json:"decidedAt"`
	ExpiresAt       string        `json:"expiresAt"`
	TelemetryTier   string        `json:"telemetryTier"`
	Event           DecisionEvent `json:"event"`
}

// DecisionEvent mirrors the decision for the analytics bus.
type DecisionEvent struct {
	Type            string   `json:"type"` // "lilith.launch.decision"
	DecisionID      string   `json:"decisionId"`
	V1UserID        *string  `json:"v1UserId"`
	TenantID        string   `json:"tenantId"`
	ClientRegion    string   `json:"clientRegion"`
	SelectedSurface Surface  `json:"selectedSurface"`
	TelemetryTier   string   `json:"telemetryTier"`
	ReasonCodes     []Reason `json:"reasonCodes"`
	SelectedPopID   string   `json:"selectedPopId,omitempty"`
	DecidedAt       string   `json:"decidedAt"`
}

// WaitlistAnswer is the 200 answer for a region/tenant pair that is not
// open.
type WaitlistAnswer struct {
	Tier         string `json:"tier"` // "regional-waitlist"
	Reason       string `json:"reason"`
	ClientRegion string `json:"clientRegion"`
	TenantID     string `json:"tenantId"`
}

// LaunchResult is exactly one of the two answers.
type LaunchResult struct {
	Waitlist *WaitlistAnswer
	Decision *Decision
}

// MaxLaunchBody bounds the request body.
const MaxLaunchBody = 64 << 10

// DecodeLaunchRequest decodes strictly and validates; a failure is a
// *FieldError naming the field.
func DecodeLaunchRequest(r io.Reader, maxPops int) (*LaunchRequest, error) {
	body, err := io.ReadAll(io.LimitReader(r, MaxLaunchBody+1))
	if err != nil {
		return nil, &FieldError{Field: "body", Message: "unreadable"}
	}
	if len(body) > MaxLaunchBody {
		return nil, &FieldError{Field: "body", Message: fmt.Sprintf("larger than %d bytes", MaxLaunchBody)}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var req LaunchRequest
	if err := dec.Decode(&req); err != nil {
		return nil, jsonFieldError(err)
	}
	if dec.More() {
		return nil, &FieldError{Field: "body", Message: "trailing data after the request object"}
	}
	if err := req.Validate(maxPops); err != nil {
		return nil, err
	}
	return &req, nil
}

// jsonFieldError maps encoding/json errors to the field they concern.
func jsonFieldError(err error) *FieldError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		f := te.Field
		if f == "" {
			f = "body"
		}
		return &FieldError{Field: f, Message: "wrong type: want " + te.Type.String() + ", got JSON " + te.Value}
	}
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		if f, err := strconv.Unquote(rest); err == nil {
			if f == "" {
				f = `""`
			}
			return &FieldError{Field: f, Message: "unknown field"}
		}
	}
	return &FieldError{Field: "body", Message: "malformed JSON: " + msg}
}

func knownCodec(c string) bool { return c == "AV1" || c == "H264" }

func finiteNonNeg(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) && f >= 0 }

// Validate checks a decoded request.
func (q *LaunchRequest) Validate(maxPops int) error {
	fe := func(f, m string) error { return &FieldError{Field: f, Message: m} }
	switch {
	case q.TenantID == "":
		return fe("tenantId", "required")
	case q.ClientRegion == "":
		return fe("clientRegion", "required")
	case len(q.TenantID) > 64:
		return fe("tenantId", "longer than 64 bytes")
	case len(q.ClientRegion) > 32:
		return fe("clientRegion", "longer than 32 bytes")
	case q.V1UserID != nil && len(*q.V1UserID) > 128:
		return fe("v1UserId", "longer than 128 bytes")
	case q.NativeClient == nil:
		return fe("nativeClient", "required")
	case q.NativeClient.Installed == nil:
		return fe("nativeClient.installed", "required")
	case q.Browser == nil:
		return fe("browser", "required")
	case q.Browser.WebRTC == nil:
		return fe("browser.webRtc", "required")
	case q.Browser.WebGPU == nil:
		return fe("browser.webGpu", "required")
	case q.Browser.WebGL2 == nil:
		return fe("browser.webGl2", "required")
	case q.Browser.Codecs == nil:
		return fe("browser.codecs", "required")
	case len(q.Browser.Codecs) > 8:
		return fe("browser.codecs", "more than 8 codecs")
	case q.Network == nil:
		return fe("network", "required")
	case q.Network.SustainedDownlinkMbps == nil || !finiteNonNeg(*q.Network.SustainedDownlinkMbps):
		return fe("network.sustainedDownlinkMbps", "required, finite and >= 0")
	case q.Network.ProbeDurationMs == nil || !finiteNonNeg(*q.Network.ProbeDurationMs):
		return fe("network.probeDurationMs", "required, finite and >= 0")
	case q.Region == nil:
		return fe("region", "required")
	case q.Region.PixelStreamingRestricted == nil:
		return fe("region.pixelStreamingRestricted", "required")
	case len(q.Pops) > maxPops:
		return fe("pops", fmt.Sprintf("more than %d candidates", maxPops))
	}
	switch q.Override {
	case "", "native", "pxstream", "fallback":
	default:
		return fe("override", `must be "native", "pxstream" or "fallback"`)
	}
	for _, c := range q.Browser.Codecs {
		if !knownCodec(c) {
			return fe("browser.codecs", fmt.Sprintf("unknown codec %q", c))
		}
	}
	for i, p := range q.Pops {
		at := "pops[" + strconv.Itoa(i) + "]"
		switch {
		case p.PopID == "" || len(p.PopID) > 64:
			return fe(at+".popId", "required, at most 64 bytes")
		case !finiteNonNeg(p.RTTMs):
			return fe(at+".rttMs", "finite and >= 0")
		case p.AvailableWorkers < 0:
			return fe(at+".availableWorkers", ">= 0")
		case len(p.Codecs) > 8:
			return fe(at+".codecs", "more than 8 codecs")
		}
		for _, c := range p.Codecs {
			if !knownCodec(c) {
				return fe(at+".codecs", fmt.Sprintf("unknown codec %q", c))
			}
		}
	}
	return nil
}

// Resolver answers launch requests: the region/tenant gate, then the
// surface ladder. It is safe for concurrent use.
type Resolver struct {
	p       *Policy          // immutable after New
	fleet   LiveFleet        // may be nil; immutable after New
	now     func() time.Time // immutable after New
	metrics *Metrics         // may be nil
}

// NewResolver returns a Resolver. fleet may be nil (then requests must
// carry their POPs); now may be nil (time.Now); m may be nil.
func NewResolver(p *Policy, fleet LiveFleet, now func() time.Time, m *Metrics) *Resolver {
	if now == nil {
		now = time.Now
	}
	return &Resolver{p: p, fleet: fleet, now: now, metrics: m}
}

// Gate is the region/tenant availability check: "" when the pair is open,
// else the waitlist reason. An unknown tenant is a *FieldError.
func (p *Policy) Gate(tenantID, clientRegion string) (string, error) {
	cells, ok := p.Regions.Tenants[tenantID]
	if !ok {
		return "", &FieldError{Field: "tenantId", Message: fmt.Sprintf("unknown tenant %q", tenantID)}
	}
	st, ok := p.Regions.Status[clientRegion]
	if !ok {
		st = p.Regions.DefaultStatus
	}
	if st != RegionOpen {
		return st, nil
	}
	if cells[clientRegion] == TenantCellWaitlist {
		return WaitlistReasonTenant, nil
	}
	return "", nil
}

// Resolve runs the gate and, if the pair is open, the ladder. The request
// must have passed Validate.
// Resolve decides a launch; paid is the caller's verified entitlement
// (a paid access token), which the live fleet's candidates depend on.
func (r *Resolver) Resolve(ctx context.Context, req *LaunchRequest, paid bool) (LaunchResult, error) {
	reason, err := r.p.Gate(req.TenantID, req.ClientRegion)
	if err != nil {
		return LaunchResult{}, err
	}
	if reason != "" {
		r.metrics.waitlisted(reason)
		return LaunchResult{Waitlist: &WaitlistAnswer{Tier: WaitlistTier, Reason: reason, ClientRegion: req.ClientRegion, TenantID: req.TenantID}}, nil
	}
	pops, fromFleet := req.Pops, false
	if len(pops) == 0 && r.fleet != nil && !*req.Region.PixelStreamingRestricted && req.Override != "fallback" {
		fp, err := r.fleet.PopCandidates(ctx, req.ClientRegion, paid)
		if err == nil && len(fp) > 0 {
			if len(fp) > r.p.Launch.MaxPops {
				fp = fp[:r.p.Launch.MaxPops]
			}
			pops, fromFleet = fp, true
		}
	}
	d := r.p.Decide(req, pops, fromFleet, r.now())
	r.metrics.decided(d)
	return LaunchResult{Decision: &d}, nil
}

type reasons struct {
	list []Reason
	max  int
}

func (rs *reasons) add(r Reason) {
	if len(rs.list) < rs.max && !slices.Contains(rs.list, r) {
		rs.list = append(rs.list, r)
	}
}

// Decide is the pure ladder: the same request, POPs and clock give the
// same decision, byte for byte.
func (p *Policy) Decide(req *LaunchRequest, pops []PopCandidate, fromFleet bool, now time.Time) Decision {
	lp := &p.Launch
	rs := reasons{list: make([]Reason, 0, 8), max: lp.MaxReasonCodes}
	var (
		surface Surface
		target  Target
		tier    string
	)
	installed := *req.NativeClient.Installed
	switch {
	case req.Override == "native":
		rs.add(ReasonUserNative)
		surface = SurfaceNative
	case req.Override == "fallback":
		rs.add(ReasonUserLite)
	case req.Override == "pxstream":
		rs.add(ReasonUserPxstream)
	case installed:
		rs.add(ReasonNativeInstalled)
		surface = SurfaceNative
	}
	if surface == "" || req.Override == "native" {
		if installed {
			rs.add(ReasonNativeInstalled)
		} else {
			rs.add(ReasonNativeMissing)
		}
	}
	if surface == "" && req.Override != "fallback" {
		if pop, codec, ok := p.pxstreamReady(req, pops, fromFleet, &rs); ok {
			surface = SurfacePxstream
			target = Target{Kind: KindPxstreamBrowser, MatchEndpoint: lp.MatchEndpoint, SelectedPopID: pop,
				SelectedCodec: codec, ExpectedFirstFrameBudgetMs: lp.FirstFrameBudgetMs}
			tier = TierPxstream
		}
	}
	if surface == "" {
		var renderer string
		switch {
		case *req.Browser.WebGPU:
			renderer, tier = RendererWebGPU, TierWebGPU
			rs.add(ReasonWebGPU)
		case *req.Browser.WebGL2:
			renderer, tier = RendererWebGL2, TierWebGL
			rs.add(ReasonWebGL2)
		}
		if renderer != "" {
			surface = SurfaceFallback
			b := lp.Renderers[renderer]
			target = Target{Kind: KindFallbackBrowser, Renderer: renderer, Fidelity: "reduced", RendererBudget: &TargetRendering{
				Quality: b.Quality, FPSTarget: b.FPSTarget, FrameCostCeilingMs: b.FrameCostCeilingMs,
				VisibleAgents: b.VisibleAgents, MaxLOD: b.MaxLOD, Foliage: b.Foliage,
				DensitySignature: DensitySignature(renderer, b),
			}}
		} else {
			surface, tier = SurfaceStatic, TierStatic
			rs.add(ReasonLocalRenderNone)
			target = Target{Kind: KindStaticLanding, SupportReason: string(ReasonLocalRenderNone)}
		}
	}
	decidedAt := now.UTC().Truncate(time.Millisecond)
	id := decisionID(req, pops, surface, rs.list, decidedAt)
	if surface == SurfaceNative {
		tier = TierNative
		target = Target{Kind: KindNativeDeepLink, DeepLink: lp.NativeDeepLink + "?decision=" + url.QueryEscape(id) +
			"&region=" + url.QueryEscape(req.ClientRegion) + "&tenant=" + url.QueryEscape(req.TenantID)}
	}
	da := decidedAt.Format(time.RFC3339Nano)
	d := Decision{
		DecisionID: id, V1UserID: req.V1UserID, SelectedSurface: surface, ReasonCodes: rs.list,
		Target: target, ClientRegion: req.ClientRegion, DecidedAt: da,
		ExpiresAt:     decidedAt.Add(ms(lp.DecisionTTLMs)).Format(time.RFC3339Nano),
		TelemetryTier: tier,
	}
	d.Event = DecisionEvent{Type: "lilith.launch.decision", DecisionID: id, V1UserID: req.V1UserID,
		TenantID: req.TenantID, ClientRegion: req.ClientRegion, SelectedSurface: surface,
		TelemetryTier: tier, ReasonCodes: rs.list, SelectedPopID: target.SelectedPopID, DecidedAt: da}
	return d
}

// pxstreamReady runs the five readiness checks, recording every failure,
// and picks the POP: programming priority desc, RTT asc, workers desc,
// then id (determinism).
func (p *Policy) pxstreamReady(req *LaunchRequest, pops []PopCandidate, fromFleet bool, rs *reasons) (string, string, bool) {
	lp := &p.Launch
	ok := true
	if !*req.Browser.WebRTC {
		rs.add(ReasonWebRTCUnsupported)
		ok = false
	}
	browserCodec := false
	for _, c := range lp.CodecPreference {
		if slices.Contains(req.Browser.Codecs, c) {
			browserCodec = true
			break
		}
	}
	if !browserCodec {
		rs.add(ReasonCodecUnsupported)
		ok = false
	}
	if *req.Network.SustainedDownlinkMbps < lp.BandwidthFloorMbps {
		rs.add(ReasonBandwidth)
		ok = false
	}
	if *req.Region.PixelStreamingRestricted {
		rs.add(ReasonRegionRestricted)
		ok = false
	}
	if fromFleet {
		rs.add(ReasonLiveFleet)
	}
	if len(pops) == 0 {
		rs.add(ReasonPopsMissing)
		return "", "", false
	}
	var (
		best                    *PopCandidate
		bestCodec               string
		minRTT                  = math.Inf(1)
		anyWorkers, anyInBudget bool
	)
	for i := range pops {
		c := &pops[i]
		if c.AvailableWorkers <= 0 {
			continue
		}
		anyWorkers = true
		if c.RTTMs > lp.PopLatencyBudgetMs {
			continue
		}
		anyInBudget = true
		codec := ""
		for _, pc := range lp.CodecPreference {
			if slices.Contains(req.Browser.Codecs, pc) && slices.Contains(c.Codecs, pc) {
				codec = pc
				break
			}
		}
		if codec == "" {
			continue
		}
		minRTT = math.Min(minRTT, c.RTTMs)
		if best == nil || popBefore(c, best) {
			best, bestCodec = c, codec
		}
	}
	switch {
	case !anyWorkers:
		rs.add(ReasonPopWorkers)
	case !anyInBudget:
		rs.add(ReasonPopLatency)
	case best == nil:
		if browserCodec {
			rs.add(ReasonPopCodec)
		}
	}
	if !ok || best == nil {
		return "", "", false
	}
	rs.add(ReasonPxstreamReady)
	if best.RTTMs > minRTT {
		rs.add(ReasonPopPriority)
	}
	if bestCodec == "AV1" {
		rs.add(ReasonCodecAV1)
	} else {
		rs.add(ReasonCodecH264)
	}
	return best.PopID, bestCodec, true
}

func popBefore(a, b *PopCandidate) bool {
	if a.ProgrammingPriority != b.ProgrammingPriority {
		return a.ProgrammingPriority > b.ProgrammingPriority
	}
	if a.RTTMs != b.RTTMs {
		return a.RTTMs < b.RTTMs
	}
	if a.AvailableWorkers != b.AvailableWorkers {
		return a.AvailableWorkers > b.AvailableWorkers
	}
	return a.PopID < b.PopID
}

// canonicalRequest is the request as hashed: fixed member order, the
// effective POP list, no optional-member ambiguity.
type canonicalRequest struct {
	V1UserID     *string        `json:"v1UserId"`
	TenantID     string         `json:"tenantId"`
	ClientRegion string         `json:"clientRegion"`
	Installed    bool           `json:"nativeInstalled"`
	WebRTC       bool           `json:"webRtc"`
	Codecs       []string       `json:"codecs"`
	WebGPU       bool           `json:"webGpu"`
	WebGL2       bool           `json:"webGl2"`
	Downlink     float64        `json:"sustainedDownlinkMbps"`
	ProbeMs      float64        `json:"probeDurationMs"`
	Restricted   bool           `json:"pixelStreamingRestricted"`
	Pops         []PopCandidate `json:"pops"`
	Override     string         `json:"override"`
}

// decisionID is "launch:" + the first 32 hex digits of SHA-256 over the
// canonical request, the surface, the reasons and the decision time (ms).
func decisionID(req *LaunchRequest, pops []PopCandidate, s Surface, rs []Reason, at time.Time) string {
	c := canonicalRequest{
		V1UserID: req.V1UserID, TenantID: req.TenantID, ClientRegion: req.ClientRegion,
		Installed: *req.NativeClient.Installed, WebRTC: *req.Browser.WebRTC, Codecs: req.Browser.Codecs,
		WebGPU: *req.Browser.WebGPU, WebGL2: *req.Browser.WebGL2,
		Downlink: *req.Network.SustainedDownlinkMbps, ProbeMs: *req.Network.ProbeDurationMs,
		Restricted: *req.Region.PixelStreamingRestricted, Pops: pops, Override: req.Override,
	}
	b, _ := json.Marshal(c) // plain structs: cannot fail
	h := sha256.New()
	h.Write(b)
	h.Write([]byte{'\n'})
	h.Write([]byte(s))
	for _, r := range rs {
		h.Write([]byte{'\n'})
		h.Write([]byte(r))
	}
	h.Write([]byte{'\n'})
	h.Write(strconv.AppendInt(nil, at.UnixMilli(), 10))
	var sum [sha256.Size]byte
	return "launch:" + hex.EncodeToString(h.Sum(sum[:0])[:16])
}
