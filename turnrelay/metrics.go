package turnrelay

import "github.com/prometheus/client_golang/prometheus"

// Refusal reasons (label "reason" of egbe_turn_refusals_total).
const (
	reasonBadUsername   = "bad_username"   // username not "<expiry>:<subject>"
	reasonExpired       = "expired"        // credential past its expiry
	reasonBadCredential = "bad_credential" // MESSAGE-INTEGRITY check failed: wrong or tampered credential
	reasonUserQuota     = "user_quota"     // MaxAllocationsPerUser reached (486)
	reasonNetworkQuota  = "network_quota"  // MaxAllocationsPerNetwork reached (486)
	reasonDraining      = "draining"       // the edge is shutting down (486)
	reasonPeerForbidden = "peer_forbidden" // permission or packet to a forbidden peer
	reasonBandwidth     = "bandwidth"      // a packet over the allocation's bitrate cap, dropped
	reasonTCPRelay      = "tcp_relay"      // RFC 6062 TCP relay asked for
	reasonNoRelayPort   = "no_relay_port"  // the relay port range is exhausted
	reasonTCPConnQuota  = "tcp_conn_quota" // MaxTCPConnsPerNetwork reached: connection closed at accept
)

var refusalReasons = []string{reasonBadUsername, reasonExpired, reasonBadCredential, reasonUserQuota,
	reasonNetworkQuota, reasonDraining, reasonPeerForbidden, reasonBandwidth, reasonTCPRelay,
	reasonNoRelayPort, reasonTCPConnQuota}

// Relay directions (label "direction").
const (
	dirToPeer   = "client_to_peer"
	dirToClient = "peer_to_client"
)

type metrics struct {
	allocations *prometheus.GaugeVec   // transport: udp, tcp (client to server)
	created     *prometheus.CounterVec // transport
	expired     prometheus.Counter
	bytesOut    prometheus.Counter // client_to_peer
	bytesIn     prometheus.Counter // peer_to_client
	packetsOut  prometheus.Counter
	packetsIn   prometheus.Counter
	refusals    map[string]prometheus.Counter // fixed keys: refusalReasons
	tcpConns    prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	bytes := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egbe_turn_relayed_bytes_total", Help: "Bytes relayed through TURN allocations, by direction (peer_to_client counts datagrams received on relay ports).",
	}, []string{"direction"})
	packets := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egbe_turn_relayed_packets_total", Help: "Datagrams relayed through TURN allocations, by direction.",
	}, []string{"direction"})
	refusals := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egbe_turn_refusals_total", Help: "TURN requests, connections and packets refused, by reason.",
	}, []string{"reason"})
	m := &metrics{
		allocations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "egbe_turn_allocations", Help: "Live TURN allocations, by client transport."}, []string{"transport"}),
		created: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "egbe_turn_allocations_total", Help: "TURN allocations created, by client transport."}, []string{"transport"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "egbe_turn_allocations_expired_total", Help: "TURN allocations ended because their credential expired."}),
		bytesOut:   bytes.WithLabelValues(dirToPeer),
		bytesIn:    bytes.WithLabelValues(dirToClient),
		packetsOut: packets.WithLabelValues(dirToPeer),
		packetsIn:  packets.WithLabelValues(dirToClient),
		refusals:   make(map[string]prometheus.Counter, len(refusalReasons)),
		tcpConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "egbe_turn_tcp_connections", Help: "Open TCP connections to the TURN port."}),
	}
	for _, r := range refusalReasons {
		m.refusals[r] = refusals.WithLabelValues(r)
	}
	for _, t := range []string{"udp", "tcp"} {
		m.allocations.WithLabelValues(t)
		m.created.WithLabelValues(t)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.allocations, m.created, m.expired, bytes, packets, refusals, m.tcpConns} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) refuse(reason string) { m.refusals[reason].Inc() }
