package matchmaker

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
)

// Residency scopes (reference: us, eu, apac, india, latam, plus global).
const (
	ScopeUS     = "us"
	ScopeEU     = "eu"
	ScopeAPAC   = "apac"
	ScopeIndia  = "india"
	ScopeLatAm  = "latam"
	ScopeGlobal = "global"
)

// POP health values. Only HealthAccepting POPs take new matches.
const (
	HealthAccepting = "accepting"
	HealthDraining  = "draining"
	HealthOffline   = "offline"
)

// Reference constants.
const (
	DefaultLatencyBudgetMs    = 60    // pixelStreamingPopLatencyBudgetMs
	DefaultFreeTierMaxUtilBP  = 8_500 // FREE_TIER_BACKPRESSURE_BASIS_POINTS
	DefaultSessionsPerGPUNode = 6     // class-tier sessions per 24-vCPU node
	maxTopologyBytes          = 1 << 20
	topologyVersion           = 1
)

//go:embed topology_default.json
var defaultTopologyJSON []byte

// Topology is the static part of the fleet: what registration cannot tell.
type Topology struct {
	Version int    `json:"version"`
	Note    string `json:"note,omitempty"`
	// LatencyBudgetMs: a POP whose RTT for the client region exceeds it is
	// not a candidate.
	LatencyBudgetMs int `json:"latency_budget_ms"`
	// FreeTierMaxUtilBP: free-tier requests only go to POPs below this
	// utilisation (basis points of max sessions).
	FreeTierMaxUtilBP int `json:"free_tier_max_utilisation_bp"`
	// SessionsPerGPUNode converts registered streamers to GPU nodes in use
	// for the quota headroom on the dashboard.
	SessionsPerGPUNode int `json:"sessions_per_gpu_node"`
	// Regions maps a client region to its residency scope.
	Regions map[string]string `json:"regions"`
	POPs    []POP             `json:"pops"`
}

// POP is one point of presence.
type POP struct {
	ID        string `json:"id"`
	Residency string `json:"residency"`
	Health    string `json:"health"`
	// MaxSessions is the concurrency target (sessions, not GPU nodes).
	MaxSessions int `json:"max_sessions"`
	// GPUQuota is in GPU nodes.
	GPUQuota int `json:"gpu_quota"`
	// PaidHeadroomSessions are held back from free-tier requests.
	PaidHeadroomSessions int `json:"paid_headroom_sessions"`
	// Priority is the programming priority credit (score -= priority*75).
	Priority int            `json:"priority"`
	Codecs   []string       `json:"codecs"`
	RTTMs    map[string]int `json:"rtt_ms"`
}

// DefaultTopology is the embedded sample (deploy/pxstream-topology.json).
func DefaultTopology() *Topology {
	t, err := ParseTopology(defaultTopologyJSON)
	if err != nil {
		// The embedded file is covered by TestDefaultTopology; reaching this
		// is a build defect, and library code does not panic: fall back to
		// an empty topology that Validate rejects.
		return &Topology{}
	}
	return t
}

// LoadTopology reads and validates a topology file.
func LoadTopology(path string) (*Topology, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTopology, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTopologyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrTopology, path, err)
	}
	t, err := ParseTopology(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ParseTopology strictly decodes (unknown keys are errors) and validates.
func ParseTopology(b []byte) (*Topology, error) {
	if len(b) > maxTopologyBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrTopology, maxTopologyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var t Topology
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTopology, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the topology object", ErrTopology)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

func validScope(s string) bool {
	switch s {
	case ScopeUS, ScopeEU, ScopeAPAC, ScopeIndia, ScopeLatAm, ScopeGlobal:
		return true
	}
	return false
}

// Validate checks the topology is usable and normalises codec names.
func (t *Topology) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrTopology, fmt.Sprintf(format, a...))
	}
	if t.Version != topologyVersion {
		return bad("version %d (want %d)", t.Version, topologyVersion)
	}
	if t.LatencyBudgetMs <= 0 || t.LatencyBudgetMs > 1000 {
		return bad("latency_budget_ms %d out of (0,1000]", t.LatencyBudgetMs)
	}
	if t.FreeTierMaxUtilBP <= 0 || t.FreeTierMaxUtilBP > 10_000 {
		return bad("free_tier_max_utilisation_bp %d out of (0,10000]", t.FreeTierMaxUtilBP)
	}
	if t.SessionsPerGPUNode <= 0 {
		return bad("sessions_per_gpu_node must be positive")
	}
	if len(t.POPs) == 0 {
		return bad("no pops")
	}
	for r, s := range t.Regions {
		if r == "" || !validScope(s) {
			return bad("region %q: residency %q", r, s)
		}
	}
	seen := make(map[string]bool, len(t.POPs))
	for i := range t.POPs {
		p := &t.POPs[i]
		switch {
		case p.ID == "":
			return bad("pops[%d]: empty id", i)
		case seen[p.ID]:
			return bad("pop %s: duplicate id", p.ID)
		case !validScope(p.Residency):
			return bad("pop %s: residency %q", p.ID, p.Residency)
		case p.Health != HealthAccepting && p.Health != HealthDraining && p.Health != HealthOffline:
			return bad("pop %s: health %q", p.ID, p.Health)
		case p.MaxSessions <= 0:
			return bad("pop %s: max_sessions must be positive", p.ID)
		case p.GPUQuota < 0:
			return bad("pop %s: negative gpu_quota", p.ID)
		case p.PaidHeadroomSessions < 0 || p.PaidHeadroomSessions >= p.MaxSessions:
			return bad("pop %s: paid_headroom_sessions %d out of [0,max_sessions)", p.ID, p.PaidHeadroomSessions)
		case len(p.Codecs) == 0:
			return bad("pop %s: no codecs", p.ID)
		}
		seen[p.ID] = true
		for j, c := range p.Codecs {
			n, ok := normCodec(c)
			if !ok {
				return bad("pop %s: codec %q", p.ID, c)
			}
			p.Codecs[j] = n
		}
		for r, ms := range p.RTTMs {
			if _, ok := t.Regions[r]; !ok {
				return bad("pop %s: rtt for unknown region %q", p.ID, r)
			}
			if ms < 0 {
				return bad("pop %s: negative rtt for %q", p.ID, r)
			}
		}
	}
	sort.Slice(t.POPs, func(i, j int) bool { return t.POPs[i].ID < t.POPs[j].ID })
	return nil
}

// pop returns the POP with id, or nil.
func (t *Topology) pop(id string) *POP {
	for i := range t.POPs {
		if t.POPs[i].ID == id {
			return &t.POPs[i]
		}
	}
	return nil
}
