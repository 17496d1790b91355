package signalling

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Drop reasons (label "reason" of egbe_pxstream_messages_dropped_total).
const (
	dropBadJSON        = "bad_json"
	dropNotObject      = "not_object"
	dropNoType         = "no_type"
	dropTooManyFields  = "too_many_fields"
	dropUnknownType    = "unknown_type"
	dropBinary         = "binary_frame"
	dropTooLarge       = "too_large"
	dropUnidentified   = "unidentified_streamer"
	dropUnknownPlayer  = "unknown_player"
	dropNoStreamer     = "no_streamer"
	dropSubscribeFail  = "subscribe_failed"
	dropSlowConsumer   = "slow_consumer"
	dropBadID          = "bad_id"
	dropAuth           = "auth"
	dropOfferRejected  = "offer_rejected"
	dropStreamerClosed = "streamer_closed"
	// dropUnknownStreamer: an SFU subscribed to an id nobody holds.
	dropUnknownStreamer = "unknown_streamer"
)

// metrics are the egbe_pxstream_* collectors of one Server.
type metrics struct {
	streamers prometheus.Gauge
	players   prometheus.Gauge
	sfus      prometheus.Gauge
	relayed   *prometheus.CounterVec
	dropped   *prometheus.CounterVec
	// writes and frames: socket writes, and the frames they carried (a
	// burst of frames leaves in one write: conn.go).
	writes prometheus.Counter
	frames prometheus.Counter
}

func newMetrics(r prometheus.Registerer, reg *Registry) (*metrics, error) {
	m := &metrics{
		streamers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egbe_pxstream_streamers_connected",
			Help: "Streamer WebSocket connections open (identified or not).",
		}),
		players: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egbe_pxstream_players_connected",
			Help: "Player WebSocket connections open.",
		}),
		sfus: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egbe_pxstream_sfus_connected",
			Help: "SFU WebSocket connections open on the SFU port.",
		}),
		relayed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egbe_pxstream_messages_relayed_total",
			Help: "Signalling messages relayed between players and streamers, by type.",
		}, []string{"type"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egbe_pxstream_messages_dropped_total",
			Help: "Signalling messages ignored or dropped, and sockets dropped, by reason.",
		}, []string{"reason"}),
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egbe_pxstream_socket_writes_total",
			Help: "Writes to signalling sockets (each carries every frame queued for that socket since the last).",
		}),
		frames: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egbe_pxstream_frames_written_total",
			Help: "WebSocket frames handed to signalling socket writes (text, close and pong frames).",
		}),
	}
	cs := []prometheus.Collector{m.streamers, m.players, m.sfus, m.relayed, m.dropped, m.writes, m.frames, &registryCollector{reg}}
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			return nil, fmt.Errorf("signalling: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) drop(reason string) { m.dropped.WithLabelValues(reason).Inc() }

func (m *metrics) relay(typ string) { m.relayed.WithLabelValues(typ).Inc() }

var streamersDesc = prometheus.NewDesc("egbe_pxstream_streamers",
	"Registered (identified) streamers by POP and state.", []string{"pop", "state"}, nil)

// registryCollector reports egbe_pxstream_streamers from a registry snapshot.
type registryCollector struct{ reg *Registry }

func (c *registryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- streamersDesc }

func (c *registryCollector) Collect(ch chan<- prometheus.Metric) {
	for pop, n := range c.reg.Counts() {
		for _, s := range []struct {
			st StreamerState
			n  int
		}{{StateIdle, n.Idle}, {StateLeased, n.Leased}, {StateStreaming, n.Streaming}} {
			ch <- prometheus.MustNewConstMetric(streamersDesc, prometheus.GaugeValue, float64(s.n), pop, string(s.st))
		}
	}
}
