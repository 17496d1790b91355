package admission

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

//go:embed policy_default.json
var defaultPolicyJSON []byte

// Policy is every admission number as data. The shipped defaults
// (policy_default.json) are the reference values; an operator's file
// replaces the whole document and is decoded strictly.
type Policy struct {
	Version     int            `json:"version"`
	Launch      LaunchPolicy   `json:"launch"`
	Regions     RegionPolicy   `json:"regions"`
	Pxstream    PxstreamPolicy `json:"pxstream"`
	Realtime    RealtimePolicy `json:"realtime"`
	Abuse       AbusePolicy    `json:"abuse"`
	Idle        IdlePolicy     `json:"idle"`
	WaitingRoom RoomPolicy     `json:"waitingRoom"`
}

// LaunchPolicy drives the tier router.
type LaunchPolicy struct {
	DecisionTTLMs      int64                     `json:"decisionTtlMs"`
	MaxReasonCodes     int                       `json:"maxReasonCodes"`
	MaxPops            int                       `json:"maxPops"`
	BandwidthFloorMbps float64                   `json:"pixelStreamingBandwidthFloorMbps"`
	PopLatencyBudgetMs float64                   `json:"pixelStreamingPopLatencyBudgetMs"`
	FirstFrameBudgetMs int                       `json:"expectedFirstFrameBudgetMs"`
	MatchEndpoint      string                    `json:"matchEndpoint"`
	CodecPreference    []string                  `json:"codecPreference"` // most preferred first
	NativeDeepLink     string                    `json:"nativeDeepLink"`
	Renderers          map[string]RendererBudget `json:"renderers"` // "webgpu", "webgl2"
}

// RendererBudget is the local-render budget carried in a fallback target.
type RendererBudget struct {
	Quality            string  `json:"quality"`
	FPSTarget          int     `json:"fpsTarget"`
	FrameCostCeilingMs float64 `json:"frameCostCeilingMs"`
	VisibleAgents      int     `json:"visibleAgents"`
	MaxLOD             int     `json:"maxLod"`
	Foliage            bool    `json:"foliage"`
	DensityProfile     string  `json:"densityProfile"`
	FullFidelityAgents int     `json:"fullFidelityAgents"`
}

// Region statuses (the gate's reasons).
const (
	RegionOpen             = "open"
	RegionWave2            = "wave-2-plan"
	RegionPartnerOfRecord  = "partner-of-record-required"
	RegionSanctions        = "sanctions-prohibited"
	TenantCellGA           = "ga"
	TenantCellWaitlist     = "waitlist"
	WaitlistReasonTenant   = "tenant-waitlist"
	WaitlistTier           = "regional-waitlist"
	regionStatusForUnknown = RegionWave2
)

// RegionPolicy is the region profile and the tenant x region matrix. A
// tenant's missing cell is GA; a tenant missing from the matrix is unknown
// (400).
type RegionPolicy struct {
	Status        map[string]string            `json:"status"`
	DefaultStatus string                       `json:"defaultStatus"`
	Tenants       map[string]map[string]string `json:"tenants"`
}

// PxstreamPolicy drives Pixel Streaming admission.
type PxstreamPolicy struct {
	UserCap               int      `json:"userCap"`
	NetworkCap            int      `json:"networkCap"`
	InstitutionNetworkCap int      `json:"institutionNetworkCap"`
	ApprovedInstitutions  []string `json:"approvedInstitutions"` // tenant ids
	IPv4PrefixBits        int      `json:"ipv4PrefixBits"`
	IPv6PrefixBits        int      `json:"ipv6PrefixBits"`
	FreeTierDailyMinutes  int64    `json:"freeTierDailyMinutes"`
	BackpressureBP        int      `json:"backpressureBasisPoints"`
	LeaseTTLMs            int64    `json:"leaseTtlMs"`
}

// RealtimePolicy drives handshake admission. The reference gives no
// realtime session caps; these are the edge's own defaults.
type RealtimePolicy struct {
	UserSessionCap        int      `json:"userSessionCap"`
	NetworkSessionCap     int      `json:"networkSessionCap"`
	InstitutionNetworkCap int      `json:"institutionNetworkCap"`
	LeaseTTLMs            int64    `json:"leaseTtlMs"`
	BypassRoles           []string `json:"bypassRoles"`
}

// AbusePolicy drives the abuse classifier.
type AbusePolicy struct {
	ReviewBP                   int     `json:"reviewBasisPoints"`
	BanBP                      int     `json:"banBasisPoints"`
	MinPrecisionBP             int     `json:"minPrecisionBasisPoints"`
	MouseOnlyMinMouseEvents    int     `json:"mouseOnlyMinMouseEvents"`
	MouseOnlyBP                int     `json:"mouseOnlyBasisPoints"`
	ZeroInertiaMinSamples      int     `json:"zeroInertiaMinSamples"`
	ZeroInertiaMinRatioBP      int     `json:"zeroInertiaMinRatioBasisPoints"`
	ZeroInertiaBP              int     `json:"zeroInertiaBasisPoints"`
	ReconnectLoopMinPerMinute  float64 `json:"reconnectLoopMinPerMinute"`
	ReconnectLoopMaxJitterMs   float64 `json:"reconnectLoopMaxJitterMs"`
	ReconnectLoopBP            int     `json:"reconnectLoopBasisPoints"`
	CadenceMaxEventsPerSecond  float64 `json:"cadenceMaxEventsPerSecond"`
	CadenceRegularMinPerSecond float64 `json:"cadenceRegularMinEventsPerSecond"`
	CadenceMinJitterMs         float64 `json:"cadenceMinJitterMs"`
	ImpossibleCadenceBP        int     `json:"impossibleCadenceBasisPoints"`
	// What the edge observes is scored over fixed windows of this length
	// (the current one and the one before): match requests per subject,
	// and the UE workers' input reports.
	ObservationWindowMs int64 `json:"observationWindowMs"`
	// A reconnect loop needs at least this many gaps between matches.
	ReconnectLoopMinGaps int64 `json:"reconnectLoopMinGaps"`
	// BanTTLMs is how long a ban refuses a subject, fleet-wide.
	BanTTLMs int64 `json:"banTtlMs"`
}

// IdlePolicy drives the idle lifecycle of a leased streamer.
type IdlePolicy struct {
	PromptAfterMs     int64 `json:"promptAfterMs"`
	DisconnectAfterMs int64 `json:"disconnectAfterMs"`
	PromptGraceMs     int64 `json:"promptGraceMs"`
}

// Bucket is a token bucket's ceiling.
type Bucket struct {
	PerMinute float64 `json:"perMinute"`
	Burst     float64 `json:"burst"`
}

// RoomPolicy drives the virtual waiting room.
type RoomPolicy struct {
	Global                 Bucket            `json:"global"`
	Signup                 Bucket            `json:"signup"`
	Regions                map[string]Bucket `json:"regions"` // POP region -> bucket
	DefaultRegion          string            `json:"defaultRegion"`
	ClientRegions          map[string]string `json:"clientRegions"` // client region -> POP region
	JoinWindowMs           int64             `json:"joinWindowMs"`
	KeepPlaceMs            int64             `json:"keepPlaceMs"`
	TicketTTLMs            int64             `json:"ticketTtlMs"`
	HalfRateAtBP           int               `json:"halfRateAtBasisPoints"`
	PxstreamStopAtBP       int               `json:"pxstreamStopAtBasisPoints"`
	FreezeAtBP             int               `json:"freezeAtBasisPoints"`
	MaxAdmitsPerDrain      int               `json:"maxAdmitsPerDrain"`
	ArmAtGlobalSessions    int               `json:"armAtGlobalSessions"`
	ArmAtP95LatencyMs      float64           `json:"armAtP95LatencyMs"`
	ArmBelowStartSuccessBP int               `json:"armBelowStartSuccessBasisPoints"`
	OverflowDepth          int64             `json:"overflowDepth"`
	MetaCacheMs            int64             `json:"metaCacheMs"`
	// ArmWindowMs is the trailing window of the entry criteria (5 min).
	ArmWindowMs int64        `json:"armWindowMs"`
	Health      HealthPolicy `json:"health"`
	Abort       AbortPolicy  `json:"abort"`
	// SurgeEveryMs is how often the surge controller reads the signals
	// (the reference polls backpressure every 15 s).
	SurgeEveryMs int64 `json:"surgeEveryMs"`
	// MinSamples: a rate (start success, 5xx, a latency share) over fewer
	// samples than this is no signal.
	MinSamples int64 `json:"minSamples"`
}

// HealthPolicy clamps the admit rate to downstream health: the largest
// rate at which cold-join p95 stays <= 5 s and session-start success >=
// 99.5 % over the trailing 10 minutes.
type HealthPolicy struct {
	WindowMs       int64   `json:"windowMs"`
	ColdJoinP95Ms  int64   `json:"coldJoinP95Ms"`
	StartSuccessBP int     `json:"startSuccessBasisPoints"`
	MinPerMinute   float64 `json:"minPerMinute"`   // the clamp never goes below this
	StepUpFraction float64 `json:"stepUpFraction"` // of the bucket rate, per healthy step
}

// AbortPolicy is the surge plan's abort ladder (each condition sustained
// SustainMs; each action unwound after its trigger is green UnwindMs, in
// reverse order of application).
type AbortPolicy struct {
	SustainMs            int64 `json:"sustainMs"`
	UnwindMs             int64 `json:"unwindMs"`
	StartSuccessBelowBP  int   `json:"startSuccessBelowBasisPoints"` // halve
	ColdJoinP95AboveMs   int64 `json:"coldJoinP95AboveMs"`           // halve
	ServerErrorsAboveBP  int   `json:"serverErrorsAboveBasisPoints"` // freeze
	PopsInBackpressure   int   `json:"popsInBackpressure"`           // freeze (of the topology's POPs)
	WaitlistMedianWaitMs int64 `json:"waitlistMedianWaitMs"`         // waitlist mode (or depth > overflowDepth)
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// DefaultPolicy returns the shipped defaults (the reference values).
func DefaultPolicy() *Policy {
	p, err := ParsePolicy(bytes.NewReader(defaultPolicyJSON))
	if err != nil {
		// The embedded file is covered by TestDefaultPolicyValid; a broken
		// build is the only way here.
		return &Policy{}
	}
	return p
}

// LoadPolicy reads and validates a policy file.
func LoadPolicy(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	defer f.Close()
	return ParsePolicy(f)
}

// ParsePolicy decodes a policy strictly (unknown keys are errors) and
// validates it.
func ParsePolicy(r io.Reader) (*Policy, error) {
	dec := json.NewDecoder(io.LimitReader(r, 1<<20))
	dec.DisallowUnknownFields()
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the policy object", ErrPolicy)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks ranges and cross-references.
func (p *Policy) Validate() error {
	bad := func(f string, args ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrPolicy}, args...)...) }
	l := p.Launch
	switch {
	case p.Version != 1:
		return bad("version %d, want 1", p.Version)
	case l.DecisionTTLMs <= 0:
		return bad("launch.decisionTtlMs must be > 0")
	case l.MaxReasonCodes < 1 || l.MaxReasonCodes > len(AllReasons):
		return bad("launch.maxReasonCodes must be 1..%d", len(AllReasons))
	case l.MaxPops < 1:
		return bad("launch.maxPops must be >= 1")
	case l.BandwidthFloorMbps < 0 || l.PopLatencyBudgetMs <= 0 || l.FirstFrameBudgetMs <= 0:
		return bad("launch bandwidth floor, latency budget and first-frame budget must be positive")
	case l.MatchEndpoint == "" || l.NativeDeepLink == "":
		return bad("launch.matchEndpoint and launch.nativeDeepLink are required")
	case len(l.CodecPreference) == 0:
		return bad("launch.codecPreference is empty")
	}
	for _, c := range l.CodecPreference {
		if c != "AV1" && c != "H264" {
			return bad("launch.codecPreference: unknown codec %q", c)
		}
	}
	for _, r := range []string{RendererWebGPU, RendererWebGL2} {
		b, ok := l.Renderers[r]
		if !ok {
			return bad("launch.renderers.%s missing", r)
		}
		if b.FPSTarget <= 0 || b.FrameCostCeilingMs <= 0 || b.VisibleAgents <= 0 || b.FullFidelityAgents < 0 || b.FullFidelityAgents > b.VisibleAgents || b.MaxLOD < 0 || b.Quality == "" || b.DensityProfile == "" {
			return bad("launch.renderers.%s out of range", r)
		}
	}
	statuses := []string{RegionOpen, RegionWave2, RegionPartnerOfRecord, RegionSanctions}
	for reg, st := range p.Regions.Status {
		if !slices.Contains(statuses, st) {
			return bad("regions.status.%s: unknown status %q", reg, st)
		}
	}
	if !slices.Contains(statuses, p.Regions.DefaultStatus) {
		return bad("regions.defaultStatus: unknown status %q", p.Regions.DefaultStatus)
	}
	if len(p.Regions.Tenants) == 0 {
		return bad("regions.tenants is empty")
	}
	for t, cells := range p.Regions.Tenants {
		for reg, c := range cells {
			if c != TenantCellGA && c != TenantCellWaitlist {
				return bad("regions.tenants.%s.%s: unknown cell %q", t, reg, c)
			}
		}
	}
	x := p.Pxstream
	if x.UserCap < 1 || x.NetworkCap < 1 || x.InstitutionNetworkCap < x.NetworkCap ||
		x.IPv4PrefixBits < 8 || x.IPv4PrefixBits > 32 || x.IPv6PrefixBits < 16 || x.IPv6PrefixBits > 128 ||
		x.FreeTierDailyMinutes < 0 || x.BackpressureBP < 1 || x.BackpressureBP > 10000 || x.LeaseTTLMs <= 0 {
		return bad("pxstream out of range")
	}
	rt := p.Realtime
	if rt.UserSessionCap < 1 || rt.NetworkSessionCap < 1 || rt.InstitutionNetworkCap < rt.NetworkSessionCap || rt.LeaseTTLMs <= 0 {
		return bad("realtime out of range")
	}
	a := p.Abuse
	if a.ReviewBP < 1 || a.BanBP < a.ReviewBP || a.BanBP > 10000 || a.MinPrecisionBP < 0 || a.MinPrecisionBP > 10000 ||
		a.ObservationWindowMs <= 0 || a.ReconnectLoopMinGaps < 1 || a.BanTTLMs <= 0 {
		return bad("abuse thresholds out of range")
	}
	i := p.Idle
	if i.PromptAfterMs <= 0 || i.DisconnectAfterMs <= i.PromptAfterMs || i.PromptGraceMs <= 0 {
		return bad("idle: need 0 < promptAfterMs < disconnectAfterMs and promptGraceMs > 0")
	}
	w := p.WaitingRoom
	if w.Global.PerMinute <= 0 || w.Global.Burst < 1 || w.Signup.PerMinute <= 0 || w.Signup.Burst < 1 {
		return bad("waitingRoom global and signup buckets must be positive")
	}
	for reg, b := range w.Regions {
		if b.PerMinute <= 0 || b.Burst < 1 {
			return bad("waitingRoom.regions.%s must be positive", reg)
		}
	}
	if _, ok := w.Regions[w.DefaultRegion]; !ok {
		return bad("waitingRoom.defaultRegion %q has no bucket", w.DefaultRegion)
	}
	for c, reg := range w.ClientRegions {
		if _, ok := w.Regions[reg]; !ok {
			return bad("waitingRoom.clientRegions.%s -> %q has no bucket", c, reg)
		}
	}
	h, ab := w.Health, w.Abort
	if w.ArmWindowMs <= 0 || w.SurgeEveryMs <= 0 || w.MinSamples < 1 ||
		h.WindowMs <= 0 || h.ColdJoinP95Ms <= 0 || h.StartSuccessBP < 1 || h.StartSuccessBP > 10000 || h.MinPerMinute <= 0 ||
		h.StepUpFraction <= 0 || h.StepUpFraction > 1 ||
		ab.SustainMs <= 0 || ab.UnwindMs <= 0 || ab.StartSuccessBelowBP < 1 || ab.StartSuccessBelowBP > 10000 ||
		ab.ColdJoinP95AboveMs <= 0 || ab.ServerErrorsAboveBP < 1 || ab.ServerErrorsAboveBP > 10000 ||
		ab.PopsInBackpressure < 1 || ab.WaitlistMedianWaitMs <= 0 {
		return bad("waitingRoom arm window, surge interval, health clamp or abort ladder out of range")
	}
	if w.JoinWindowMs <= 0 || w.KeepPlaceMs <= 0 || w.TicketTTLMs <= 0 || w.MaxAdmitsPerDrain < 1 || w.MetaCacheMs < 0 ||
		!(0 < w.HalfRateAtBP && w.HalfRateAtBP <= w.PxstreamStopAtBP && w.PxstreamStopAtBP <= w.FreezeAtBP && w.FreezeAtBP <= 10000) {
		return bad("waitingRoom windows or ladder out of range")
	}
	return nil
}
