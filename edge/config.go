package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/oshun/egbe-edge/turnrelay"
)

// Modes.
const (
	ModeDev  = "dev"
	ModeProd = "prod"
)

// Config is everything the edge needs to start. Precedence, lowest first:
// Default(), the --config file (JSON, unknown keys are an error), EGBE_*
// environment variables, then command-line flags.
type Config struct {
	Mode       string `json:"mode"`        // --mode / EGBE_MODE: dev | prod
	HTTP       string `json:"http"`        // --http / EGBE_HTTP
	HTTPS      string `json:"https"`       // --https / EGBE_HTTPS (TCP and UDP)
	ICEUDP     string `json:"ice_udp"`     // --ice-udp / EGBE_ICE_UDP
	StreamerWS string `json:"streamer_ws"` // --streamer-ws / EGBE_STREAMER_WS
	PlayerWS   string `json:"player_ws"`   // --player-ws / EGBE_PLAYER_WS ("" = off)
	SFUWS      string `json:"sfu_ws"`      // --sfu-ws / EGBE_SFU_WS ("" = off)
	Admin      string `json:"admin"`       // --admin / EGBE_ADMIN
	RedisURL   string `json:"redis_url"`   // --redis-url / EGBE_REDIS_URL ("" = in-memory)
	TLSCert    string `json:"tls_cert"`    // --tls-cert
	TLSKey     string `json:"tls_key"`     // --tls-key
	// JWTSecret comes from EGBE_JWT_SECRET only (never a flag: flags show
	// up in process listings). The config file may not set it either.
	JWTSecret string `json:"-"`

	// PublicIPs replace the ICE host candidates' addresses (1:1 NAT).
	PublicIPs []string `json:"public_ips"` // --public-ip (repeatable) / EGBE_PUBLIC_IPS
	// PublicURL is the base URL clients reach this very edge at, bypassing
	// any load balancer (e.g. https://edge-3.example.net:8443). A fleet
	// hands it to clients whose voice room lives here (voice_room_elsewhere).
	// Empty: http:// and the HTTP listener's bound address.
	PublicURL string `json:"public_url"` // --public-url / EGBE_PUBLIC_URL
	// AllowedOrigins restricts the Origins WebSocket accepts and CORS grants
	// (negotiate, WebRTC offers, voice); empty allows any.
	AllowedOrigins []string `json:"allowed_origins"` // --allowed-origin / EGBE_ALLOWED_ORIGINS

	// Shards maps shard name -> link address (--shard NAME=ADDR / EGBE_SHARDS).
	Shards map[string]string `json:"shards"`
	// Instances maps instance -> shard name (--instance INSTANCE=SHARD / EGBE_INSTANCES).
	Instances map[string]string `json:"instances"`
	// DevShard runs an in-process reference shard serving DevInstances
	// (default on in dev mode, never in prod).
	DevShard       bool     `json:"dev_shard"`
	DevInstances   []string `json:"dev_instances"`
	DevShardAgents int      `json:"dev_shard_agents"`

	// DrainWindow spreads Drain messages on SIGTERM.
	DrainWindow Duration `json:"drain_window"` // --drain-window / EGBE_DRAIN_WINDOW

	// Pixel Streaming.
	PxstreamAuth     string `json:"pxstream_auth"`     // --pxstream-auth / EGBE_PXSTREAM_AUTH: none | token
	PxstreamTopology string `json:"pxstream_topology"` // --pxstream-topology / EGBE_PXSTREAM_TOPOLOGY
	MaxPlayers       int    `json:"max_players"`       // --max-players / EGBE_MAX_PLAYERS (0 = unlimited)
	DevStreamers     int    `json:"dev_streamers"`     // --dev-streamers / EGBE_DEV_STREAMERS
	// PxSFU runs this many Go SFUs (signalling/pxsfu) in-process, each
	// connected to the SFU port and subscribed to PxSFUStreamer.
	PxSFU         int    `json:"pxsfu"`          // --pxsfu / EGBE_PXSFU
	PxSFUStreamer string `json:"pxsfu_streamer"` // --pxsfu-streamer / EGBE_PXSFU_STREAMER ("" = the first listed)
	// ICEServers are handed to Epic peers in config.peerConnectionOptions.
	ICEServers []ICEServer `json:"ice_servers"`

	// TURN: the embedded server's UDP and TCP address ("" = off).
	TURN string `json:"turn"` // --turn / EGBE_TURN
	// TURNRelayPorts are the UDP ports relays are bound from, "MIN-MAX".
	TURNRelayPorts string `json:"turn_relay_ports"` // --turn-relay-ports / EGBE_TURN_RELAY_PORTS
	// TURNURLs are external TURN servers sharing EGBE_TURN_SECRET (e.g. a
	// coturn fleet with use-auth-secret), handed out beside or instead of
	// the embedded one.
	TURNURLs []string `json:"turn_urls"` // --turn-url (repeatable) / EGBE_TURN_URLS
	// TURNAllowPeers are prefixes relays may send to although they are
	// private (e.g. the streamers' subnet); loopback is allowed in dev.
	TURNAllowPeers []string `json:"turn_allow_peers"` // --turn-allow-peer (repeatable) / EGBE_TURN_ALLOW_PEERS
	// TURNSecret comes from EGBE_TURN_SECRET only, like JWTSecret.
	TURNSecret string `json:"-"`

	// Voice.
	VoiceSlots int `json:"voice_slots"` // --voice-slots / EGBE_VOICE_SLOTS

	// Admission policy file ("" = the shipped defaults).
	PolicyFile string `json:"policy_file"` // --policy / EGBE_POLICY
	// PxstreamEvents is the events file: concert walk-up pools and reserved
	// sessions, booked attendees (paid windows, the pre-warm bypass lane),
	// per-user cap grants and approved institutional networks ("" = none).
	PxstreamEvents string `json:"pxstream_events"` // --pxstream-events / EGBE_PXSTREAM_EVENTS
	// AuditLog is where admission's audit events go, one JSON object a line
	// ("" = stderr).
	AuditLog string `json:"audit_log"` // --audit-log / EGBE_AUDIT_LOG
	// InsecurePxstreamAuthNone lets prod run Pixel Streaming without tokens
	// (anyone may register a streamer id or play any streamer). Prod refuses
	// --pxstream-auth none without it.
	InsecurePxstreamAuthNone bool `json:"insecure_pxstream_auth_none"` // --insecure-pxstream-auth-none / EGBE_INSECURE_PXSTREAM_AUTH_NONE

	// test holds hooks only this package's tests set (an injected clock,
	// fast control loops). No flag, variable or file reaches it, so the
	// binary always runs on the wall clock.
	test testHooks

	// Which mode-dependent keys the config file set explicitly.
	fileSetDevShard, fileSetPxAuth bool
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
	errs = append(errs, c.validateTURN()...)
	for inst, shard := range c.Instances {
		if _, ok := c.Shards[shard]; !ok && !(c.DevShard && shard == DevShardName) {
			bad("--instance %s=%s: no such shard (use --shard %s=ADDR)", inst, shard, shard)
		}
	}
	if c.Mode == ModeProd {
		if len(c.JWTSecret) < 32 {
			bad("prod mode needs EGBE_JWT_SECRET (at least 32 bytes); refusing to start with a generated secret")
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
		if (c.TURN != "" || len(c.TURNURLs) > 0) && len(c.TURNSecret) < minTURNSecret {
			bad("prod mode needs EGBE_TURN_SECRET (at least %d bytes) when TURN is on (--turn, --turn-url); set --turn \"\" to run without", minTURNSecret)
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

// Load builds a Config from args (without the program name) and env
// (os.Environ form), honouring file < env < flags.
func Load(args []string, env []string, stderr io.Writer) (Config, error) {
	cfg := Default()
	getenv := envLookup(env)

	fs := flag.NewFlagSet("egbe-edge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		configFile                           string
		shardsFlag, instancesFlag            pairsFlag
		publicIPsFlag, originsFlag           listFlag
		modeFlag, redisFlag, topoFlag        string
		httpF, httpsF, iceF, swsF, pwsF, adF string
		sfuF, pxsfuStreamer                  string
		pxsfu                                int
		tlsCert, tlsKey, pxAuth, policyF     string
		publicURL, turnF, turnPorts          string
		eventsF, auditF                      string
		turnURLs, turnAllow                  listFlag
		insecurePxNone                       bool
		maxPlayers, devStreamers, slots      int
		drain                                time.Duration
		devShard                             bool
	)
	fs.StringVar(&configFile, "config", "", "JSON config `file` (unknown keys are an error)")
	fs.StringVar(&modeFlag, "mode", cfg.Mode, "dev or prod")
	fs.StringVar(&httpF, "http", cfg.HTTP, "HTTP listener (WebSocket, APIs, demo page)")
	fs.StringVar(&httpsF, "https", cfg.HTTPS, "HTTPS + HTTP/3 listener, TCP and UDP (WebTransport)")
	fs.StringVar(&iceF, "ice-udp", cfg.ICEUDP, "the one UDP port for every WebRTC peer")
	fs.StringVar(&swsF, "streamer-ws", cfg.StreamerWS, "Epic streamer WebSocket listener")
	fs.StringVar(&pwsF, "player-ws", cfg.PlayerWS, "Epic player WebSocket listener (off when empty)")
	fs.StringVar(&sfuF, "sfu-ws", cfg.SFUWS, "Epic SFU WebSocket listener (off when empty)")
	fs.StringVar(&adF, "admin", cfg.Admin, "admin listener: /metrics, /healthz, /readyz, pprof, /ops")
	fs.StringVar(&redisFlag, "redis-url", "", "Redis `URL` for shared state (empty: in-memory): redis:// rediss:// unix:// one server; redis+cluster://h1:p1,h2:p2 Cluster seeds; redis+sentinel://s1:p1,s2:p2/MASTER[/DB] via Sentinel")
	fs.StringVar(&tlsCert, "tls-cert", "", "TLS certificate file (PEM)")
	fs.StringVar(&tlsKey, "tls-key", "", "TLS key file (PEM)")
	fs.Var(&shardsFlag, "shard", "external shard `NAME=ADDR` (repeatable)")
	fs.Var(&instancesFlag, "instance", "route `INSTANCE=SHARD` (repeatable)")
	fs.StringVar(&publicURL, "public-url", "", "base `URL` clients reach this edge at directly (fleet voice rooms; default http://HTTP-listener)")
	fs.Var(&publicIPsFlag, "public-ip", "public IP for ICE host candidates (repeatable)")
	fs.Var(&originsFlag, "allowed-origin", "allowed Origin for WebSocket and for CORS on negotiate, WebRTC offers and voice (repeatable; none = any)")
	fs.BoolVar(&devShard, "dev-shard", cfg.DevShard, "run the in-process reference shard (dev only)")
	fs.DurationVar(&drain, "drain-window", time.Duration(cfg.DrainWindow), "spread Drain messages over this window on SIGTERM")
	fs.StringVar(&pxAuth, "pxstream-auth", "", "Pixel Streaming auth: none (drop-in) or token (default: none in dev, token in prod)")
	fs.StringVar(&topoFlag, "pxstream-topology", "", "Pixel Streaming topology `file` (default: the shipped GA topology)")
	fs.IntVar(&maxPlayers, "max-players", 0, "players per streamer (0 = unlimited)")
	fs.IntVar(&devStreamers, "dev-streamers", 0, "synthetic streamers to run in-process (dev)")
	fs.IntVar(&pxsfu, "pxsfu", 0, "Go Pixel Streaming SFUs to run in-process on the SFU port")
	fs.StringVar(&pxsfuStreamer, "pxsfu-streamer", cfg.PxSFUStreamer, "streamer id the in-process SFUs subscribe to (empty: the first listed)")
	fs.IntVar(&slots, "voice-slots", cfg.VoiceSlots, "audio slots per voice listener")
	fs.StringVar(&policyF, "policy", "", "admission policy `file` (default: the shipped reference values)")
	fs.StringVar(&turnF, "turn", cfg.TURN, "embedded TURN server, UDP and TCP (off when empty); credentials from EGBE_TURN_SECRET")
	fs.StringVar(&turnPorts, "turn-relay-ports", cfg.TURNRelayPorts, "UDP port `range` MIN-MAX for TURN relays")
	fs.Var(&turnURLs, "turn-url", "external TURN server `URL` sharing EGBE_TURN_SECRET, e.g. turn:coturn.example.net:3478?transport=udp (repeatable)")
	fs.Var(&turnAllow, "turn-allow-peer", "`CIDR` TURN may relay to although private (repeatable; loopback is allowed in dev)")
	fs.StringVar(&eventsF, "pxstream-events", "", "Pixel Streaming events `file`: walk-up pools, reserved sessions, booked attendees, cap grants, institutional networks")
	fs.StringVar(&auditF, "audit-log", "", "admission audit log `file`, JSON lines (default: stderr)")
	fs.BoolVar(&insecurePxNone, "insecure-pxstream-auth-none", false, "INSECURE: let prod run Pixel Streaming with --pxstream-auth none")
	if err := fs.Parse(args); err != nil {
		return cfg, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("%w: unexpected arguments %q", ErrConfig, fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	// 1. File.
	if configFile == "" {
		configFile = getenv("EGBE_CONFIG")
	}
	if configFile != "" {
		if err := cfg.loadFile(configFile); err != nil {
			return cfg, err
		}
	}
	// 2. Environment.
	if err := cfg.applyEnv(getenv); err != nil {
		return cfg, err
	}
	if v, ok := envPresent(env, "EGBE_TURN"); ok {
		cfg.TURN = v // EGBE_TURN= (empty) turns TURN off
	}
	if v, ok := envPresent(env, "EGBE_SFU_WS"); ok {
		cfg.SFUWS = v // EGBE_SFU_WS= (empty) turns the SFU port off
	}
	// 3. Flags that were given.
	str := map[string]*string{"mode": &cfg.Mode, "http": &cfg.HTTP, "https": &cfg.HTTPS, "ice-udp": &cfg.ICEUDP,
		"streamer-ws": &cfg.StreamerWS, "player-ws": &cfg.PlayerWS, "sfu-ws": &cfg.SFUWS, "admin": &cfg.Admin, "redis-url": &cfg.RedisURL,
		"tls-cert": &cfg.TLSCert, "tls-key": &cfg.TLSKey, "pxstream-auth": &cfg.PxstreamAuth,
		"pxstream-topology": &cfg.PxstreamTopology, "policy": &cfg.PolicyFile, "public-url": &cfg.PublicURL,
		"turn": &cfg.TURN, "turn-relay-ports": &cfg.TURNRelayPorts,
		"pxstream-events": &cfg.PxstreamEvents, "audit-log": &cfg.AuditLog, "pxsfu-streamer": &cfg.PxSFUStreamer}
	vals := map[string]string{"mode": modeFlag, "http": httpF, "https": httpsF, "ice-udp": iceF, "streamer-ws": swsF,
		"player-ws": pwsF, "sfu-ws": sfuF, "admin": adF, "redis-url": redisFlag, "tls-cert": tlsCert, "tls-key": tlsKey,
		"pxstream-auth": pxAuth, "pxstream-topology": topoFlag, "policy": policyF, "public-url": publicURL,
		"turn": turnF, "turn-relay-ports": turnPorts, "pxstream-events": eventsF, "audit-log": auditF,
		"pxsfu-streamer": pxsfuStreamer}
	for name, dst := range str {
		if set[name] {
			*dst = vals[name]
		}
	}
	if set["shard"] {
		cfg.Shards = shardsFlag.m
	}
	if set["instance"] {
		cfg.Instances = instancesFlag.m
	}
	if set["public-ip"] {
		cfg.PublicIPs = publicIPsFlag
	}
	if set["allowed-origin"] {
		cfg.AllowedOrigins = originsFlag
	}
	if set["turn-url"] {
		cfg.TURNURLs = turnURLs
	}
	if set["turn-allow-peer"] {
		cfg.TURNAllowPeers = turnAllow
	}
	if set["dev-shard"] {
		cfg.DevShard = devShard
	}
	if set["drain-window"] {
		cfg.DrainWindow = Duration(drain)
	}
	if set["max-players"] {
		cfg.MaxPlayers = maxPlayers
	}
	if set["dev-streamers"] {
		cfg.DevStreamers = devStreamers
	}
	if set["pxsfu"] {
		cfg.PxSFU = pxsfu
	}
	if set["voice-slots"] {
		cfg.VoiceSlots = slots
	}
	if set["insecure-pxstream-auth-none"] {
		cfg.InsecurePxstreamAuthNone = insecurePxNone
	}
	cfg.applyModeDefaults(set["dev-shard"] || getenv("EGBE_DEV_SHARD") != "", set["pxstream-auth"] || getenv("EGBE_PXSTREAM_AUTH") != "" || cfg.fileSetPxAuth)
	return cfg, nil
}

// applyModeDefaults sets what depends on the mode unless it was chosen
// explicitly: prod never runs the dev shard and defaults to token auth.
func (c *Config) applyModeDefaults(devShardChosen, pxAuthChosen bool) {
	if c.Mode != ModeProd {
		return
	}
	if !devShardChosen && !c.fileSetDevShard {
		c.DevShard = false
	}
	if !pxAuthChosen {
		c.PxstreamAuth = "token"
	}
}

func (c *Config) loadFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: %s: trailing data after the JSON object", ErrConfig, path)
	}
	// Remember which mode-dependent keys the file chose explicitly.
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(b, &keys)
	_, c.fileSetDevShard = keys["dev_shard"]
	_, c.fileSetPxAuth = keys["pxstream_auth"]
	return nil
}

func (c *Config) applyEnv(getenv func(string) string) error {
	strs := map[string]*string{"EGBE_MODE": &c.Mode, "EGBE_HTTP": &c.HTTP, "EGBE_HTTPS": &c.HTTPS,
		"EGBE_ICE_UDP": &c.ICEUDP, "EGBE_STREAMER_WS": &c.StreamerWS, "EGBE_PLAYER_WS": &c.PlayerWS, "EGBE_SFU_WS": &c.SFUWS, "EGBE_PXSFU_STREAMER": &c.PxSFUStreamer,
		"EGBE_ADMIN": &c.Admin, "EGBE_REDIS_URL": &c.RedisURL, "EGBE_TLS_CERT": &c.TLSCert, "EGBE_TLS_KEY": &c.TLSKey,
		"EGBE_PXSTREAM_AUTH": &c.PxstreamAuth, "EGBE_PXSTREAM_TOPOLOGY": &c.PxstreamTopology, "EGBE_POLICY": &c.PolicyFile,
		"EGBE_JWT_SECRET": &c.JWTSecret, "EGBE_PUBLIC_URL": &c.PublicURL,
		"EGBE_TURN_RELAY_PORTS": &c.TURNRelayPorts, "EGBE_TURN_SECRET": &c.TURNSecret,
		"EGBE_PXSTREAM_EVENTS": &c.PxstreamEvents, "EGBE_AUDIT_LOG": &c.AuditLog}
	names := make([]string, 0, len(strs))
	for k := range strs {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if v, ok := lookup(getenv, k); ok {
			*strs[k] = v
		}
	}
	ints := map[string]*int{"EGBE_MAX_PLAYERS": &c.MaxPlayers, "EGBE_DEV_STREAMERS": &c.DevStreamers, "EGBE_PXSFU": &c.PxSFU, "EGBE_VOICE_SLOTS": &c.VoiceSlots}
	for k, dst := range ints {
		if v, ok := lookup(getenv, k); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%w: %s=%q: not a number", ErrConfig, k, v)
			}
			*dst = n
		}
	}
	if v, ok := lookup(getenv, "EGBE_INSECURE_PXSTREAM_AUTH_NONE"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%w: EGBE_INSECURE_PXSTREAM_AUTH_NONE=%q: not a boolean", ErrConfig, v)
		}
		c.InsecurePxstreamAuthNone = b
	}
	if v, ok := lookup(getenv, "EGBE_DEV_SHARD"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%w: EGBE_DEV_SHARD=%q: not a boolean", ErrConfig, v)
		}
		c.DevShard = b
	}
	if v, ok := lookup(getenv, "EGBE_DRAIN_WINDOW"); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%w: EGBE_DRAIN_WINDOW=%q: %w", ErrConfig, v, err)
		}
		c.DrainWindow = Duration(d)
	}
	for k, dst := range map[string]*map[string]string{"EGBE_SHARDS": &c.Shards, "EGBE_INSTANCES": &c.Instances} {
		if v, ok := lookup(getenv, k); ok {
			var p pairsFlag
			for _, item := range strings.Split(v, ",") {
				if item = strings.TrimSpace(item); item != "" {
					if err := p.Set(item); err != nil {
						return fmt.Errorf("%w: %s: %w", ErrConfig, k, err)
					}
				}
			}
			*dst = p.m
		}
	}
	for k, dst := range map[string]*[]string{"EGBE_PUBLIC_IPS": &c.PublicIPs, "EGBE_ALLOWED_ORIGINS": &c.AllowedOrigins,
		"EGBE_TURN_URLS": &c.TURNURLs, "EGBE_TURN_ALLOW_PEERS": &c.TURNAllowPeers} {
		if v, ok := lookup(getenv, k); ok {
			*dst = splitList(v)
		}
	}
	return nil
}

// envPresent finds k in env even when its value is empty.
func envPresent(env []string, k string) (string, bool) {
	v, ok := "", false
	for _, kv := range env {
		if name, val, found := strings.Cut(kv, "="); found && name == k {
			v, ok = val, true // the last one wins, as in os.Getenv
		}
	}
	return v, ok
}

func lookup(getenv func(string) string, k string) (string, bool) {
	v := getenv(k)
	return v, v != ""
}

func envLookup(env []string) func(string) string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// pairsFlag collects repeatable NAME=VALUE flags.
type pairsFlag struct{ m map[string]string }

func (p *pairsFlag) String() string {
	if p == nil || len(p.m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(p.m))
	for k := range p.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + p.m[k]
	}
	return strings.Join(parts, ",")
}

func (p *pairsFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" || val == "" {
		return fmt.Errorf("%q: want NAME=VALUE", v)
	}
	if p.m == nil {
		p.m = map[string]string{}
	}
	p.m[k] = val
	return nil
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

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
