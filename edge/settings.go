package edge

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// setting is one configuration setting, declared once: its flag, its
// environment variable, its config-file key, its help, and the Config
// field it fills (whose value in Default() is its default). Load, the
// --help text, the README's settings table and the example edge.json's
// test all derive from the settings table, so adding a setting is one
// entry here and one Config field.
type setting struct {
	group string // heading in --help and the README
	flag  string // "" = no flag
	env   string // "" = no environment variable
	key   string // "" = not in the config file
	arg   string // the value's name in --help (ADDR, FILE, N); "" for booleans
	help  string
	// def is the default as --help shows it when Default() cannot say it
	// (a default that depends on the mode).
	def string
	// emptyOff: an empty environment variable is a value ("" turns the
	// listener off) rather than "not set".
	emptyOff bool
	// secret settings come from the environment only: flags show up in
	// process listings and config files get copied around.
	secret bool
	// field points into c. Its type says how text is parsed: string,
	// int, bool, Duration, []string (repeatable flag; comma-separated
	// variable), map[string]string (repeatable NAME=VALUE; comma-separated
	// variable) or anything else (config file only, as JSON).
	field func(c *Config) any
}

// Setting groups, in --help order.
const (
	groupListeners = "Listeners"
	groupMode      = "Mode, secrets and logs"
	groupState     = "Shared state and shards"
	groupPxstream  = "Pixel Streaming"
	groupTURN      = "TURN"
	groupAdmission = "Voice and admission"
	groupDev       = "Dev mode"
)

// settings is every configuration setting.
var settings = []setting{
	{group: groupListeners, flag: "http", env: "EGBE_HTTP", key: "http", arg: "ADDR",
		help:  "HTTP listener: WebSocket realtime, HTTP APIs, Epic players at /v6/pxstream/signalling, the pages",
		field: func(c *Config) any { return &c.HTTP }},
	{group: groupListeners, flag: "https", env: "EGBE_HTTPS", key: "https", arg: "ADDR", emptyOff: true,
		help:  "HTTPS + HTTP/3 listener, TCP and UDP on one port (WebTransport); empty: off",
		field: func(c *Config) any { return &c.HTTPS }},
	{group: groupListeners, flag: "ice-udp", env: "EGBE_ICE_UDP", key: "ice_udp", arg: "ADDR",
		help:  "the one UDP port of every WebRTC peer (data channels and voice), ICE-lite",
		field: func(c *Config) any { return &c.ICEUDP }},
	{group: groupListeners, flag: "streamer-ws", env: "EGBE_STREAMER_WS", key: "streamer_ws", arg: "ADDR", emptyOff: true,
		help:  "Epic streamer WebSocket listener (UE workers, any path); empty: off",
		field: func(c *Config) any { return &c.StreamerWS }},
	{group: groupListeners, flag: "player-ws", env: "EGBE_PLAYER_WS", key: "player_ws", arg: "ADDR", emptyOff: true,
		help:  "Epic player WebSocket listener (any path; GET / is the player page); empty: off",
		field: func(c *Config) any { return &c.PlayerWS }},
	{group: groupListeners, flag: "sfu-ws", env: "EGBE_SFU_WS", key: "sfu_ws", arg: "ADDR", emptyOff: true,
		help:  "Epic SFU WebSocket listener (Epic's SFU or --pxsfu connect here; any path); empty: off",
		field: func(c *Config) any { return &c.SFUWS }},
	{group: groupListeners, flag: "admin", env: "EGBE_ADMIN", key: "admin", arg: "ADDR",
		help:  "admin listener: /metrics, /healthz, /readyz, /debug/pprof/, /ops/ (changes need an operator token)",
		field: func(c *Config) any { return &c.Admin }},
	{group: groupListeners, flag: "admin-host", env: "EGBE_ADMIN_HOSTS", key: "admin_hosts", arg: "NAME",
		help:  "a host name the admin listener answers to besides IP addresses and localhost (repeatable; DNS-rebinding guard)",
		field: func(c *Config) any { return &c.AdminHosts }},
	{group: groupListeners, flag: "public-ip", env: "EGBE_PUBLIC_IPS", key: "public_ips", arg: "IP",
		help:  "public IP for ICE host candidates and TURN relays, 1:1 NAT (repeatable)",
		field: func(c *Config) any { return &c.PublicIPs }},
	{group: groupListeners, flag: "public-url", env: "EGBE_PUBLIC_URL", key: "public_url", arg: "URL",
		help:  "base URL clients reach this very edge at (a fleet redirects voice joins there); default http:// and the HTTP listener",
		field: func(c *Config) any { return &c.PublicURL }},
	{group: groupListeners, flag: "allowed-origin", env: "EGBE_ALLOWED_ORIGINS", key: "allowed_origins", arg: "ORIGIN",
		help:  "Origin WebSocket accepts and CORS grants on negotiate, WebRTC offers and voice (repeatable; none: any)",
		field: func(c *Config) any { return &c.AllowedOrigins }},
	{group: groupListeners, flag: "drain-window", env: "EGBE_DRAIN_WINDOW", key: "drain_window", arg: "D",
		help:  "spread Drain messages over this window on SIGTERM",
		field: func(c *Config) any { return &c.DrainWindow }},

	{group: groupMode, flag: "mode", env: "EGBE_MODE", key: "mode", arg: "MODE",
		help:  "dev (generated secret and certificate, dev token endpoint, in-process shard) or prod (refuses to start without real secrets and TLS)",
		field: func(c *Config) any { return &c.Mode }},
	{group: groupMode, flag: "tls-cert", env: "EGBE_TLS_CERT", key: "tls_cert", arg: "FILE",
		help:  "TLS certificate (PEM); dev generates one",
		field: func(c *Config) any { return &c.TLSCert }},
	{group: groupMode, flag: "tls-key", env: "EGBE_TLS_KEY", key: "tls_key", arg: "FILE",
		help:  "TLS key (PEM)",
		field: func(c *Config) any { return &c.TLSKey }},
	{group: groupMode, env: "EGBE_JWT_SECRET", secret: true,
		help:  "signs and verifies every token (access, session, resume, queue, operator); the same on every edge of a fleet; prod: at least 32 random bytes",
		field: func(c *Config) any { return &c.JWTSecret }},
	{group: groupMode, flag: "log-level", env: "EGBE_LOG_LEVEL", key: "log_level", arg: "LEVEL",
		help:  "debug, info, warn or error",
		field: func(c *Config) any { return &c.LogLevel }},
	{group: groupMode, flag: "log-format", env: "EGBE_LOG_FORMAT", key: "log_format", arg: "FORMAT",
		help: "text or json", def: `"text" in dev, "json" in prod`,
		field: func(c *Config) any { return &c.LogFormat }},

	{group: groupState, flag: "redis-url", env: "EGBE_REDIS_URL", key: "redis_url", arg: "URL",
		help:  "shared state for a fleet (empty: in memory): redis:// rediss:// unix:// one server; redis+cluster://h1:p1,h2:p2 Cluster seeds; redis+sentinel://s1:p1,s2:p2/MASTER[/DB]. Prefer the variable: it keeps the password out of process listings",
		field: func(c *Config) any { return &c.RedisURL }},
	{group: groupState, flag: "shard", env: "EGBE_SHARDS", key: "shards", arg: "NAME=ADDR",
		help:  "a world shard's link address (repeatable; the variable is comma-separated)",
		field: func(c *Config) any { return &c.Shards }},
	{group: groupState, flag: "instance", env: "EGBE_INSTANCES", key: "instances", arg: "INSTANCE=SHARD",
		help:  "route a world instance to a shard (repeatable; shards also announce their own)",
		field: func(c *Config) any { return &c.Instances }},
	{group: groupState, env: "EGBE_LINK_TOKEN", secret: true,
		help:  "pre-shared token the edge presents on every shard link (egbe-shard --token checks it)",
		field: func(c *Config) any { return &c.LinkToken }},

	{group: groupPxstream, flag: "pxstream-auth", env: "EGBE_PXSTREAM_AUTH", key: "pxstream_auth", arg: "MODE",
		help: "none (drop-in, as Epic's server) or token (players need the match's token, streamers a streamer token)", def: `"none" in dev, "token" in prod`,
		field: func(c *Config) any { return &c.PxstreamAuth }},
	{group: groupPxstream, flag: "insecure-pxstream-auth-none", env: "EGBE_INSECURE_PXSTREAM_AUTH_NONE", key: "insecure_pxstream_auth_none",
		help:  "INSECURE: let prod run Pixel Streaming with --pxstream-auth none",
		field: func(c *Config) any { return &c.InsecurePxstreamAuthNone }},
	{group: groupPxstream, flag: "pxstream-topology", env: "EGBE_PXSTREAM_TOPOLOGY", key: "pxstream_topology", arg: "FILE",
		help:  "POP topology: RTT maps, residency, quotas (default: the shipped GA topology)",
		field: func(c *Config) any { return &c.PxstreamTopology }},
	{group: groupPxstream, flag: "pxstream-events", env: "EGBE_PXSTREAM_EVENTS", key: "pxstream_events", arg: "FILE",
		help:  "events: concert walk-up pools and reserved sessions, SFU seats of concerts, booked attendees, cap grants, institutional networks",
		field: func(c *Config) any { return &c.PxstreamEvents }},
	{group: groupPxstream, flag: "max-players", env: "EGBE_MAX_PLAYERS", key: "max_players", arg: "N",
		help:  "players per streamer (0: unlimited)",
		field: func(c *Config) any { return &c.MaxPlayers }},
	{group: groupPxstream, flag: "pxsfu", env: "EGBE_PXSFU", key: "pxsfu", arg: "N",
		help:  "Go Pixel Streaming SFUs to run in-process on the SFU port (each takes a streamer's simulcast and serves players)",
		field: func(c *Config) any { return &c.PxSFU }},
	{group: groupPxstream, flag: "pxsfu-streamer", env: "EGBE_PXSFU_STREAMER", key: "pxsfu_streamer", arg: "ID",
		help:  "streamer the in-process SFUs subscribe to (empty: the first listed)",
		field: func(c *Config) any { return &c.PxSFUStreamer }},
	{group: groupPxstream, flag: "fallback-url", env: "EGBE_FALLBACK_URL", key: "fallback_url", arg: "URL",
		help:  "where every match refusal and the waiting room send a client instead (the Tier-2 experience); the default is served by the demo page",
		field: func(c *Config) any { return &c.FallbackURL }},
	{group: groupPxstream, key: "ice_servers",
		help:  `STUN/TURN servers handed to Epic peers in peerConnectionOptions: [{"urls":[...],"username":"","credential":""}]`,
		field: func(c *Config) any { return &c.ICEServers }},

	{group: groupTURN, flag: "turn", env: "EGBE_TURN", key: "turn", arg: "ADDR", emptyOff: true,
		help:  "embedded TURN server, UDP and TCP; empty: off",
		field: func(c *Config) any { return &c.TURN }},
	{group: groupTURN, env: "EGBE_TURN_SECRET", secret: true,
		help:  "TURN REST shared secret (coturn's static-auth-secret); prod with TURN on: at least 16 random bytes",
		field: func(c *Config) any { return &c.TURNSecret }},
	{group: groupTURN, flag: "turn-relay-ports", env: "EGBE_TURN_RELAY_PORTS", key: "turn_relay_ports", arg: "MIN-MAX",
		help:  "UDP ports TURN relays are bound from",
		field: func(c *Config) any { return &c.TURNRelayPorts }},
	{group: groupTURN, flag: "turn-url", env: "EGBE_TURN_URLS", key: "turn_urls", arg: "URL",
		help:  "external TURN server sharing EGBE_TURN_SECRET, e.g. turn:coturn.example.net:3478?transport=udp (repeatable)",
		field: func(c *Config) any { return &c.TURNURLs }},
	{group: groupTURN, flag: "turn-allow-peer", env: "EGBE_TURN_ALLOW_PEERS", key: "turn_allow_peers", arg: "CIDR",
		help:  "private prefix TURN may relay to, e.g. the streamers' subnet (repeatable; dev allows loopback)",
		field: func(c *Config) any { return &c.TURNAllowPeers }},

	{group: groupAdmission, flag: "voice-slots", env: "EGBE_VOICE_SLOTS", key: "voice_slots", arg: "K",
		help:  "audio slots per voice listener (1-16)",
		field: func(c *Config) any { return &c.VoiceSlots }},
	{group: groupAdmission, flag: "policy", env: "EGBE_POLICY", key: "policy_file", arg: "FILE",
		help:  "admission policy (default: the shipped reference values; check one with `egbe-edge policy check FILE`)",
		field: func(c *Config) any { return &c.PolicyFile }},
	{group: groupAdmission, flag: "audit-log", env: "EGBE_AUDIT_LOG", key: "audit_log", arg: "FILE",
		help:  "admission audit events, one JSON object a line (default: stderr)",
		field: func(c *Config) any { return &c.AuditLog }},

	{group: groupDev, flag: "dev-shard", env: "EGBE_DEV_SHARD", key: "dev_shard",
		help: "run the in-process reference shard (never in prod)", def: "true in dev, false in prod",
		field: func(c *Config) any { return &c.DevShard }},
	{group: groupDev, key: "dev_instances",
		help:  "instances the dev shard serves",
		field: func(c *Config) any { return &c.DevInstances }},
	{group: groupDev, key: "dev_shard_agents",
		help:  "simulated agents per dev instance",
		field: func(c *Config) any { return &c.DevShardAgents }},
	{group: groupDev, flag: "dev-streamers", env: "EGBE_DEV_STREAMERS", key: "dev_streamers", arg: "N",
		help:  "synthetic Pixel Streaming streamers to run in-process (watch them at /pxstream/)",
		field: func(c *Config) any { return &c.DevStreamers }},
}

// The --config file's own flag and variable (not a setting: it says where
// the others come from).
const (
	configFlag = "config"
	configEnv  = "EGBE_CONFIG"
)

// Load builds a Config from args (without the program name) and env
// (os.Environ form), honouring Default() < the config file < env < flags.
// -h and --help give an error wrapping flag.ErrHelp.
func Load(args []string, env []string, stderr io.Writer) (Config, error) {
	cfg := Default()
	fs := flag.NewFlagSet("egbe-edge", flag.ContinueOnError)
	// Errors are returned, and --help is the caller's to print.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	configFile := fs.String(configFlag, "", "")
	given := make([]*flagValue, 0, len(settings))
	for i := range settings {
		s := &settings[i]
		if s.flag == "" {
			continue
		}
		v := &flagValue{s: s}
		given = append(given, v)
		if _, ok := s.field(&Config{}).(*bool); ok {
			fs.Var(boolFlag{v}, s.flag, s.help)
		} else {
			fs.Var(v, s.flag, s.help)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, err
		}
		return cfg, fmt.Errorf("%w: %w (egbe-edge --help lists every setting)", ErrConfig, err)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("%w: unexpected arguments %q (egbe-edge --help)", ErrConfig, fs.Args())
	}
	vars := envMap(env)
	chosen := map[*setting]bool{}

	// 1. The file.
	if *configFile == "" {
		*configFile = vars[configEnv]
	}
	if *configFile != "" {
		keys, err := cfg.loadFile(*configFile)
		if err != nil {
			return cfg, err
		}
		for _, s := range keys {
			chosen[s] = true
		}
	}
	// 2. The environment.
	for i := range settings {
		s := &settings[i]
		if s.env == "" {
			continue
		}
		v, ok := vars[s.env]
		if !ok || (v == "" && !s.emptyOff) {
			continue
		}
		if err := setFromEnv(s.field(&cfg), v); err != nil {
			return cfg, fmt.Errorf("%w: %s=%q: %w", ErrConfig, s.env, v, err)
		}
		chosen[s] = true
	}
	// 3. The flags that were given, in the order given.
	for _, v := range given {
		if len(v.vals) == 0 {
			continue
		}
		dst := v.s.field(&cfg)
		resetRepeatable(dst)
		for _, val := range v.vals {
			if err := setFromText(dst, val); err != nil {
				return cfg, fmt.Errorf("%w: --%s %q: %w", ErrConfig, v.s.flag, val, err)
			}
		}
		chosen[v.s] = true
	}
	cfg.applyModeDefaults(func(p any) bool {
		for s := range chosen {
			if s.field(&cfg) == p {
				return true
			}
		}
		return false
	})
	_ = stderr // kept for callers; flag errors are returned, not printed
	return cfg, nil
}

// applyModeDefaults sets what depends on the mode unless it was chosen
// explicitly: prod never runs the dev shard, defaults to token auth for
// Pixel Streaming and logs JSON.
func (c *Config) applyModeDefaults(chosen func(field any) bool) {
	if c.Mode != ModeProd {
		return
	}
	if !chosen(&c.DevShard) {
		c.DevShard = false
	}
	if !chosen(&c.PxstreamAuth) {
		c.PxstreamAuth = "token"
	}
	if !chosen(&c.LogFormat) {
		c.LogFormat = "json"
	}
}

// loadFile decodes the JSON config file into c: every key must be a
// setting's (an unknown key is an error, and so is a secret), every value
// its type. It returns the settings the file set.
func (c *Config) loadFile(path string) ([]*setting, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrConfig, path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: %s: trailing data after the JSON object", ErrConfig, path)
	}
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	slices.Sort(names)
	var set []*setting
	for _, k := range names {
		s := settingByKey(k)
		if s == nil {
			return nil, fmt.Errorf("%w: %s: unknown key %q (egbe-edge --help lists the keys)", ErrConfig, path, k)
		}
		vd := json.NewDecoder(bytes.NewReader(raw[k]))
		vd.DisallowUnknownFields()
		if err := vd.Decode(s.field(c)); err != nil {
			return nil, fmt.Errorf("%w: %s: %q: %w", ErrConfig, path, k, err)
		}
		set = append(set, s)
	}
	return set, nil
}

func settingByKey(k string) *setting {
	for i := range settings {
		if settings[i].key == k && !settings[i].secret {
			return &settings[i]
		}
	}
	return nil
}

// setFromEnv parses an environment variable into dst: lists and pairs are
// comma-separated.
func setFromEnv(dst any, v string) error {
	switch d := dst.(type) {
	case *[]string:
		*d = splitList(v)
		return nil
	case *map[string]string:
		*d = nil
		for _, item := range splitList(v) {
			if err := setFromText(dst, item); err != nil {
				return err
			}
		}
		return nil
	}
	return setFromText(dst, v)
}

// setFromText parses one value into dst; a list or a map gains an item.
func setFromText(dst any, v string) error {
	switch d := dst.(type) {
	case *string:
		*d = v
	case *int:
		n, err := strconv.Atoi(v)
		if err != nil {
			return errors.New("not a number")
		}
		*d = n
	case *bool:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("not a boolean")
		}
		*d = b
	case *Duration:
		t, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		*d = Duration(t)
	case *[]string:
		*d = append(*d, v)
	case *map[string]string:
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" || val == "" {
			return fmt.Errorf("%q: want NAME=VALUE", v)
		}
		if *d == nil {
			*d = map[string]string{}
		}
		(*d)[k] = val
	default:
		return fmt.Errorf("only the config file sets this (%T)", dst)
	}
	return nil
}

// resetRepeatable empties a list or map before a repeatable flag's values
// replace what the file or environment said.
func resetRepeatable(dst any) {
	switch d := dst.(type) {
	case *[]string:
		*d = nil
	case *map[string]string:
		*d = nil
	}
}

// flagValue records a flag's values; Load applies them after the file and
// the environment, checking each as it is parsed.
type flagValue struct {
	s    *setting
	vals []string
}

func (f *flagValue) String() string { return "" }

func (f *flagValue) Set(v string) error {
	var scratch Config
	if err := setFromText(f.s.field(&scratch), v); err != nil {
		return err
	}
	f.vals = append(f.vals, v)
	return nil
}

// boolFlag lets --dev-shard stand alone (as --dev-shard=false too).
type boolFlag struct{ *flagValue }

func (boolFlag) IsBoolFlag() bool { return true }

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v // the last one wins, as in os.Getenv
		}
	}
	return m
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

// defaultText is a setting's default as --help and the README show it.
func (s *setting) defaultText() string {
	if s.def != "" {
		return s.def
	}
	d := Default()
	switch v := s.field(&d).(type) {
	case *string:
		if *v == "" {
			return ""
		}
		return strconv.Quote(*v)
	case *int:
		return strconv.Itoa(*v)
	case *bool:
		return strconv.FormatBool(*v)
	case *Duration:
		return time.Duration(*v).String()
	case *[]string:
		if len(*v) == 0 {
			return ""
		}
		return strings.Join(*v, ",")
	}
	return ""
}

// WriteSettingsHelp writes every setting for --help: flag, variable,
// file key, default and what it does, by group.
func WriteSettingsHelp(w io.Writer) {
	fmt.Fprintf(w, "Settings (precedence: defaults < --config FILE (JSON; unknown keys are an error) < EGBE_* variables < flags):\n\n")
	fmt.Fprintf(w, "  --%s FILE  (%s)\n      JSON file of the settings below, by file key\n", configFlag, configEnv)
	group := ""
	for i := range settings {
		s := &settings[i]
		if s.group != group {
			group = s.group
			fmt.Fprintf(w, "\n%s:\n", group)
		}
		var head []string
		if s.flag != "" {
			f := "--" + s.flag
			if s.arg != "" {
				f += " " + s.arg
			}
			head = append(head, f)
		}
		var where []string
		if s.env != "" {
			where = append(where, s.env)
		}
		if s.key != "" {
			where = append(where, "file: "+s.key)
		}
		if s.secret {
			where = append(where, "environment only")
		}
		if d := s.defaultText(); d != "" {
			where = append(where, "default "+d)
		}
		line := "  " + strings.Join(head, " ")
		if len(head) == 0 {
			line = "  " + where[0]
			where = where[1:]
		}
		if len(where) > 0 {
			line += "  (" + strings.Join(where, "; ") + ")"
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, s.help)
	}
}

// SettingDoc describes one setting, for tools and tests that list them.
type SettingDoc struct {
	Flag, Env, Key, Help string
	Secret               bool // environment only
}

// SettingDocs lists every setting in --help order.
func SettingDocs() []SettingDoc {
	out := make([]SettingDoc, len(settings))
	for i, s := range settings {
		out[i] = SettingDoc{Flag: s.flag, Env: s.env, Key: s.key, Help: s.help, Secret: s.secret}
	}
	return out
}
