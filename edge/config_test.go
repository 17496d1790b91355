package edge

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "edge.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	cfg, err := Load(nil, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP != ":8080" || cfg.HTTPS != ":8443" || cfg.ICEUDP != ":8444" || cfg.StreamerWS != ":8888" ||
		cfg.SFUWS != ":8889" || cfg.PxSFU != 0 || cfg.PxSFUStreamer != "DefaultStreamer" || cfg.PlayerWS != "" || cfg.Admin != "127.0.0.1:9090" || cfg.Mode != ModeDev || cfg.RedisURL != "" ||
		!cfg.DevShard || cfg.PxstreamAuth != "none" || cfg.MaxPlayers != 0 {
		t.Fatalf("defaults: %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestSFUFlags: --sfu-ws / EGBE_SFU_WS (empty = off), --pxsfu N and
// --pxsfu-streamer, and --pxsfu refused without the SFU port.
func TestSFUFlags(t *testing.T) {
	cfg, err := Load([]string{"--pxsfu", "2", "--pxsfu-streamer", ""}, []string{"EGBE_SFU_WS=127.0.0.1:7889"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SFUWS != "127.0.0.1:7889" || cfg.PxSFU != 2 || cfg.PxSFUStreamer != "" {
		t.Fatalf("%+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg, err = Load(nil, []string{"EGBE_SFU_WS=", "EGBE_PXSFU=1", "EGBE_PXSFU_STREAMER=Concert"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SFUWS != "" || cfg.PxSFU != 1 || cfg.PxSFUStreamer != "Concert" {
		t.Fatalf("%+v", cfg)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--pxsfu needs the SFU port") {
		t.Fatalf("pxsfu without the SFU port: %v", err)
	}
	cfg, err = Load([]string{"--sfu-ws", ""}, nil, io.Discard)
	if err != nil || cfg.SFUWS != "" {
		t.Fatalf("%+v %v", cfg, err)
	}
}

func TestPrecedenceFileEnvFlags(t *testing.T) {
	file := writeFile(t, `{"http": ":1001", "https": ":1002", "admin": "127.0.0.1:1003", "max_players": 3, "drain_window": "7s"}`)
	env := []string{"EGBE_HTTPS=:2002", "EGBE_ADMIN=127.0.0.1:2003", "EGBE_SHARDS=a=127.0.0.1:7001,b=127.0.0.1:7002"}
	args := []string{"--config", file, "--admin", "127.0.0.1:3003", "--instance", "x=a"}
	cfg, err := Load(args, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTP != ":1001" {
		t.Errorf("file value lost: http=%q", cfg.HTTP)
	}
	if cfg.HTTPS != ":2002" {
		t.Errorf("env must beat file: https=%q", cfg.HTTPS)
	}
	if cfg.Admin != "127.0.0.1:3003" {
		t.Errorf("flag must beat env: admin=%q", cfg.Admin)
	}
	if cfg.MaxPlayers != 3 || time.Duration(cfg.DrainWindow) != 7*time.Second {
		t.Errorf("file ints/durations: %+v", cfg)
	}
	if cfg.Shards["b"] != "127.0.0.1:7002" || cfg.Instances["x"] != "a" {
		t.Errorf("pairs: %v %v", cfg.Shards, cfg.Instances)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestStrictFile(t *testing.T) {
	for name, body := range map[string]string{
		"unknown key":    `{"htp": ":1"}`,
		"secret in file": `{"JWTSecret": "x"}`,
		"wrong type":     `{"max_players": "three"}`,
		"trailing":       `{} {}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load([]string{"--config", writeFile(t, body)}, nil, io.Discard)
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("want ErrConfig, got %v", err)
			}
		})
	}
}

func TestProdRefusals(t *testing.T) {
	cases := []struct {
		name string
		env  []string
		args []string
		want string // substring of the error, "" = valid
	}{
		{"no secret no tls", []string{"EGBE_MODE=prod"}, nil, "EGBE_JWT_SECRET"},
		{"short secret", []string{"EGBE_MODE=prod", "EGBE_JWT_SECRET=short"}, []string{"--tls-cert", "c", "--tls-key", "k"}, "EGBE_JWT_SECRET"},
		{"no tls", []string{"EGBE_MODE=prod", "EGBE_JWT_SECRET=" + strings.Repeat("s", 32)}, nil, "--tls-cert"},
		{"dev shard forced", []string{"EGBE_MODE=prod", "EGBE_JWT_SECRET=" + strings.Repeat("s", 32)}, []string{"--tls-cert", "c", "--tls-key", "k", "--dev-shard"}, "dev shard"},
		{"no turn secret", []string{"EGBE_MODE=prod", "EGBE_JWT_SECRET=" + strings.Repeat("s", 32)}, []string{"--tls-cert", "c", "--tls-key", "k"}, "EGBE_TURN_SECRET"},
		{"short turn secret", []string{"EGBE_MODE=prod", "EGBE_JWT_SECRET=" + strings.Repeat("s", 32), "EGBE_TURN_SECRET=short"}, []string{"--tls-cert", "c", "--tls-key", "k"}, "EGBE_TURN_SECRET"},
		{"turn-url needs the secret", []string{"EGBE_MODE=prod", "EGBE_JWT_SECRET=" + strings.Repeat("s", 32)}, []string{"--tls-cert", "c", "--tls-key", "k", "--turn", "", "--turn-url", "turn:coturn.example.net:3478"}, "EGBE_TURN_SECRET"},
		{"ok", []string{"EGBE_MODE=prod", "EGBE_JWT_SECRET=" + strings.Repeat("s", 32), "EGBE_TURN_SECRET=" + strings.Repeat("t", 16)}, []string{"--tls-cert", "c", "--tls-key", "k"}, ""},
		{"ok without turn", []string{"EGBE_MODE=prod", "EGBE_JWT_SECRET=" + strings.Repeat("s", 32), "EGBE_TURN="}, []string{"--tls-cert", "c", "--tls-key", "k"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(tc.args, tc.env, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.DevShard && !strings.Contains(tc.want, "dev shard") {
				t.Fatalf("prod must not default to the dev shard")
			}
			if cfg.PxstreamAuth != "token" {
				t.Fatalf("prod defaults pxstream auth to token, got %q", cfg.PxstreamAuth)
			}
			err = cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("want error mentioning %q, got %v", tc.want, err)
			}
		})
	}
}

func TestBadValues(t *testing.T) {
	for name, args := range map[string][]string{
		"mode":     {"--mode", "staging"},
		"addr":     {"--http", "8080"},
		"pxauth":   {"--pxstream-auth", "maybe"},
		"instance": {"--instance", "x=nowhere"},
		"half tls": {"--tls-cert", "c"},
		"slots":    {"--voice-slots", "0"},
		"turn":     {"--turn", "3478"},
		"ports":    {"--turn-relay-ports", "49200-49160"},
		"turn-url": {"--turn-url", "https://coturn.example.net"},
		"peer":     {"--turn-allow-peer", "streamers"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := Load(args, nil, io.Discard)
			if err == nil {
				err = cfg.Validate()
			}
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("want ErrConfig, got %v", err)
			}
		})
	}
	if _, err := Load([]string{"--shard", "novalue"}, nil, io.Discard); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad --shard: %v", err)
	}
	if _, err := Load(nil, []string{"EGBE_MAX_PLAYERS=lots"}, io.Discard); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad env int: %v", err)
	}
}

// TestTURNSettings: the TURN flags and env, their defaults and precedence.
func TestTURNSettings(t *testing.T) {
	cfg, err := Load(nil, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TURN != ":3478" || cfg.TURNRelayPorts != "49160-49200" || len(cfg.TURNURLs) != 0 {
		t.Fatalf("TURN defaults: %q %q %v", cfg.TURN, cfg.TURNRelayPorts, cfg.TURNURLs)
	}
	env := []string{"EGBE_TURN=127.0.0.1:5000", "EGBE_TURN_SECRET=from-env-secret!", "EGBE_TURN_URLS=turn:a.example:3478, turn:b.example:3478?transport=tcp",
		"EGBE_TURN_RELAY_PORTS=40000-40100", "EGBE_TURN_ALLOW_PEERS=10.0.0.0/8"}
	cfg, err = Load([]string{"--turn-url", "turns:c.example:5349", "--turn-url", "turn:d.example", "--turn-allow-peer", "10.1.0.0/16"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TURN != "127.0.0.1:5000" || cfg.TURNSecret != "from-env-secret!" || cfg.TURNRelayPorts != "40000-40100" {
		t.Errorf("env: %q %q %q", cfg.TURN, cfg.TURNSecret, cfg.TURNRelayPorts)
	}
	if strings.Join(cfg.TURNURLs, " ") != "turns:c.example:5349 turn:d.example" || strings.Join(cfg.TURNAllowPeers, " ") != "10.1.0.0/16" {
		t.Errorf("flags must beat env: %v %v", cfg.TURNURLs, cfg.TURNAllowPeers)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// Empty turns it off, from the environment as from the flag.
	for _, tc := range []struct{ env, args []string }{{[]string{"EGBE_TURN="}, nil}, {nil, []string{"--turn", ""}}} {
		cfg, err := Load(tc.args, tc.env, io.Discard)
		if err != nil || cfg.TURN != "" {
			t.Errorf("%v %v: turn %q, %v", tc.env, tc.args, cfg.TURN, err)
		}
	}
	// The secret is never read from the file.
	if _, err := Load([]string{"--config", writeFile(t, `{"TURNSecret": "x"}`)}, nil, io.Discard); !errors.Is(err, ErrConfig) {
		t.Errorf("secret in file: %v", err)
	}
	cfg, err = Load([]string{"--config", writeFile(t, `{"turn": "", "turn_urls": ["turn:e.example"]}`)}, nil, io.Discard)
	if err != nil || cfg.TURN != "" || len(cfg.TURNURLs) != 1 {
		t.Errorf("file: %q %v %v", cfg.TURN, cfg.TURNURLs, err)
	}
}
