package admission

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the egbe_admission_* collectors. A nil *Metrics is valid and
// records nothing.
type Metrics struct {
	decisions *prometheus.CounterVec // surface, reason
	waitlist  *prometheus.CounterVec // reason
	refusals  *prometheus.CounterVec // gate, reason
	admits    *prometheus.CounterVec // region, lane
	bypass    *prometheus.CounterVec // lane
	operator  *prometheus.CounterVec // op
	depth     *prometheus.GaugeVec   // region
	drain     *prometheus.GaugeVec   // region
}

// NewMetrics registers the admission collectors into reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_launch_decisions_total",
			Help: "Launch decisions, one increment per reason code carried, by selected surface."}, []string{"surface", "reason"}),
		waitlist: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_waitlist_total",
			Help: "Launch requests answered with the regional waitlist, by reason."}, []string{"reason"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_refusals_total",
			Help: "Admission refusals by gate (pxstream, realtime, room) and reason."}, []string{"gate", "reason"}),
		admits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_admits_total",
			Help: "Waiting-room admissions handed out, by region and lane."}, []string{"region", "lane"}),
		bypass: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_bypass_total",
			Help: "Requests that skipped the armed waiting room, by bypass lane."}, []string{"lane"}),
		operator: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_operator_actions_total",
			Help: "Audited operator controls of the waiting room."}, []string{"op"}),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "egbe_admission_queue_depth",
			Help: "Waiting-room queue depth by region (last observed)."}, []string{"region"}),
		drain: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "egbe_admission_drain_rate_per_minute",
			Help: "Waiting-room admits over the trailing minute by region (last observed)."}, []string{"region"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.waitlist, m.refusals, m.admits, m.bypass, m.operator, m.depth, m.drain} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) decided(d Decision) {
	if m == nil {
		return
	}
	for _, r := range d.ReasonCodes {
		m.decisions.WithLabelValues(string(d.SelectedSurface), string(r)).Inc()
	}
}

func (m *Metrics) waitlisted(reason string) {
	if m != nil {
		m.waitlist.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) refused(gate, reason string) {
	if m != nil {
		m.refusals.WithLabelValues(gate, reason).Inc()
	}
}

func (m *Metrics) admitted(region, lane string) {
	if m != nil {
		m.admits.WithLabelValues(region, lane).Inc()
	}
}

func (m *Metrics) bypassed(lane string) {
	if m != nil {
		m.bypass.WithLabelValues(lane).Inc()
	}
}

func (m *Metrics) operated(op string) {
	if m != nil {
		m.operator.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) queue(region string, depth, drainPerMin int64) {
	if m != nil {
		m.depth.WithLabelValues(region).Set(float64(depth))
		m.drain.WithLabelValues(region).Set(float64(drainPerMin))
	}
}
