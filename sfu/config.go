package sfu

import (
	"fmt"
	"time"
)

// Config tunes the SFU. Zero values are not defaults: start from Default().
type Config struct {
	// Slots is K, the audio slots each listener receives (default 4).
	Slots int `json:"slots"`
	// ProximityRangeMM: a non-squad speaker is eligible within this
	// distance (millimetres, Euclidean in 3D).
	ProximityRangeMM int64 `json:"proximity_range_mm"`
	// MoveThresholdMM: position updates smaller than this since the last
	// recompute do not trigger one.
	MoveThresholdMM int64 `json:"move_threshold_mm"`
	// LatencyBudgetMs: peers whose RTCP round-trip time exceeds it are
	// flagged (VAC_REGIONAL_VOICE_LATENCY_BUDGET_MS = 80).
	LatencyBudgetMs int `json:"latency_budget_ms"`
	// LossBudget: peers whose loss fraction exceeds it are flagged
	// (VAC_VOICE_LOSS_RATE_BUDGET = 0.005).
	LossBudget float64 `json:"loss_budget"`
	// StatsInterval is how often per-peer RTCP statistics are sampled.
	StatsInterval time.Duration `json:"stats_interval"`
	// ReportInterval is how often a peer whose streams carry media gets
	// RTCP (sender reports on its slots, a receiver report on its
	// microphone); silent streams get none. 1 s keeps RTT and loss fresh
	// for StatsInterval and the client's Opus FEC adaptation.
	ReportInterval time.Duration `json:"report_interval"`
	// SpeakingOn / SpeakingOff are the smoothed RFC 6464 loudness
	// thresholds (127 - level in -dBov, so higher is louder) at which a
	// speaker starts / stops counting as speaking (hysteresis).
	SpeakingOn  int `json:"speaking_on"`
	SpeakingOff int `json:"speaking_off"`
	// SilenceAfter: a speaker with no packets for this long (DTX, muted
	// mic) stops counting as speaking.
	SilenceAfter time.Duration `json:"silence_after"`
	// MaxPeers bounds concurrent voice peers (0 = unlimited).
	MaxPeers int `json:"max_peers"`
	// MaxSquads and MaxMutes bound each session's squads and mute list.
	MaxSquads int `json:"max_squads"`
	MaxMutes  int `json:"max_mutes"`
	// RoomHeartbeat is how often an edge in a fleet renews the voice rooms
	// it holds (a third of the room table's liveness window).
	RoomHeartbeat time.Duration `json:"room_heartbeat"`
}

// Default returns the defaults.
func Default() Config {
	return Config{
		Slots:            4,
		ProximityRangeMM: 30_000, // 30 m
		MoveThresholdMM:  500,
		LatencyBudgetMs:  80,
		LossBudget:       0.005,
		StatsInterval:    2 * time.Second,
		ReportInterval:   time.Second,
		SpeakingOn:       127 - 50, // louder than -50 dBov
		SpeakingOff:      127 - 60,
		SilenceAfter:     300 * time.Millisecond,
		MaxSquads:        16,
		MaxMutes:         1024,
		RoomHeartbeat:    time.Second,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Slots < 1 || c.Slots > 16:
		return fmt.Errorf("%w: slots %d not in 1..16", ErrConfig, c.Slots)
	case c.ProximityRangeMM < 0:
		return fmt.Errorf("%w: proximity_range_mm < 0", ErrConfig)
	case c.MoveThresholdMM < 0:
		return fmt.Errorf("%w: move_threshold_mm < 0", ErrConfig)
	case c.LatencyBudgetMs <= 0:
		return fmt.Errorf("%w: latency_budget_ms <= 0", ErrConfig)
	case c.LossBudget <= 0 || c.LossBudget >= 1:
		return fmt.Errorf("%w: loss_budget not in (0,1)", ErrConfig)
	case c.StatsInterval <= 0:
		return fmt.Errorf("%w: stats_interval <= 0", ErrConfig)
	case c.ReportInterval <= 0:
		return fmt.Errorf("%w: report_interval <= 0", ErrConfig)
	case c.SpeakingOff > c.SpeakingOn || c.SpeakingOn > 127 || c.SpeakingOff < 0:
		return fmt.Errorf("%w: need 0 <= speaking_off <= speaking_on <= 127", ErrConfig)
	case c.SilenceAfter <= 0:
		return fmt.Errorf("%w: silence_after <= 0", ErrConfig)
	case c.MaxPeers < 0 || c.MaxSquads < 1 || c.MaxMutes < 1:
		return fmt.Errorf("%w: limits", ErrConfig)
	case c.RoomHeartbeat <= 0:
		return fmt.Errorf("%w: room_heartbeat <= 0", ErrConfig)
	}
	return nil
}
