package signalling

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// validJSON is json.Valid by validValue: one value, whitespace around.
func validJSON(b []byte) bool {
	i := wsAt(b, 0)
	end, ok := validValue(b, i, 0)
	return ok && wsAt(b, end) == len(b)
}

func jsonSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	seeds := [][]byte{
		[]byte(`{"type":"ping","time":1733150000125}`),
		[]byte(`{"type":"offer","sdp":"v=0\r\n","x":[1,-2.5e+3,0,true,false,null,{},[],{"a":[{}]}],"u":"\u00e9\ud83d"}`),
		[]byte(` [ ] `), []byte(`"\"\\\/\b\f\n\r\t"`), []byte("\"\xff\xfe\""), []byte(`-0.0e-0`),
		[]byte(`{"a":01}`), []byte(`{"a":1,}`), []byte(`[1 2]`), []byte(`{"a" 1}`), []byte(`"\x"`), []byte(`"\u12g4"`),
		[]byte("\"a\x01\""), []byte(`1.`), []byte(`.5`), []byte(`1e`), []byte(`tru`), []byte(`{"a":1}}`), []byte(`}`),
		[]byte(strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)),
		[]byte(strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)),
		[]byte(strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth)),
		[]byte(strings.Repeat(`{"a":`, maxDepth+1) + "1" + strings.Repeat("}", maxDepth+1)),
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "*"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && len(b) < 1<<20 {
			seeds = append(seeds, b)
			for _, line := range strings.Split(string(b), "\n") {
				seeds = append(seeds, []byte(line))
			}
		}
	}
	return seeds
}

func TestValidValueMatchesJSONValid(t *testing.T) {
	for _, b := range jsonSeeds(t) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Errorf("%.80q: validValue %v, json.Valid %v", b, got, want)
		}
		for n := range min(len(b), 300) {
			if got, want := validJSON(b[:n]), json.Valid(b[:n]); got != want {
				t.Errorf("%.80q: validValue %v, json.Valid %v", b[:n], got, want)
			}
		}
	}
}

// FuzzValidValue: validValue accepts exactly what json.Valid accepts.
func FuzzValidValue(f *testing.F) {
	for _, b := range jsonSeeds(f) {
		if len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("%q: validValue %v, json.Valid %v", b, got, want)
		}
	})
}
