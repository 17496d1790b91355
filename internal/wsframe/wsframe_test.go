package wsframe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gorilla/websocket"
)

// masked turns a server frame (AppendHeader's) into the client frame with
// the same payload masked with key.
func masked(op byte, fin bool, payload []byte, key [4]byte) []byte {
	b := AppendHeader(nil, op, len(payload))
	if !fin {
		b[0] &^= Fin
	}
	b[1] |= MaskBit
	b = append(b, key[:]...)
	start := len(b)
	b = append(b, payload...)
	Unmask(key, 0, b[start:])
	return b
}

func TestParseHeaderRoundTrip(t *testing.T) {
	key := [4]byte{9, 8, 7, 6}
	for _, n := range []int{0, 1, 125, 126, 127, 0xFFFF, 0x10000, 1 << 20} {
		payload := bytes.Repeat([]byte{'x'}, n)
		f := masked(OpText, true, payload, key)
		// Every prefix shorter than the header asks for more.
		size := len(f) - n
		for i := range size {
			h, need, err := ParseHeader(f[:i])
			if err != nil || need <= i || need > size || h.Size != 0 {
				t.Fatalf("n=%d prefix %d: need %d err %v", n, i, need, err)
			}
		}
		h, need, err := ParseHeader(f)
		if err != nil || need != 0 {
			t.Fatalf("n=%d: need %d err %v", n, need, err)
		}
		if !h.Fin || h.Op != OpText || h.Length != int64(n) || h.Mask != key || h.Size != size || HeaderLen(n)+4 != size {
			t.Fatalf("n=%d: %+v (HeaderLen %d)", n, h, HeaderLen(n))
		}
		p := f[h.Size:]
		Unmask(h.Mask, 0, p)
		if !bytes.Equal(p, payload) {
			t.Fatalf("n=%d: payload not restored", n)
		}
	}
}

func TestParseHeaderErrors(t *testing.T) {
	key := [4]byte{1, 2, 3, 4}
	long := []byte{Fin | OpBinary, MaskBit | 127}
	long = binary.BigEndian.AppendUint64(long, 1<<63)
	long = append(long, key[:]...)
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"unmasked", []byte{Fin | OpBinary, 2, 'h', 'i'}},
		{"reserved bit", append([]byte{0x40 | Fin | OpBinary}, masked(OpBinary, true, []byte("x"), key)[1:]...)},
		{"unknown opcode", masked(0x3, true, []byte("x"), key)},
		{"fragmented ping", masked(OpPing, false, nil, key)},
		{"oversized close", masked(OpClose, true, make([]byte, 126), key)},
		{"2^63 bytes", long},
	} {
		_, _, err := ParseHeader(tc.frame)
		var pe *ProtocolError
		if !errors.As(err, &pe) || pe.Code != CloseProtocol || !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestUnmaskAnyOffset(t *testing.T) {
	key := [4]byte{1, 2, 3, 4}
	want := make([]byte, 37)
	for i := range want {
		want[i] = byte(i) ^ key[i%4]
	}
	for split := range 37 {
		b := make([]byte, 37)
		for i := range b {
			b[i] = byte(i)
		}
		pos := Unmask(key, 0, b[:split])
		Unmask(key, pos, b[split:])
		if !bytes.Equal(b, want) {
			t.Fatalf("split at %d: %v", split, b)
		}
	}
}

func TestClose(t *testing.T) {
	for _, tc := range []struct {
		body []byte
		code int
		err  int // close code of the *ProtocolError; 0: none
	}{
		{nil, CloseNoStatus, 0},
		{[]byte{0x03}, 0, CloseProtocol},
		{[]byte{0x03, 0xE8, 'o', 'k'}, 1000, 0},
		{[]byte{0x0F, 0xA0}, 4000, 0},
		{[]byte{0x03, 0xED}, 0, CloseProtocol}, // 1005 is never sent
		{[]byte{0x00, 0x10}, 0, CloseProtocol},
		{[]byte{0x03, 0xE8, 0xff}, 0, CloseInvalidUTF8},
	} {
		code, err := ParseClose(tc.body)
		var pe *ProtocolError
		switch {
		case tc.err == 0 && (err != nil || code != tc.code):
			t.Errorf("%x: %d %v", tc.body, code, err)
		case tc.err != 0 && (!errors.As(err, &pe) || pe.Code != tc.err):
			t.Errorf("%x: %v, want code %d", tc.body, err, tc.err)
		}
	}
	// AppendClose: empty for 1005; a long reason is cut on a rune boundary
	// to fit a control frame, and gorilla's client reads what it wrote.
	if b := AppendClose(nil, CloseNoStatus, "x"); !bytes.Equal(b, []byte{Fin | OpClose, 0}) {
		t.Fatalf("1005: %x", b)
	}
	reason := strings.Repeat("é", 100)
	b := AppendClose(nil, 1011, reason)
	if len(b) > 2+MaxControl || !utf8.Valid(b[4:]) || !strings.HasPrefix(reason, string(b[4:])) {
		t.Fatalf("cut reason: %d bytes %q", len(b), b[4:])
	}
	code, err := ParseClose(b[2:])
	if err != nil || code != 1011 {
		t.Fatalf("read back %d %v", code, err)
	}
	if ce := websocket.FormatCloseMessage(1011, string(b[4:])); !bytes.Equal(ce, b[2:]) {
		t.Fatalf("body %x, gorilla's %x", b[2:], ce)
	}
}

// FuzzParseHeader: any bytes give a header within them, a need beyond
// them, or a typed error; never a panic.
func FuzzParseHeader(f *testing.F) {
	key := [4]byte{1, 2, 3, 4}
	f.Add(masked(OpText, true, []byte(`{"type":"ping"}`), key))
	f.Add(masked(OpClose, true, []byte{0x03, 0xE8}, key))
	f.Add(masked(OpBinary, false, make([]byte, 300), key))
	f.Add(masked(OpText, true, make([]byte, 70000), key)[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		h, need, err := ParseHeader(b)
		switch {
		case err != nil:
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("untyped %v", err)
			}
		case need > 0:
			if need <= len(b) || need > 14 {
				t.Fatalf("need %d with %d bytes", need, len(b))
			}
		default:
			if h.Size < 6 || h.Size > len(b) || h.Length < 0 {
				t.Fatalf("%+v from %d bytes", h, len(b))
			}
		}
	})
}
