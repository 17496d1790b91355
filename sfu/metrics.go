package sfu

import "github.com/prometheus/client_golang/prometheus"

// Drop reasons (label "reason" of egbe_sfu_packets_dropped_total).
const (
	dropStale       = "stale"        // speaker lost the slot during the fan-out
	dropReordered   = "reordered"    // older than what the slot already sent
	dropUnbound     = "unbound"      // slot track not bound yet (DTLS not up)
	dropWriteError  = "write_error"  // pion write failed
	dropMalformed   = "malformed"    // not RTP v2 / wrong payload type
	dropNoListener  = "no_listener"  // nobody has the speaker in a slot
	dropUnknownSSRC = "unknown_ssrc" // a second inbound track or non-audio
	dropVoiceOff    = "voice_off"    // speaker's token has voice off
)

var dropReasons = []string{dropStale, dropReordered, dropUnbound,
	dropWriteError, dropMalformed, dropNoListener, dropUnknownSSRC, dropVoiceOff}

type metrics struct {
	received   prometheus.Counter
	forwarded  prometheus.Counter
	dropped    map[string]prometheus.Counter // fixed keys: dropReasons
	switches   prometheus.Counter
	recomputes prometheus.Counter
	peers      prometheus.Gauge
	flagged    *prometheus.GaugeVec // reason: latency, loss
	joinErrors *prometheus.CounterVec
	events     *prometheus.CounterVec // result: sent, refused
	rtt        prometheus.Histogram
	loss       prometheus.Histogram
	jitter     prometheus.Histogram

	roomRedirects       prometheus.Counter
	roomsLost           prometheus.Counter
	roomHeartbeatErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egbe_sfu_packets_dropped_total", Help: "RTP packets not forwarded, by reason.",
	}, []string{"reason"})
	m := &metrics{
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egbe_sfu_packets_received_total", Help: "RTP packets received from speakers."}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egbe_sfu_packets_forwarded_total", Help: "RTP packets sent to listeners' slots."}),
		dropped: make(map[string]prometheus.Counter, len(dropReasons)),
		switches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egbe_sfu_slot_switches_total", Help: "Slots that changed speaker."}),
		recomputes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egbe_sfu_recomputes_total", Help: "Room slot recomputations."}),
		peers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egbe_sfu_peers", Help: "Joined voice peers."}),
		flagged: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egbe_sfu_peers_flagged", Help: "Voice peers over the latency (80 ms) or loss (0.5 %) budget."},
			[]string{"reason"}),
		joinErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egbe_sfu_join_errors_total", Help: "Refused voice HTTP requests, by code."}, []string{"code"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egbe_sfu_voice_events_total", Help: "Active-speaker events, by result."}, []string{"result"}),
		rtt: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "egbe_sfu_peer_rtt_seconds", Help: "Per-peer RTCP round-trip time samples.",
			Buckets: []float64{.005, .01, .02, .04, .06, .08, .1, .15, .25, .5, 1}}),
		loss: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "egbe_sfu_peer_loss_ratio", Help: "Per-peer RTP loss fraction samples.",
			Buckets: []float64{.001, .0025, .005, .01, .02, .05, .1, .25}}),
		jitter: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "egbe_sfu_peer_jitter_seconds", Help: "Per-peer inbound RTP jitter samples.",
			Buckets: []float64{.001, .0025, .005, .01, .02, .04, .08, .16}}),
		roomRedirects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egbe_sfu_room_redirects_total", Help: "Voice joins sent to the edge holding their room."}),
		roomsLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egbe_sfu_rooms_lost_total", Help: "Voice rooms another edge took from this one (missed heartbeats)."}),
		roomHeartbeatErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egbe_sfu_room_heartbeat_errors_total", Help: "Failed renewals of this edge's voice rooms (room table unreachable)."}),
	}
	for _, r := range dropReasons {
		m.dropped[r] = dropped.WithLabelValues(r)
	}
	for _, r := range []string{"latency", "loss"} {
		m.flagged.WithLabelValues(r).Set(0)
	}
	for _, c := range []prometheus.Collector{m.received, m.forwarded, dropped, m.switches,
		m.recomputes, m.peers, m.flagged, m.joinErrors, m.events, m.rtt, m.loss, m.jitter,
		m.roomRedirects, m.roomsLost, m.roomHeartbeatErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
