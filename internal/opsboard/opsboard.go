// Package opsboard owns the operator dashboard's figures: an edge's
// Prometheus families as the JSON of /ops/metrics.json, published on a
// shared fleet board so that any edge can show the whole fleet's, summed
// series by series.
package opsboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/oshun/egbe-edge/internal/httpjson"
)

// Sample is one series of a metric family.
type Sample struct {
	Labels map[string]string `json:"labels"`
	Value  float64           `json:"value"`
}

// Families are metric families by name.
type Families map[string][]Sample

// Snapshot is the body of /ops/metrics.json.
type Snapshot struct {
	TS       int64         `json:"ts"` // Unix ms
	Families Families      `json:"families"`
	Fleet    *FleetSummary `json:"fleet,omitempty"`
}

// FleetSummary is filled when the figures are the fleet's.
type FleetSummary struct {
	Edges int `json:"edges"`
}

// Board is where edges publish their figures and read everyone's (the
// subset of state.FleetBoard the dashboard needs).
type Board interface {
	Publish(ctx context.Context, edgeID string, snapshot []byte, ttl time.Duration) error
	// Snapshots returns the live snapshots by edge id.
	Snapshots(ctx context.Context) (map[string][]byte, error)
}

// PublishEvery is how often an edge publishes its figures; a snapshot
// lapses after SnapshotTTL without a refresh, so a dead edge leaves the
// fleet view.
const (
	PublishEvery = 2 * time.Second
	SnapshotTTL  = 3 * PublishEvery
)

// Dashboard serves one edge's figures, and the fleet's when it has a board.
type Dashboard struct {
	id    string              // immutable: this edge's id on the board
	reg   prometheus.Gatherer // immutable
	board Board               // immutable; nil: a lone edge
	now   func() time.Time    // immutable
}

// New returns the dashboard of edge id over reg; board may be nil (no
// fleet), now may be nil (time.Now).
func New(id string, reg prometheus.Gatherer, board Board, now func() time.Time) *Dashboard {
	if now == nil {
		now = time.Now
	}
	return &Dashboard{id: id, reg: reg, board: board, now: now}
}

// Run publishes this edge's figures on the board every PublishEvery until
// ctx is done. Without a board it only waits for ctx.
func (d *Dashboard) Run(ctx context.Context) error {
	if d.board == nil {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(PublishEvery)
	defer t.Stop()
	for {
		d.publish(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// publish puts this edge's egbe_* figures on the board. A failure only
// stales the fleet view (the next beat retries), so it is not reported.
func (d *Dashboard) publish(ctx context.Context) {
	fams, err := Gather(d.reg)
	if err != nil {
		return
	}
	b, err := json.Marshal(Published(fams))
	if err != nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = d.board.Publish(pctx, d.id, b, SnapshotTTL)
}

// Fleet sums every live edge's published figures; edges is how many
// published.
func (d *Dashboard) Fleet(ctx context.Context) (fams Families, edges int, err error) {
	if d.board == nil {
		return nil, 0, ErrNoBoard
	}
	snaps, err := d.board.Snapshots(ctx)
	if err != nil {
		return nil, 0, err
	}
	return Sum(snaps), len(snaps), nil
}

// Total is the sum of family's series: over the fleet with a board, over
// this edge without one.
func (d *Dashboard) Total(ctx context.Context, family string) (float64, error) {
	var fams Families
	var err error
	if d.board != nil {
		fams, _, err = d.Fleet(ctx)
	} else {
		fams, err = Gather(d.reg)
	}
	if err != nil {
		return 0, err
	}
	var n float64
	for _, s := range fams[family] {
		n += s.Value
	}
	return n, nil
}

// ServeHTTP serves /ops/metrics.json: this edge's figures, or, with a
// board and unless ?scope=edge (the page's default when the edge has
// Redis), the whole fleet's.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.board != nil && r.URL.Query().Get("scope") != "edge" {
		fams, edges, err := d.Fleet(r.Context())
		if err != nil {
			httpjson.WriteError(w, http.StatusServiceUnavailable, "state_unavailable", fmt.Sprintf("fleet figures: %v", err))
			return
		}
		httpjson.Write(w, http.StatusOK, Snapshot{TS: d.now().UnixMilli(), Families: fams, Fleet: &FleetSummary{Edges: edges}})
		return
	}
	fams, err := Gather(d.reg)
	if err != nil {
		httpjson.WriteError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	httpjson.Write(w, http.StatusOK, Snapshot{TS: d.now().UnixMilli(), Families: fams})
}

// Published is what an edge puts on the board: only egbe_* families (the
// Go runtime's figures are per process and meaningless summed).
func Published(all Families) Families {
	out := make(Families, len(all))
	for name, samples := range all {
		if strings.HasPrefix(name, "egbe_") {
			out[name] = samples
		}
	}
	return out
}

// Sum adds the published snapshots series by series (a series is a family
// and its label set); a snapshot that does not decode is skipped. Series
// keep the order in which they were first seen.
func Sum(snaps map[string][]byte) Families {
	type key struct{ fam, labels string }
	sums := map[key]*Sample{}
	order := map[string][]key{}
	for _, b := range snaps {
		var fams Families
		if json.Unmarshal(b, &fams) != nil {
			continue
		}
		for fam, samples := range fams {
			for _, smp := range samples {
				lb, _ := json.Marshal(smp.Labels) // sorted keys: one string per label set
				k := key{fam, string(lb)}
				if acc, ok := sums[k]; ok {
					acc.Value += smp.Value
					continue
				}
				c := smp
				sums[k] = &c
				order[fam] = append(order[fam], k)
			}
		}
	}
	out := make(Families, len(order))
	for fam, keys := range order {
		for _, k := range keys {
			out[fam] = append(out[fam], *sums[k])
		}
	}
	return out
}

// Gather turns a registry into families: counters and gauges as values,
// histograms and summaries as their sample counts.
func Gather(g prometheus.Gatherer) (Families, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := make(Families, len(mfs))
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			var v float64
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				v = float64(m.GetHistogram().GetSampleCount())
			case dto.MetricType_SUMMARY:
				v = float64(m.GetSummary().GetSampleCount())
			default:
				v = m.GetUntyped().GetValue()
			}
			out[mf.GetName()] = append(out[mf.GetName()], Sample{Labels: labels, Value: v})
		}
	}
	return out, nil
}
