package shard

import (
	"fmt"
	"time"

	"github.com/oshun/egbe-edge/codec"
)

// Reference numbers (reference/001: SESSION_PIN_TTL_SECONDS,
// GATEWAY_RECONNECT_RETENTION_SECONDS, presence-transform-20hz).
const (
	DefaultPinTTL    = 60 * time.Second
	DefaultResumeTTL = 60 * time.Second
)

// Config configures a Gateway.
type Config struct {
	// HandshakeTimeout bounds the wait for the first (hello) message.
	HandshakeTimeout time.Duration
	// PinTTL keeps a session's shard pin after its last disconnect
	// (SESSION_PIN_TTL_SECONDS).
	PinTTL time.Duration
	// ResumeTTL is how long after a disconnect a resume token is honoured
	// (GATEWAY_RECONNECT_RETENTION_SECONDS); it is also the lifetime of the
	// tokens sent in Drain and in a link-loss Error.
	ResumeTTL time.Duration
	// SessionTokenTTL is the lifetime of the resume token in ServerHello; the
	// retention after a disconnect is still bounded by PinTTL/ResumeTTL.
	SessionTokenTTL time.Duration
	// PresenceHz caps presence towards the shard per session.
	PresenceHz int
	// DrainWindow spreads Drain messages over this long.
	DrainWindow time.Duration
	// DrainReconnectMax bounds the jittered reconnect_after_ms in Drain.
	DrainReconnectMax time.Duration
	// Shards maps shard id -> link address (host:port, UDP).
	Shards map[string]string
	// Instances maps instance id -> shard id. Shards also register the
	// instances they hold when their link connects.
	Instances map[string]string
	// EdgeID names this edge to shards.
	EdgeID string
	// ReplicationBps is each client's replication budget.
	ReplicationBps int
	// HeartbeatInterval and HeartbeatTimeout govern link liveness.
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the link's jittered backoff.
	ReconnectMin, ReconnectMax time.Duration
	// LinkToken is presented to shards in LinkHello (a pre-shared key; empty
	// = none).
	LinkToken string
	// LinkInsecure skips verification of the shard's certificate (dev and
	// tests: shards run with self-signed certificates).
	LinkInsecure bool
	// ControlQueue bounds each client's queue of reliable messages (the
	// queue starts empty and grows only while messages pile up).
	ControlQueue int
	// LinkLanes is how many QUIC streams each shard link multiplexes its
	// sessions over (codec/link.proto, version 2).
	LinkLanes int
	// MaxDatagramBytes is the largest snapshot sent on an unreliable lane;
	// a larger one (a full window snapshot can pass 1.2 KB) goes on the
	// reliable lane. 1100 fits a WebTransport datagram on a 1280-byte path.
	MaxDatagramBytes int
}

// DefaultConfig returns the reference defaults.
func DefaultConfig() Config {
	return Config{
		HandshakeTimeout:  5 * time.Second,
		PinTTL:            DefaultPinTTL,
		ResumeTTL:         DefaultResumeTTL,
		SessionTokenTTL:   time.Hour,
		PresenceHz:        codec.GroundReplicationHz,
		DrainWindow:       10 * time.Second,
		DrainReconnectMax: 5 * time.Second,
		Shards:            map[string]string{},
		Instances:         map[string]string{},
		EdgeID:            "egbe-edge",
		ReplicationBps:    codec.GroundReplicationMaxBps,
		HeartbeatInterval: time.Second,
		HeartbeatTimeout:  3 * time.Second,
		ReconnectMin:      100 * time.Millisecond,
		ReconnectMax:      5 * time.Second,
		LinkInsecure:      true,
		ControlQueue:      256,
		LinkLanes:         2,
		MaxDatagramBytes:  1100,
	}
}

// Validate reports a config that cannot run.
func (c Config) Validate() error {
	pos := map[string]time.Duration{
		"handshake timeout": c.HandshakeTimeout, "pin TTL": c.PinTTL, "resume TTL": c.ResumeTTL,
		"session token TTL": c.SessionTokenTTL, "heartbeat interval": c.HeartbeatInterval,
		"heartbeat timeout": c.HeartbeatTimeout, "reconnect min": c.ReconnectMin, "reconnect max": c.ReconnectMax,
	}
	for name, d := range pos {
		if d <= 0 {
			return fmt.Errorf("%w: %s must be positive", ErrConfig, name)
		}
	}
	switch {
	case c.DrainWindow < 0 || c.DrainReconnectMax < 0:
		return fmt.Errorf("%w: drain window must not be negative", ErrConfig)
	case c.PresenceHz <= 0 || c.PresenceHz > 1000:
		return fmt.Errorf("%w: presence rate %d Hz out of range", ErrConfig, c.PresenceHz)
	case c.ReplicationBps <= 0:
		return fmt.Errorf("%w: replication budget must be positive", ErrConfig)
	case c.ReconnectMin > c.ReconnectMax:
		return fmt.Errorf("%w: reconnect min above max", ErrConfig)
	case c.HeartbeatTimeout < c.HeartbeatInterval:
		return fmt.Errorf("%w: heartbeat timeout below interval", ErrConfig)
	case c.ControlQueue < 8:
		return fmt.Errorf("%w: control queue below 8", ErrConfig)
	case c.LinkLanes < 1 || c.LinkLanes > 64:
		return fmt.Errorf("%w: link lanes %d out of range 1-64", ErrConfig, c.LinkLanes)
	case c.MaxDatagramBytes < 0 || c.MaxDatagramBytes > codec.MaxMessageSize:
		return fmt.Errorf("%w: max datagram bytes %d out of range", ErrConfig, c.MaxDatagramBytes)
	}
	for id, addr := range c.Shards {
		if id == "" || addr == "" {
			return fmt.Errorf("%w: shard %q has no address", ErrConfig, id)
		}
	}
	for inst, sh := range c.Instances {
		if _, ok := c.Shards[sh]; !ok || inst == "" {
			return fmt.Errorf("%w: instance %q maps to unknown shard %q", ErrConfig, inst, sh)
		}
	}
	return nil
}
