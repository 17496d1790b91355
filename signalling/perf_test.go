package signalling

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// The broker's fast paths must produce encoding/json's exact bytes.

func TestAppendQuoteMatchesJSON(t *testing.T) {
	for _, s := range []string{"", "Player0", "DefaultStreamer1", "a b", `q"uote`, `back\slash`,
		"<tag>&amp;", "tab\there", "nl\n", "\x7f", "é", "\u2028", "bad\xffutf8", "emoji 🎮"} {
		t.Run(s, func(t *testing.T) {
			want, _ := json.Marshal(s)
			if got := appendQuote([]byte("x"), s); string(got) != "x"+string(want) {
				t.Fatalf("appendQuote(%q) = %s, want x%s", s, got, want)
			}
		})
	}
}

func FuzzAppendQuote(f *testing.F) {
	for _, s := range []string{"Player1", "S<1>", "\x00", "\u2029"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendQuote(nil, s); string(got) != string(want) {
			t.Fatalf("appendQuote(%q) = %s, want %s", s, got, want)
		}
	})
}

func TestStreamerListMatchesJSON(t *testing.T) {
	ids := []string{"DefaultStreamer", "Free1", "x<y>", "é"}
	want, _ := json.Marshal(map[string]any{"type": "streamerList", "ids": ids})
	// encoding/json sorts map keys: "ids" before "type".
	var a, b any
	_ = json.Unmarshal(want, &a)
	got := msgStreamerList(ids)
	if err := json.Unmarshal(got, &b); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if ga, _ := json.Marshal(a); string(ga) != string(mustMarshal(b)) {
		t.Fatalf("msgStreamerList = %s", got)
	}
	if string(msgStreamerList(nil)) != `{"type":"streamerList","ids":[]}` {
		t.Fatalf("empty list = %s", msgStreamerList(nil))
	}
}

func mustMarshal(v any) []byte { b, _ := json.Marshal(v); return b }

func TestLazyLoggerMatchesWith(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    func(w *bytes.Buffer) slog.Handler
	}{
		{"text", func(w *bytes.Buffer) slog.Handler {
			return slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})
		}},
		{"json", func(w *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(w, nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var eager, lazy bytes.Buffer
			base := func(w *bytes.Buffer) *slog.Logger {
				return slog.New(tc.h(w)).With("component", "signalling")
			}
			args := []any{"role", "player", "player", "Player7", "remote", "127.0.0.1:5000", slog.Int("n", 3)}
			le := base(&eager).With(args...).With("session", "pxs_1")
			ll := lazyLogger(base(&lazy), args...).With("session", "pxs_1")
			for _, l := range []*slog.Logger{le, ll} {
				l.Debug("dropped below info for json")
				l.Info("message ignored", "reason", "bad_json", "bytes", 12)
				l.WithGroup("g").Warn("grouped", "k", "v")
			}
			strip := func(s string) string { // timestamps differ
				var out []string
				for _, line := range strings.Split(s, "\n") {
					if i := strings.Index(line, "level"); i >= 0 {
						line = line[i:]
					}
					out = append(out, line)
				}
				return strings.Join(out, "\n")
			}
			if strip(eager.String()) != strip(lazy.String()) {
				t.Fatalf("eager:\n%s\nlazy:\n%s", eager.String(), lazy.String())
			}
			if lazy.Len() == 0 {
				t.Fatal("nothing logged")
			}
		})
	}
}
