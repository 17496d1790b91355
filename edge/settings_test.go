package edge

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the README's settings table from the settings table")

// TestSettingsTable: every Config field is exactly one setting; no two
// settings share a flag, variable or file key; secrets have neither a
// flag nor a file key; every setting has help.
func TestSettingsTable(t *testing.T) {
	var c Config
	fields := map[uintptr]string{}
	rt := reflect.TypeOf(c)
	base := reflect.ValueOf(&c).Pointer()
	for i := 0; i < rt.NumField(); i++ {
		if f := rt.Field(i); f.IsExported() {
			fields[base+f.Offset] = f.Name
		}
	}
	seen := map[string]string{}
	claim := func(kind, name, by string) {
		if name == "" {
			return
		}
		if other, dup := seen[kind+name]; dup {
			t.Errorf("%s %q belongs to %s and %s", kind, name, other, by)
		}
		seen[kind+name] = by
	}
	for _, s := range settings {
		p := reflect.ValueOf(s.field(&c)).Pointer()
		name, ok := fields[p]
		if !ok {
			t.Errorf("setting %+v points at no exported Config field (or one already claimed)", s.help)
			continue
		}
		delete(fields, p)
		claim("flag", s.flag, name)
		claim("env", s.env, name)
		claim("key", s.key, name)
		if s.help == "" || s.group == "" {
			t.Errorf("%s: help and group are required", name)
		}
		if s.secret && (s.flag != "" || s.key != "" || s.env == "") {
			t.Errorf("%s: a secret comes from the environment only", name)
		}
		if s.flag == "" && s.env == "" && s.key == "" {
			t.Errorf("%s: no way to set it", name)
		}
	}
	for _, name := range fields {
		t.Errorf("Config.%s has no setting", name)
	}
}

// sample is a value of dst's kind: its text form (flag and variable) and
// its JSON form (file), different for each of the three sources.
func sample(dst any, n int) (text, js string) {
	switch dst.(type) {
	case *string:
		return fmt.Sprintf("v%d", n), fmt.Sprintf(`"v%d"`, n)
	case *int:
		return fmt.Sprint(n), fmt.Sprint(n)
	case *bool:
		if n%2 == 0 {
			return "false", "false"
		}
		return "true", "true"
	case *Duration:
		return fmt.Sprintf("%ds", n), fmt.Sprintf(`"%ds"`, n)
	case *[]string:
		return fmt.Sprintf("a%d", n), fmt.Sprintf(`["a%d"]`, n)
	case *map[string]string:
		return fmt.Sprintf("k=v%d", n), fmt.Sprintf(`{"k":"v%d"}`, n)
	}
	return "", ""
}

// TestEverySettingPrecedence: each setting, from each of its sources, lands
// in its field, with file < environment < flag.
func TestEverySettingPrecedence(t *testing.T) {
	for _, s := range settings {
		name := s.flag + s.env + s.key
		t.Run(name, func(t *testing.T) {
			want := func(cfg *Config, text string) {
				t.Helper()
				var exp Config
				if err := setFromEnv(s.field(&exp), text); err != nil {
					t.Fatal(err)
				}
				if got, w := reflect.ValueOf(s.field(cfg)).Elem().Interface(), reflect.ValueOf(s.field(&exp)).Elem().Interface(); !reflect.DeepEqual(got, w) {
					t.Fatalf("got %#v, want %#v", got, w)
				}
			}
			fileText, fileJSON := sample(s.field(&Config{}), 1)
			envText, _ := sample(s.field(&Config{}), 2)
			flagText, _ := sample(s.field(&Config{}), 3)
			var args, env []string
			if s.key != "" && fileJSON != "" {
				args = append(args, "--config", writeFile(t, fmt.Sprintf(`{%q: %s}`, s.key, fileJSON)))
				cfg, err := Load(args, nil, io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				want(&cfg, fileText)
			}
			if s.env != "" {
				env = []string{s.env + "=" + envText}
				cfg, err := Load(args, env, io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				want(&cfg, envText)
			}
			if s.flag != "" {
				cfg, err := Load(append(args, "--"+s.flag+"="+flagText), env, io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				want(&cfg, flagText)
			}
		})
	}
}

// TestRepeatableFlags: a repeated flag collects, and replaces what the
// environment said.
func TestRepeatableFlags(t *testing.T) {
	cfg, err := Load([]string{"--shard", "a=1.2.3.4:7400", "--shard", "b=1.2.3.5:7400", "--public-ip", "10.0.0.1", "--public-ip", "10.0.0.2"},
		[]string{"EGBE_SHARDS=c=9.9.9.9:7400", "EGBE_PUBLIC_IPS=10.9.9.9"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Shards) != 2 || cfg.Shards["b"] != "1.2.3.5:7400" || strings.Join(cfg.PublicIPs, " ") != "10.0.0.1 10.0.0.2" {
		t.Fatalf("shards %v ips %v", cfg.Shards, cfg.PublicIPs)
	}
	cfg, err = Load([]string{"--dev-shard=false"}, nil, io.Discard)
	if err != nil || cfg.DevShard {
		t.Fatalf("--dev-shard=false: %v %v", cfg.DevShard, err)
	}
}

// TestHelpFlag: -h and --help are flag.ErrHelp, not a configuration error.
func TestHelpFlag(t *testing.T) {
	for _, a := range []string{"-h", "--help", "-help"} {
		if _, err := Load([]string{a}, nil, io.Discard); !errors.Is(err, flag.ErrHelp) || errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", a, err)
		}
	}
}

// TestModeDefaults: prod flips the mode-dependent defaults unless a source
// chose them.
func TestModeDefaults(t *testing.T) {
	cfg, err := Load([]string{"--mode", "prod"}, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DevShard || cfg.PxstreamAuth != "token" || cfg.LogFormat != "json" {
		t.Fatalf("prod defaults: dev shard %v, pxstream auth %q, log format %q", cfg.DevShard, cfg.PxstreamAuth, cfg.LogFormat)
	}
	cfg, err = Load([]string{"--mode", "prod", "--config", writeFile(t, `{"log_format": "text", "pxstream_auth": "none"}`)}, []string{"EGBE_DEV_SHARD=true"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.DevShard || cfg.PxstreamAuth != "none" || cfg.LogFormat != "text" {
		t.Fatalf("chosen values lost: dev shard %v, pxstream auth %q, log format %q", cfg.DevShard, cfg.PxstreamAuth, cfg.LogFormat)
	}
}

// TestReadmeSettings: the README's settings table is the one the settings
// table writes (go test ./edge -run TestReadmeSettings -update rewrites it).
func TestReadmeSettings(t *testing.T) {
	const path = "../README.md"
	const begin, end = "<!-- settings:begin (go test ./edge -run TestReadmeSettings -update) -->\n", "<!-- settings:end -->"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("README.md has no %q ... %q block", begin, end)
	}
	want := settingsMarkdown()
	if got := s[i+len(begin) : j]; got != want {
		if *update {
			if err := os.WriteFile(path, []byte(s[:i+len(begin)]+want+s[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Fatalf("README.md's settings table is stale: go test ./edge -run TestReadmeSettings -update")
	}
}

// TestProdRefusesWeakSecrets: through Load and Validate, as the binary
// runs them.
func TestProdRefusesWeakSecrets(t *testing.T) {
	base := []string{"--mode", "prod", "--tls-cert", "c", "--tls-key", "k"}
	for name, env := range map[string][]string{
		"jwt placeholder":  {"EGBE_JWT_SECRET=REPLACE-ME-openssl-rand-base64-48", "EGBE_TURN_SECRET=" + testTURNSecret},
		"jwt repeated":     {"EGBE_JWT_SECRET=" + strings.Repeat("ab", 20), "EGBE_TURN_SECRET=" + testTURNSecret},
		"turn placeholder": {"EGBE_JWT_SECRET=" + testJWTSecret, "EGBE_TURN_SECRET=REPLACE-ME-openssl-rand-base64-32"},
		"link placeholder": {"EGBE_JWT_SECRET=" + testJWTSecret, "EGBE_TURN_SECRET=" + testTURNSecret, "EGBE_LINK_TOKEN=REPLACE-ME-openssl-rand-base64-32"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := Load(base, env, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "not a random secret") {
				t.Fatalf("want a weak-secret refusal, got %v", err)
			}
		})
	}
	cfg, err := Load(base, []string{"EGBE_JWT_SECRET=" + testJWTSecret, "EGBE_TURN_SECRET=" + testTURNSecret, "EGBE_LINK_TOKEN=" + testTURNSecret}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("random secrets refused: %v", err)
	}
	// Dev does not care: it runs with whatever it is given.
	dev, err := Load(nil, []string{"EGBE_JWT_SECRET=" + strings.Repeat("s", 32)}, io.Discard)
	if err != nil || dev.Validate() != nil {
		t.Fatalf("dev: %v %v", err, dev.Validate())
	}
}

// TestRedactArgs: /debug/pprof/cmdline shows no password, in any URL form
// the edge accepts.
func TestRedactArgs(t *testing.T) {
	in := []string{"egbe-edge", "--redis-url", "redis://:hunter2@10.0.0.1:6379/0", "--redis-url=rediss://u:hunter2@h:6380",
		"-redis-url=redis+sentinel://u:hunter2@s1:26379,s2:26379/master?sentinel_password=hunter2&dial_timeout=1s",
		"--redis-url", "redis+cluster://:hunter2@h1:7000,h2:7001", "--http", ":8080", "--turn-url", "turn:t.example:3478"}
	out := strings.Join(redactArgs(in), " ")
	if strings.Contains(out, "hunter2") {
		t.Fatalf("password left: %s", out)
	}
	for _, keep := range []string{"redis://:xxxxx@10.0.0.1:6379/0", "rediss://u:xxxxx@h:6380", "s1:26379,s2:26379/master?sentinel_password=xxxxx&dial_timeout=1s",
		"redis+cluster://:xxxxx@h1:7000,h2:7001", "--http :8080", "turn:t.example:3478"} {
		if !strings.Contains(out, keep) {
			t.Errorf("%q missing from %s", keep, out)
		}
	}
}

// TestDurationsInFile: drain_window reads "20s", as the example edge.json
// writes it.
func TestDurationsInFile(t *testing.T) {
	cfg, err := Load([]string{"--config", writeFile(t, `{"drain_window": "20s"}`)}, nil, io.Discard)
	if err != nil || time.Duration(cfg.DrainWindow) != 20*time.Second {
		t.Fatalf("%v %v", cfg.DrainWindow, err)
	}
}

// settingsMarkdown is the README's settings table.
func settingsMarkdown() string {
	var b strings.Builder
	b.WriteString("| flag | variable | file key | default | what |\n|---|---|---|---|---|\n")
	code := func(s string) string {
		if s == "" {
			return ""
		}
		return "`" + s + "`"
	}
	group := ""
	for i := range settings {
		s := &settings[i]
		if s.group != group {
			group = s.group
			fmt.Fprintf(&b, "| **%s** | | | | |\n", group)
		}
		f := ""
		if s.flag != "" {
			f = "--" + s.flag
			if s.arg != "" {
				f += " " + s.arg
			}
		}
		def := s.defaultText()
		if s.def == "" {
			def = code(def)
		}
		help := strings.ReplaceAll(s.help, "|", `\|`)
		if s.secret {
			help = "environment only: " + help
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", code(f), code(s.env), code(s.key), def, help)
	}
	return b.String()
}

// fileKeys lists every key the config file accepts.
func fileKeys() []string {
	var out []string
	for i := range settings {
		if settings[i].key != "" && !settings[i].secret {
			out = append(out, settings[i].key)
		}
	}
	return out
}
