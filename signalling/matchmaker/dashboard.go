package matchmaker

import (
	"context"
	"time"
)

// Dashboard is the operator payload of GET /api/v3/pxstream/pop-capacity/dashboard.
type Dashboard struct {
	GeneratedAt         time.Time      `json:"generated_at"`
	GrafanaTarget       string         `json:"grafana_target"`
	ForecastHorizonDays int            `json:"forecast_horizon_days"`
	Totals              DashboardTotal `json:"totals"`
	POPs                []DashboardPOP `json:"pops"`
	// Concerts are the seats of SFU-fronted concerts (Deps.Seats; absent
	// without it). ConcertsError says the seat store could not be read.
	Concerts      []DashboardConcert `json:"concerts,omitempty"`
	ConcertsError string             `json:"concerts_error,omitempty"`
}

// SeatBoard reports concert seats for the dashboard (the edge reads them
// from the fleet's seat store).
type SeatBoard interface {
	Concerts(ctx context.Context) ([]DashboardConcert, error)
}

// DashboardConcert is one concert's seats.
type DashboardConcert struct {
	EventID string `json:"event_id"`
	POP     string `json:"pop_id"`
	Codec   string `json:"codec"`
	// Running: inside the event's window (pre-warm included), when
	// matches for it take seats.
	Running  bool                  `json:"running"`
	Used     int                   `json:"seats_used"`
	Capacity int                   `json:"seats_capacity"`
	SFUs     []DashboardConcertSFU `json:"sfus"`
}

// DashboardConcertSFU is one SFU's seats.
type DashboardConcertSFU struct {
	ID       string `json:"sfu_id"`
	Used     int    `json:"seats_used"`
	Capacity int    `json:"seats_capacity"`
}

// DashboardTotal sums the POP rows.
type DashboardTotal struct {
	MaxSessions int `json:"max_sessions"`
	Sessions    int `json:"sessions"`
	Registered  int `json:"streamers_registered"`
	Idle        int `json:"streamers_idle"`
}

// DashboardPOP is one POP row. Sessions are leased + streaming streamers;
// GPU nodes in use are registered streamers / sessions_per_gpu_node,
// rounded up.
type DashboardPOP struct {
	ID            string         `json:"pop_id"`
	Residency     string         `json:"residency"`
	Health        string         `json:"health"`
	MaxSessions   int            `json:"max_sessions"`
	Sessions      int            `json:"sessions"`
	UtilisationBP int            `json:"utilisation_bp"`
	GPUQuota      int            `json:"gpu_quota"`
	GPUNodesInUse int            `json:"gpu_nodes_in_use"`
	QuotaHeadroom int            `json:"quota_headroom"`
	Registered    int            `json:"streamers_registered"`
	Streamers     map[string]int `json:"streamers_by_state"`
	Codecs        []string       `json:"codecs"`
	// Ready: accepting, positive quota headroom, and at least one streamer.
	Ready bool `json:"ready"`
}

// Dashboard builds the per-POP capacity view from the live registry.
func (m *Matchmaker) Dashboard() Dashboard {
	ls := m.loads()
	d := Dashboard{
		GeneratedAt:         m.now().UTC(),
		GrafanaTarget:       "grafana://v3/pxstream/pop-capacity",
		ForecastHorizonDays: 90,
		POPs:                make([]DashboardPOP, len(m.topo.POPs)),
	}
	for i := range m.topo.POPs {
		p, l := &m.topo.POPs[i], &ls[i]
		nodes := (l.registered + m.topo.SessionsPerGPUNode - 1) / m.topo.SessionsPerGPUNode
		row := DashboardPOP{
			ID: p.ID, Residency: p.Residency, Health: p.Health,
			MaxSessions: p.MaxSessions, Sessions: l.sessions, UtilisationBP: l.utilBP(p.MaxSessions),
			GPUQuota: p.GPUQuota, GPUNodesInUse: nodes, QuotaHeadroom: p.GPUQuota - nodes,
			Registered: l.registered, Codecs: p.Codecs,
			Streamers: map[string]int{
				string(StateIdle): l.idle, string(StateLeased): l.leased,
				string(StateStreaming): l.streaming, "other": l.other,
			},
		}
		row.Ready = p.Health == HealthAccepting && row.QuotaHeadroom > 0 && l.registered > 0
		d.POPs[i] = row
		d.Totals.MaxSessions += p.MaxSessions
		d.Totals.Sessions += l.sessions
		d.Totals.Registered += l.registered
		d.Totals.Idle += l.idle
	}
	return d
}
