package signalling

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// realEntries are entries as the relay writes them in a cross-edge session.
func realEntries() []wireEntry {
	return []wireEntry{
		{kind: kindOpen, from: "edge-a", player: "Player1234567", gen: 1, seq: 1,
			sess: []byte(`{"session_id":"pxs_1","streamer_id":"ue-1","codec":"H264","exp_ms":1780000000000}`)},
		{kind: kindFrame, from: "edge-a", player: "Player1234567", gen: 1, seq: 2, data: []byte(`{"type":"subscribe","streamerId":"ue-1"}`)},
		{kind: kindToP, from: "edge-b", player: "Player1234567", gen: 1, seq: 1,
			data: []byte(`{"type":"offer","sdp":"v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n"}`)},
		{kind: kindClose, from: "edge-b", player: "Player1234567", gen: 7, seq: 9, code: 1011, reason: "kicked"},
		{kind: kindGone, from: "edge-a", player: "Player1", gen: 1 << 40, seq: 1 << 50},
		{kind: kindUnsub, from: "edge-b", player: "Player1", gen: 2, seq: 3},
		{kind: kindKilled, from: "edge-b", player: "Player1", gen: 2, seq: 4},
	}
}

func TestRelayEntryRoundTrip(t *testing.T) {
	for _, e := range realEntries() {
		got, err := decodeEntry(appendEntry(nil, e))
		if err != nil {
			t.Fatalf("%c: %v", e.kind, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("%c: decoded %+v, want %+v", e.kind, got, e)
		}
	}
	good := appendEntry(nil, realEntries()[1])
	for name, b := range map[string][]byte{
		"empty":          nil,
		"version":        append([]byte{2}, good[1:]...),
		"kind":           append([]byte{wireVersion, 'Z'}, good[2:]...),
		"truncated":      good[:len(good)-1],
		"trailing":       append(append([]byte(nil), good...), 0),
		"no sender":      appendEntry(nil, wireEntry{kind: kindGone, player: "p"}),
		"huge":           bytes.Repeat([]byte{1}, maxWireEntry+1),
		"length overrun": {wireVersion, kindGone, 1, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
	} {
		if _, err := decodeEntry(b); !errors.Is(err, ErrBadRelayEntry) {
			t.Errorf("%s: %v, want ErrBadRelayEntry", name, err)
		}
	}
}

// FuzzRelayEntry: any bytes decode to an entry or a typed error, and an
// entry that decodes re-encodes to the same bytes.
func FuzzRelayEntry(f *testing.F) {
	for _, e := range realEntries() {
		f.Add(appendEntry(nil, e))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(b)
		if err != nil {
			if !errors.Is(err, ErrBadRelayEntry) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if again := appendEntry(nil, e); !bytes.Equal(again, b) {
			// Varints have one canonical form only when minimal: accept
			// a re-encoding that decodes to the same entry.
			if e2, err := decodeEntry(again); err != nil || !reflect.DeepEqual(e2, e) {
				t.Fatalf("re-encoding %x of %+v decodes to %+v, %v", again, e, e2, err)
			}
		}
	})
}
