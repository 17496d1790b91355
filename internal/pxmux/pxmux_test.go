package pxmux

import (
	"bytes"
	"errors"
	"testing"
)

func TestFrameRoundTrip(t *testing.T) {
	msg := EncodeString(UIInteraction, `"tab-0"`)
	f := Frame("Player12", msg)
	// 199 | 16 bytes of UTF-16LE "Player12" | the message
	if f[0] != 199 || f[1] != 16 || f[2] != 0 || string(f[3:5]) != "P\x00" || !bytes.Equal(f[19:], msg) {
		t.Fatalf("frame % x", f)
	}
	typ, id, rest, err := Parse(f)
	if err != nil || typ != Multiplexed || id != "Player12" || !bytes.Equal(rest, msg) {
		t.Fatalf("%d %q % x %v", typ, id, rest, err)
	}
	s, err := DecodeString(UIInteraction, rest)
	if err != nil || s != `"tab-0"` {
		t.Fatalf("%q %v", s, err)
	}
	st := Status("Player12", true)
	if typ, id, rest, err := Parse(st); err != nil || typ != RelayStatus || id != "Player12" || !bytes.Equal(rest, []byte{1}) {
		t.Fatalf("status %d %q % x %v", typ, id, rest, err)
	}
	if r, err := DecodeResponse(EncodeResponse("echo é")); err != nil || r != "echo é" {
		t.Fatalf("%q %v", r, err)
	}
}

func TestParseRefusals(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":        nil,
		"short":        {199, 2},
		"type":         {50, 0, 0},
		"odd length":   {199, 3, 0, 'a', 0, 'b'},
		"past the end": {199, 8, 0, 'a', 0},
		"status size":  append(Status("P", true), 1),
		"huge id":      {199, 0xff, 0xff},
	} {
		if _, _, _, err := Parse(b); !errors.Is(err, ErrShort) && !errors.Is(err, ErrType) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := DecodeString(UIInteraction, []byte{UIInteraction, 5, 0, 'a'}); !errors.Is(err, ErrShort) {
		t.Errorf("string past the end: %v", err)
	}
	if _, err := DecodeResponse([]byte{Response, 'a'}); !errors.Is(err, ErrType) {
		t.Errorf("odd response: %v", err)
	}
}

// FuzzParse: no frame panics Parse; what parses re-frames to itself.
func FuzzParse(f *testing.F) {
	f.Add(Frame("Player0", EncodeString(UIInteraction, `"hello"`)))
	f.Add(Status("Player7", false))
	f.Add([]byte{199, 0, 0})
	f.Add([]byte{198, 2, 0, 'x', 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, id, rest, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrShort) && !errors.Is(err, ErrType) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		var again []byte
		if typ == Multiplexed {
			again = Frame(id, rest)
		} else {
			again = Status(id, rest[0] != 0)
		}
		if _, id2, rest2, err := Parse(again); err != nil || id2 != id || !bytes.Equal(rest2, rest) && typ == Multiplexed {
			t.Fatalf("re-frame %q % x: %q % x %v", id, rest, id2, rest2, err)
		}
		_, _ = DecodeString(UIInteraction, rest)
		_, _ = DecodeResponse(rest)
	})
}
