package admission

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the egbe_admission_* collectors. A nil *Metrics is valid and
// records nothing.
type Metrics struct {
	decisions *prometheus.CounterVec // surface, tier
	reasons   *prometheus.CounterVec // surface, reason
	waitlist  *prometheus.CounterVec // reason
	refusals  *prometheus.CounterVec // gate, reason
	admits    *prometheus.CounterVec // region, lane
	bypass    *prometheus.CounterVec // lane
	operator  *prometheus.CounterVec // op
	depth     *prometheus.GaugeVec   // region
	drain     *prometheus.GaugeVec   // region
	wait      *prometheus.GaugeVec   // region
	verdicts  *prometheus.CounterVec // verdict
	intoBP    *prometheus.CounterVec // region, where
	ceiling   prometheus.Gauge
	surge     *prometheus.CounterVec // action, trigger, step
	pages     *prometheus.CounterVec // region
}

// NewMetrics registers the admission collectors into reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_launch_decisions_total",
			Help: "Launch decisions, one per decision, by selected surface and telemetry tier."}, []string{"surface", "tier"}),
		reasons: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_launch_reasons_total",
			Help: "Reason codes carried by launch decisions, one per code per decision, by selected surface."}, []string{"surface", "reason"}),
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
		wait: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "egbe_admission_median_wait_seconds",
			Help: "Median wait of the users in line by region: half the depth over the measured drain rate (last observed; -1 when nothing drains)."}, []string{"region"}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_abuse_verdicts_total",
			Help: "Abuse classifier verdicts acted on (safety-review, ban), each audited."}, []string{"verdict"}),
		intoBP: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_admit_into_backpressure_total",
			Help: "Admit-into-backpressure events (a correctness bug, alert on sight): a pixel-stream admission handed out, or a room-admitted match bounced, while the region is at >= 85 %."}, []string{"region", "where"}),
		ceiling: prometheus.NewGauge(prometheus.GaugeOpts{Name: "egbe_admission_admit_ceiling_per_minute",
			Help: "The global admission rate the room applies now: the bucket, clamped to downstream health, halved by the abort ladder."}),
		surge: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_surge_actions_total",
			Help: "Abort-ladder and entry-criteria actions of the surge controller (each audited), by action, trigger and step (apply, unwind)."}, []string{"action", "trigger", "step"}),
		pages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_admission_pages_total",
			Help: "Surge-commander pages: a region's POP utilisation reached the freeze rung (>= 90 %)."}, []string{"region"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.reasons, m.waitlist, m.refusals, m.admits, m.bypass, m.operator, m.depth, m.drain,
		m.wait, m.verdicts, m.intoBP, m.ceiling, m.surge, m.pages} {
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
	m.decisions.WithLabelValues(string(d.SelectedSurface), d.TelemetryTier).Inc()
	for _, r := range d.ReasonCodes {
		m.reasons.WithLabelValues(string(d.SelectedSurface), string(r)).Inc()
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

func (m *Metrics) queue(region string, depth, drainPerMin int64, medianWaitSec float64) {
	if m != nil {
		m.depth.WithLabelValues(region).Set(float64(depth))
		m.drain.WithLabelValues(region).Set(float64(drainPerMin))
		m.wait.WithLabelValues(region).Set(medianWaitSec)
	}
}

func (m *Metrics) abuse(verdict string) {
	if m != nil {
		m.verdicts.WithLabelValues(verdict).Inc()
	}
}

// AdmitIntoBackpressure counts one admit-into-backpressure event: where is
// "room" (a pixel-stream admission handed out at >= 85 %) or "match" (a
// match that came through the room bounced by backpressure).
func (m *Metrics) AdmitIntoBackpressure(region, where string) {
	if m != nil {
		m.intoBP.WithLabelValues(region, where).Inc()
	}
}

func (m *Metrics) admitCeiling(perMin float64) {
	if m != nil {
		m.ceiling.Set(perMin)
	}
}

func (m *Metrics) surgeAction(action, trigger, step string) {
	if m != nil {
		m.surge.WithLabelValues(action, trigger, step).Inc()
	}
}

func (m *Metrics) paged(region string) {
	if m != nil {
		m.pages.WithLabelValues(region).Inc()
	}
}
