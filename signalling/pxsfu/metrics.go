package pxsfu

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Refusal reasons (label "reason" of egbe_pxsfu_refusals_total): a typed
// refusal each, logged with its error.
const (
	refuseBadOffer      = "bad_offer"      // ErrBadOffer
	refuseSecondOffer   = "second_offer"   // ErrSecondOffer
	refuseUnknownPlayer = "unknown_player" // ErrUnknownPlayer
	refuseAnswerTimeout = "answer_timeout" // ErrAnswerTimeout
	refuseBadAnswer     = "bad_answer"     // ErrBadAnswer
	refuseFull          = "full"           // ErrFull
	refuseBadMux        = "bad_mux_frame"  // ErrMuxShort, ErrMuxType
	refuseNegotiation   = "negotiation"    // a player's peer connection could not be made
	refuseBadMessage    = "bad_message"    // signalling JSON that does not parse
)

// Key-frame request reasons (label "reason" of
// egbe_pxsfu_keyframe_requests_total).
const (
	keyJoin   = "join"   // a player starts on a layer
	keySwitch = "switch" // a player's target layer changed
	keyPLI    = "player" // a player's PLI or FIR
)

// metrics are the egbe_pxsfu_* collectors of one SFU (const label sfu).
type metrics struct {
	players         prometheus.Gauge
	upstream        prometheus.Gauge
	received        prometheus.Counter
	forwarded       prometheus.Counter
	dropped         [fwdResultLen]prometheus.Counter
	malformed       prometheus.Counter
	switches        prometheus.Counter
	keyAsked        *prometheus.CounterVec
	keySent         prometheus.Counter
	refusals        *prometheus.CounterVec
	dataMessages    *prometheus.CounterVec
	forwardDelay    prometheus.Histogram
	playersJoined   prometheus.Counter
	upstreamBitrate *prometheus.GaugeVec
}

func newMetrics(r prometheus.Registerer, sfuID string) (*metrics, error) {
	cl := prometheus.Labels{"sfu": sfuID}
	dropped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egbe_pxsfu_packets_dropped_total", ConstLabels: cl,
		Help: "RTP packets not forwarded to a player, by reason.",
	}, []string{"reason"})
	m := &metrics{
		players: prometheus.NewGauge(prometheus.GaugeOpts{Name: "egbe_pxsfu_players", ConstLabels: cl,
			Help: "Players with a peer connection to the SFU."}),
		upstream: prometheus.NewGauge(prometheus.GaugeOpts{Name: "egbe_pxsfu_upstream_connected", ConstLabels: cl,
			Help: "1 while the SFU's streamer peer connection is up."}),
		received: prometheus.NewCounter(prometheus.CounterOpts{Name: "egbe_pxsfu_packets_received_total", ConstLabels: cl,
			Help: "RTP packets received from the streamer."}),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{Name: "egbe_pxsfu_packets_forwarded_total", ConstLabels: cl,
			Help: "RTP packets written to players."}),
		malformed: prometheus.NewCounter(prometheus.CounterOpts{Name: "egbe_pxsfu_packets_malformed_total", ConstLabels: cl,
			Help: "RTP packets from the streamer that do not parse."}),
		switches: prometheus.NewCounter(prometheus.CounterOpts{Name: "egbe_pxsfu_layer_switches_total", ConstLabels: cl,
			Help: "Layer switches (and first layers) of players, each on a key frame."}),
		keyAsked: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_pxsfu_keyframe_requests_total", ConstLabels: cl,
			Help: "Key frames wanted, by reason (before rate limiting)."}, []string{"reason"}),
		keySent: prometheus.NewCounter(prometheus.CounterOpts{Name: "egbe_pxsfu_keyframe_requests_sent_total", ConstLabels: cl,
			Help: "Key-frame requests (PLI) sent to the streamer."}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_pxsfu_refusals_total", ConstLabels: cl,
			Help: "Messages and peers refused, by reason."}, []string{"reason"}),
		dataMessages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "egbe_pxsfu_datachannel_messages_total", ConstLabels: cl,
			Help: "Data-channel messages relayed, by direction (to_streamer, to_player)."}, []string{"direction"}),
		forwardDelay: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "egbe_pxsfu_forward_delay_seconds", ConstLabels: cl,
			Help:    "Added delay: from reading a packet from the streamer to the return of its last player's write (1 packet in 4 sampled).",
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3}}),
		playersJoined: prometheus.NewCounter(prometheus.CounterOpts{Name: "egbe_pxsfu_players_joined_total", ConstLabels: cl,
			Help: "Players offered a peer connection."}),
		upstreamBitrate: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "egbe_pxsfu_layer_bitrate_bps", ConstLabels: cl,
			Help: "Measured bitrate of each upstream video layer (0 = lowest resolution)."}, []string{"layer"}),
	}
	names := [fwdResultLen]string{fwdUnbound: "unbound", fwdCodec: "codec", fwdStale: "stale", fwdWriteErr: "write_error"}
	for i, n := range names {
		if n != "" {
			m.dropped[i] = dropped.WithLabelValues(n)
		}
	}
	for _, c := range []prometheus.Collector{m.players, m.upstream, m.received, m.forwarded, dropped, m.malformed, m.switches,
		m.keyAsked, m.keySent, m.refusals, m.dataMessages, m.forwardDelay, m.playersJoined, m.upstreamBitrate} {
		if err := r.Register(c); err != nil {
			return nil, fmt.Errorf("pxsfu: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) refuse(reason string) { m.refusals.WithLabelValues(reason).Inc() }
