package edge

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/oshun/egbe-edge/web"
)

// opsSample is one series of a metric family in /ops/metrics.json.
type opsSample struct {
	Labels map[string]string `json:"labels"`
	Value  float64           `json:"value"`
}

// opsSnapshot is the body of /ops/metrics.json.
type opsSnapshot struct {
	TS       int64                  `json:"ts"` // Unix ms
	Families map[string][]opsSample `json:"families"`
	Fleet    *fleetSummary          `json:"fleet,omitempty"`
}

// fleetSummary is filled when the edge is a member of a Redis fleet.
type fleetSummary struct {
	Edges int `json:"edges"`
}

// gatherOps turns a registry into the dashboard's JSON: counters and
// gauges as values, histograms and summaries as their sample counts.
func gatherOps(g prometheus.Gatherer) (map[string][]opsSample, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]opsSample, len(mfs))
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
			out[mf.GetName()] = append(out[mf.GetName()], opsSample{Labels: labels, Value: v})
		}
	}
	return out, nil
}

// mountOps mounts the operator page on the admin mux.
func (e *Edge) mountOps(m *http.ServeMux) {
	m.Handle("/ops/", http.StripPrefix("/ops/", http.FileServerFS(web.Ops())))
	m.HandleFunc("/ops", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ops/", http.StatusFound) })
	m.HandleFunc("/ops/metrics.json", func(w http.ResponseWriter, r *http.Request) {
		fams, err := gatherOps(e.reg)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal", "%v", err)
			return
		}
		writeJSON(w, http.StatusOK, opsSnapshot{TS: time.Now().UnixMilli(), Families: fams, Fleet: e.fleetSummary()})
	})
}
