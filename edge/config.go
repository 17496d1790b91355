package edge

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/oshun/egbe-edge/admission"
	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/turnrelay"
)

// Modes.
const (
	ModeDev  = "dev"
	ModeProd = "prod"
)

// Config is everything the edge needs to start. Each setting's flag,
// environment variable, config-file key and help are declared once, in
// settings (settings.go); Load applies them with the precedence
// Default() < the --config file < EGBE_* variables < flags.
type Config struct {
	Mode       string // dev | prod
	HTTP       string
	HTTPS      string // TCP and UDP; "" = off
	ICEUDP     string
	StreamerWS string // "" = off
	PlayerWS   string // "" = off
	SFUWS      string // "" = off
	Admin      string
	// AdminHosts are host names the admin listener answers to besides IP
	// literals and localhost: any other Host header is refused, so a DNS
	// name rebound to the admin address gets nothing.
	AdminHosts []string
	RedisURL   string // "" = in-memory
	TLSCert    string
	TLSKey     string
	// JWTSecret comes from EGBE_JWT_SECRET only (never a flag: flags show
	// up in process listings). The config file may not set it either.
	JWTSecret string
	// LinkToken is presented to every shard in LinkHello (EGBE_LINK_TOKEN
	// only, like JWTSecret); "" = links run unauthenticated.
	LinkToken string
	// LogLevel and LogFormat configure the process logger (cmd/egbe-edge).
	LogLevel  string // debug | info | warn | error
	LogFormat string // text | json

	// PublicIPs replace the ICE host candidates' addresses (1:1 NAT).
	PublicIPs []string
	// PublicURL is the base URL clients reach this very edge at, bypassing
	// any load balancer (e.g. https://edge-3.example.net:8443). A fleet
	// hands it to clients whose voice room lives here (voice_room_elsewhere).
	// Empty: http:// and the HTTP listener's bound address.
	PublicURL string
	// AllowedOrigins restricts the Origins WebSocket accepts and CORS grants
	// (negotiate, WebRTC offers, voice); empty allows any.
	AllowedOrigins []string

	// Shards maps shard name -> link address.
	Shards map[string]string
	// Instances maps instance -> shard name.
	Instances map[string]string
	// DevShard runs an in-process reference shard serving DevInstances
	// (default on in dev mode, never in prod).
	DevShard       bool
	DevInstances   []string
	DevShardAgents int

	// DrainWindow spreads Drain messages on SIGTERM.
	DrainWindow Duration

	// Pixel Streaming.
	PxstreamAuth     string // none | token
	PxstreamTopology string
	MaxPlayers       int // 0 = unlimited
	DevStreamers     int
	// PxSFU runs this many Go SFUs (signalling/pxsfu) in-process, each
	// connected to the SFU port and subscribed to PxSFUStreamer.
	PxSFU         int
	PxSFUStreamer string // "" = the first listed
	// FallbackURL is where match refusals and the waiting room send a
	// client instead (the Tier-2 experience).
	FallbackURL string
	// ICEServers are handed to Epic peers in config.peerConnectionOptions.
	ICEServers []ICEServer

	// TURN: the embedded server's UDP and TCP address ("" = off).
	TURN string
	// TURNRelayPorts are the UDP ports relays are bound from, "MIN-MAX".
	TURNRelayPorts string
	// TURNURLs are external TURN servers sharing EGBE_TURN_SECRET (e.g. a
	// coturn fleet with use-auth-secret), handed out beside or instead of
	// the embedded one.
	TURNURLs []string
	// TURNAllowPeers are prefixes relays may send to although they are
	// private (e.g. the streamers' subnet); loopback is allowed in dev.
	TURNAllowPeers []string
	// TURNSecret comes from EGBE_TURN_SECRET only, like JWTSecret.
	TURNSecret string

	// Voice.
	VoiceSlots int

	// Admission policy file ("" = the shipped defaults).
	PolicyFile string
	// PxstreamEvents is the events file: concert walk-up pools and reserved
	// sessions, booked attendees (paid windows, the pre-warm bypass lane),
	// per-user cap grants and approved institutional networks ("" = none).
	PxstreamEvents string
	// AuditLog is where admission's audit events go, one JSON object a line
	// ("" = stderr).
	AuditLog string
	// InsecurePxstreamAuthNone lets prod run Pixel Streaming without tokens
	// (anyone may register a streamer id or play any streamer). Prod refuses
	// --pxstream-auth none without it.
	InsecurePxstreamAuthNone bool

	// test holds hooks only this package's tests set (an injected clock,
	// fast control loops). No flag, variable or file reaches it, so the
	// binary always runs on the wall clock.
	test testHooks
}

// testHooks are set only by this package's tests.
type testHooks struct {
	now         func() time.Time // nil: time.Now
	surgeEvery  time.Duration    // 0: the reference's 15 s
	chargeEvery time.Duration    // 0: a third of the admission lease TTL
}

// clock is the edge's clock: the wall clock, or a test's.
func (c *Config) clock() func() time.Time {
	if c.test.now != nil {
		return c.test.now
	}
	return time.Now
}

// ICEServer is one STUN/TURN server for Epic peers.
type ICEServer struct {
	URLs       []string `json:"urls"`
	Username   string   `json:"username,omitempty"`
	Credential string   `json:"credential,omitempty"`
}

// Duration is a time.Duration that reads "30s" in JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Default is a dev-mode edge on the documented ports.
func Default() Config {
	return Config{
		Mode:           ModeDev,
		HTTP:           ":8080",
		HTTPS:          ":8443",
		ICEUDP:         ":8444",
		StreamerWS:     ":8888",
		SFUWS:          ":8889",
		PxSFUStreamer:  "DefaultStreamer",
		Admin:          "127.0.0.1:9090",
		DevShard:       true,
		DevInstances:   []string{"orun-grove"},
		DevShardAgents: 200,
		DrainWindow:    Duration(5 * time.Second),
		PxstreamAuth:   "none",
		VoiceSlots:     4,
		TURN:           ":3478",
		TURNRelayPorts: "49160-49200",
		LogLevel:       "info",
		LogFormat:      "text",
		FallbackURL:    admission.FallbackURL,
	}
}

// ErrConfig wraps every configuration error.
var ErrConfig = errors.New("config")

// Validate checks the configuration, including prod mode's refusals.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch c.Mode {
	case ModeDev, ModeProd:
	default:
		bad("mode %q: want dev or prod", c.Mode)
	}
	for name, addr := range map[string]string{"http": c.HTTP, "https": c.HTTPS, "ice-udp": c.ICEUDP, "streamer-ws": c.StreamerWS, "player-ws": c.PlayerWS, "sfu-ws": c.SFUWS, "admin": c.Admin, "turn": c.TURN} {
		if addr == "" {
			if name == "player-ws" || name == "streamer-ws" || name == "sfu-ws" || name == "https" || name == "turn" {
				continue // optional listeners
			}
			bad("--%s: an address is required", name)
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad("--%s %q: %v", name, addr, err)
		}
	}
	switch c.PxstreamAuth {
	case "none", "token":
	default:
		bad("--pxstream-auth %q: want none or token", c.PxstreamAuth)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("--tls-cert and --tls-key go together")
	}
	if c.MaxPlayers < 0 || c.DevStreamers < 0 || c.DevShardAgents < 0 || c.PxSFU < 0 {
		bad("--max-players, --dev-streamers, --pxsfu and dev shard agents must not be negative")
	}
	if c.PxSFU > 0 && c.SFUWS == "" {
		bad("--pxsfu needs the SFU port (--sfu-ws)")
	}
	if c.VoiceSlots < 1 || c.VoiceSlots > 16 {
		bad("--voice-slots %d: want 1-16", c.VoiceSlots)
	}
	if c.DrainWindow < 0 {
		bad("--drain-window must not be negative")
	}
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			strings.ContainsAny(c.PublicURL, " \t\r\n") || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			bad("--public-url %q: want http(s)://host[:port] with no path", c.PublicURL)
		}
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		bad("--log-format %q: want text or json", c.LogFormat)
	}
	if u, err := url.Parse(c.FallbackURL); err != nil || c.FallbackURL == "" || strings.ContainsAny(c.FallbackURL, " \t\r\n") ||
		!(u.Scheme == "" && u.Host == "" && strings.HasPrefix(c.FallbackURL, "/") && !strings.HasPrefix(c.FallbackURL, "//") ||
			(u.Scheme == "http" || u.Scheme == "https") && u.Host != "") {
		bad("--fallback-url %q: want a path on this edge (/...) or an http(s) URL", c.FallbackURL)
	}
	for _, h := range c.AdminHosts {
		if h == "" || strings.ContainsAny(h, "/:@ ") {
			bad("--admin-host %q: want a host name without port", h)
		}
	}
	errs = append(errs, c.validateTURN()...)
	for inst, shard := range c.Instances {
		if _, ok := c.Shards[shard]; !ok && !(c.DevShard && shard == DevShardName) {
			bad("--instance %s=%s: no such shard (use --shard %s=ADDR)", inst, shard, shard)
		}
	}
	if c.Mode == ModeProd {
		if len(c.JWTSecret) < 32 {
			bad("prod mode needs EGBE_JWT_SECRET (at least 32 bytes); refusing to start with a generated secret")
		} else if err := auth.CheckSecret(c.JWTSecret, auth.MinSigningSecretBits); err != nil {
			bad("EGBE_JWT_SECRET: %v", err)
		}
		if c.LinkToken != "" {
			if err := auth.CheckSecret(c.LinkToken, auth.MinSharedSecretBits); err != nil {
				bad("EGBE_LINK_TOKEN: %v", err)
			}
		}
		if c.TLSCert == "" {
			bad("prod mode needs --tls-cert and --tls-key; refusing to start with a generated certificate")
		}
		if c.DevShard {
			bad("prod mode never runs the in-process dev shard; point --shard/--instance at real shards")
		}
		if c.DevStreamers > 0 {
			bad("prod mode never runs dev streamers")
		}
		if turnOn := c.TURN != "" || len(c.TURNURLs) > 0; turnOn && len(c.TURNSecret) < minTURNSecret {
			bad("prod mode needs EGBE_TURN_SECRET (at least %d bytes) when TURN is on (--turn, --turn-url); set --turn \"\" to run without", minTURNSecret)
		} else if turnOn {
			if err := auth.CheckSecret(c.TURNSecret, auth.MinSharedSecretBits); err != nil {
				bad("EGBE_TURN_SECRET: %v", err)
			}
		}
		if c.PxstreamAuth == "none" && !c.InsecurePxstreamAuthNone {
			bad("prod mode needs --pxstream-auth token: with none anyone may squat a streamer id or play any streamer; pass --insecure-pxstream-auth-none to run without Pixel Streaming auth anyway")
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

// DevShardName is the in-process reference shard's name.
const DevShardName = "dev"

// minTURNSecret is the shortest EGBE_TURN_SECRET prod mode accepts.
const minTURNSecret = 16

// validateTURN checks the TURN settings.
func (c *Config) validateTURN() []error {
	var errs []error
	if _, err := turnrelay.ParsePortRange(c.TURNRelayPorts); err != nil {
		errs = append(errs, fmt.Errorf("--turn-relay-ports %q: %w", c.TURNRelayPorts, err))
	}
	for _, u := range c.TURNURLs {
		if err := turnrelay.ValidateURL(u); err != nil {
			errs = append(errs, fmt.Errorf("--turn-url: %w", err))
		}
	}
	probe := turnrelay.Default()
	probe.Secret = []byte("probe")
	probe.AllowPeers = c.TURNAllowPeers
	if err := probe.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("--turn-allow-peer: %w", err))
	}
	return errs
}
