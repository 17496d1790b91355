package signalling

import (
	"encoding/json"
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
