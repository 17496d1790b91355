package shard

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gateway's Prometheus collectors (egbe_ prefix).
type metrics struct {
	sessions     *prometheus.GaugeVec   // transport, shard
	handshakes   *prometheus.CounterVec // outcome, reason
	linkUp       *prometheus.GaugeVec   // shard
	linkRTT      *prometheus.GaugeVec   // shard
	linkConnects *prometheus.CounterVec // shard, outcome
	projected    prometheus.Counter
	replBytes    *prometheus.CounterVec // kind: delta|full
	fullEquiv    prometheus.Counter     // bytes a full snapshot would have cost for each delta sent
	drops        *prometheus.CounterVec // reason
	resumes      *prometheus.CounterVec // outcome
	presenceCoal prometheus.Counter
	messages     *prometheus.CounterVec // direction, kind

	// handshakeDur: from the connection reaching the gateway to its
	// ServerHello (or refusal), by outcome (accepted, rejected).
	handshakeDur *prometheus.HistogramVec

	// Resolved children for the per-snapshot path (no label lookups there).
	bytesDelta, bytesFull                    prometheus.Counter
	dropStaleC, dropBudgetC, dropUnreliableC prometheus.Counter
	dropInFlightC                            prometheus.Counter
	upPresence, downAck                      prometheus.Counter
	oversizeReliable                         prometheus.Counter // snapshots too big for a datagram, sent reliably
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		sessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "egbe_shard_sessions",
			Help: "Realtime sessions proxied, by transport and shard."}, []string{"transport", "shard"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_shard_handshakes_total",
			Help: "Realtime handshakes by outcome (accepted, degraded, rejected) and reason code."}, []string{"outcome", "reason"}),
		linkUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "egbe_shard_link_up",
			Help: "1 while the link to the shard is connected."}, []string{"shard"}),
		linkRTT: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "egbe_shard_link_rtt_seconds",
			Help: "Last heartbeat round trip on the shard link."}, []string{"shard"}),
		linkConnects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_shard_link_connects_total",
			Help: "Shard link dial attempts by outcome."}, []string{"shard", "outcome"}),
		projected: prometheus.NewCounter(prometheus.CounterOpts{Name: "egbe_shard_snapshots_projected_total",
			Help: "Per-client projections of an instance snapshot."}),
		replBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_shard_replication_bytes_total",
			Help: "Replication bytes sent to clients, as deltas or full snapshots."}, []string{"kind"}),
		fullEquiv: prometheus.NewCounter(prometheus.CounterOpts{Name: "egbe_shard_replication_full_equivalent_bytes_total",
			Help: "Bytes the full snapshots would have cost where deltas were sent."}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_shard_drops_total",
			Help: "Messages dropped, by reason."}, []string{"reason"}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_shard_resumes_total",
			Help: "Resume attempts by outcome."}, []string{"outcome"}),
		presenceCoal: prometheus.NewCounter(prometheus.CounterOpts{Name: "egbe_shard_presence_coalesced_total",
			Help: "Presence packets superseded before being sent to the shard (over the 20 Hz cap)."}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_shard_messages_total",
			Help: "Session messages proxied, by direction and kind."}, []string{"direction", "kind"}),
		handshakeDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "egbe_shard_handshake_seconds",
			Help:    "Realtime handshake latency: the connection reaching the gateway to its ServerHello or refusal, by outcome.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}}, []string{"outcome"}),
	}
	m.bytesDelta, m.bytesFull = m.replBytes.WithLabelValues("delta"), m.replBytes.WithLabelValues("full")
	m.upPresence = m.messages.WithLabelValues("up", "presence")
	m.downAck = m.messages.WithLabelValues("down", "action_ack")
	m.oversizeReliable = m.messages.WithLabelValues("down", "snapshot_oversize_reliable")
	m.dropStaleC, m.dropBudgetC, m.dropUnreliableC = m.drops.WithLabelValues(dropStale), m.drops.WithLabelValues(dropBudget), m.drops.WithLabelValues(dropUnreliable)
	m.dropInFlightC = m.drops.WithLabelValues(dropInFlight)
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.sessions, m.handshakes, m.linkUp, m.linkRTT, m.linkConnects,
		m.projected, m.replBytes, m.fullEquiv, m.drops, m.resumes, m.presenceCoal, m.messages, m.handshakeDur} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				return nil, err
			}
		}
	}
	return m, nil
}

// Drop reasons.
const (
	dropStale          = "snapshot_stale"   // a newer snapshot replaced an unsent one
	dropBudget         = "budget"           // over the replication budget
	dropUnreliable     = "unreliable_full"  // the unreliable lane refused it
	dropEventQueue     = "event_queue_full" // a slow client's control queue was full
	dropVoiceQueue     = "voice_queue_full"
	dropBadMessage     = "bad_message"
	dropUnexpected     = "unexpected_message"
	dropPresenceOld    = "presence_reordered"
	dropSquadQueue     = "squad_queue_full" // a slow client's control queue was full
	dropInFlight       = "acks_behind"      // a state not sent: the client is maxInFlight states behind on acks
	dropLaneFull       = "lane_full"        // presence not sent: the shard reads too slowly
	dropUnknownSession = "unknown_session"  // a lane frame for a session that has ended
)
