package transport

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the transport counters. They are registered into the
// registerer given to NewMetrics, never globally, so tests and several edges
// in one process do not collide.
type Metrics struct {
	accepted          *prometheus.CounterVec // transport
	active            *prometheus.GaugeVec   // transport
	messages          *prometheus.CounterVec // transport, lane, direction
	bytes             *prometheus.CounterVec // transport, lane, direction
	drops             *prometheus.CounterVec // transport, reason
	handshakeFailures *prometheus.CounterVec // transport, reason
}

// Drop and handshake-failure reasons (label values).
const (
	dropSendQueueFull = "send_queue_full" // outgoing latest-wins queue full: its oldest message dropped
	dropRecvQueueFull = "recv_queue_full" // inbound latest-wins queue full: its oldest message dropped
	dropNotOpen       = "lane_not_open"   // unreliable lane not (yet) open
	dropSendTooLarge  = "send_too_large"  // larger than the path's datagram size
	dropSendFailed    = "send_failed"     // the library refused it (connection closing)

	hsOrigin      = "origin"
	hsUpgrade     = "upgrade"
	hsBadOffer    = "bad_offer"
	hsTimeout     = "timeout"
	hsNoStream    = "no_stream"
	hsInternal    = "internal"
	hsShutdown    = "shutting_down"
	hsMethod      = "method"
	hsBusy        = "busy"
	hsFailed      = "failed"
	hsSubprotocol = "subprotocol"
)

// NewMetrics creates the collectors and registers them into reg. A nil reg
// leaves them unregistered (still usable).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egbe_transport_connections_accepted_total",
			Help: "Realtime connections accepted, by transport.",
		}, []string{"transport"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egbe_transport_connections_active",
			Help: "Realtime connections open now, by transport.",
		}, []string{"transport"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egbe_transport_messages_total",
			Help: "Envelopes carried, by transport, lane and direction (in = from clients).",
		}, []string{"transport", "lane", "direction"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egbe_transport_bytes_total",
			Help: "Envelope bytes carried (without transport framing), by transport, lane and direction.",
		}, []string{"transport", "lane", "direction"}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egbe_transport_drops_total",
			Help: "Unreliable messages dropped, by transport and reason.",
		}, []string{"transport", "reason"}),
		handshakeFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egbe_transport_handshake_failures_total",
			Help: "Transport-level handshakes that failed, by transport and reason.",
		}, []string{"transport", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.accepted, m.active, m.messages, m.bytes, m.drops, m.handshakeFailures)
	}
	return m
}

// kindMetrics are one transport's hot-path counters, resolved once so the
// packet path does no label lookups.
type kindMetrics struct {
	m        *Metrics
	kind     string
	accepted prometheus.Counter
	active   prometheus.Gauge
	// indexed [lane][dir], dir 0 = in, 1 = out
	msgs  [2][2]prometheus.Counter
	bytes [2][2]prometheus.Counter
}

const (
	dirIn  = 0
	dirOut = 1
)

func (m *Metrics) forKind(k Kind) *kindMetrics {
	if m == nil {
		m = NewMetrics(nil)
	}
	km := &kindMetrics{
		m:        m,
		kind:     string(k),
		accepted: m.accepted.WithLabelValues(string(k)),
		active:   m.active.WithLabelValues(string(k)),
	}
	for lane, ln := range []string{"reliable", "unreliable"} {
		for dir, dn := range []string{"in", "out"} {
			km.msgs[lane][dir] = m.messages.WithLabelValues(string(k), ln, dn)
			km.bytes[lane][dir] = m.bytes.WithLabelValues(string(k), ln, dn)
		}
	}
	return km
}

func (km *kindMetrics) msg(l Lane, dir, n int) {
	km.msgs[l][dir].Inc()
	km.bytes[l][dir].Add(float64(n))
}

func (km *kindMetrics) drop(reason string) {
	km.m.drops.WithLabelValues(km.kind, reason).Inc()
}

func (km *kindMetrics) handshakeFailure(reason string) {
	km.m.handshakeFailures.WithLabelValues(km.kind, reason).Inc()
}

func (km *kindMetrics) open() {
	km.accepted.Inc()
	km.active.Inc()
}

func (km *kindMetrics) closed() { km.active.Dec() }
