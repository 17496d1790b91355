package shard

import (
	"slices"
	"strings"
)

// LiveSessions lists this gateway's live sessions by id, at most limit of
// them (limit <= 0: all), and says how many there are in all: the operator
// page's table, from which an operator revokes one.
func (g *Gateway) LiveSessions(limit int) ([]SessionInfo, int) {
	g.mu.Lock()
	live := make([]*session, 0, len(g.sessions))
	for _, s := range g.sessions {
		live = append(live, s)
	}
	total := len(g.sessions)
	g.mu.Unlock()
	slices.SortFunc(live, func(a, b *session) int { return strings.Compare(a.id, b.id) })
	if limit > 0 && len(live) > limit {
		live = live[:limit]
	}
	out := make([]SessionInfo, len(live))
	for i, s := range live {
		out[i] = s.info()
	}
	return out, total
}
