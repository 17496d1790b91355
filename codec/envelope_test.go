package codec

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

var update = flag.Bool("update", false, "rewrite codec/testdata/*.golden")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./codec/ -update to create)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden:\n got: %s\nwant: %s", name, got, want)
	}
}

// hexLines renders b as lowercase hex, 32 bytes a line.
func hexLines(b []byte) []byte {
	var sb strings.Builder
	h := hex.EncodeToString(b)
	for len(h) > 64 {
		sb.WriteString(h[:64] + "\n")
		h = h[64:]
	}
	sb.WriteString(h + "\n")
	return []byte(sb.String())
}

func unhexLines(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.Join(strings.Fields(string(raw)), ""))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return b
}

// compactJSON strips protojson's deliberately unstable whitespace.
func compactJSON(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("compact %q: %v", b, err)
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

func TestClientEnvelopeGolden(t *testing.T) {
	for _, tc := range sampleClient() {
		t.Run(tc.name, func(t *testing.T) {
			bin, err := EncodeClient(nil, tc.env, false)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".pb.golden", hexLines(bin))
			js, err := EncodeClient(nil, tc.env, true)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".json.golden", compactJSON(t, js))
			if *update {
				return
			}
			// The golden bytes decode back to the sample, on both lanes.
			var got ClientEnvelope
			if err := DecodeClient(unhexLines(t, tc.name+".pb.golden"), false, &got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got, tc.env) {
				t.Errorf("binary golden decodes to %v, want %v", &got, tc.env)
			}
			gj, err := os.ReadFile(filepath.Join("testdata", tc.name+".json.golden"))
			if err != nil {
				t.Fatal(err)
			}
			if err := DecodeClient(gj, true, &got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got, tc.env) {
				t.Errorf("json golden decodes to %v, want %v", &got, tc.env)
			}
		})
	}
}

func TestServerEnvelopeGolden(t *testing.T) {
	for _, tc := range sampleServer() {
		t.Run(tc.name, func(t *testing.T) {
			bin, err := EncodeServer(nil, tc.env, false)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".pb.golden", hexLines(bin))
			js, err := EncodeServer(nil, tc.env, true)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".json.golden", compactJSON(t, js))
			if *update {
				return
			}
			var got ServerEnvelope
			if err := DecodeServer(unhexLines(t, tc.name+".pb.golden"), false, &got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got, tc.env) {
				t.Errorf("binary golden decodes to %v, want %v", &got, tc.env)
			}
			gj, err := os.ReadFile(filepath.Join("testdata", tc.name+".json.golden"))
			if err != nil {
				t.Fatal(err)
			}
			if err := DecodeServer(gj, true, &got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&got, tc.env) {
				t.Errorf("json golden decodes to %v, want %v", &got, tc.env)
			}
		})
	}
}

func TestJSONFieldNames(t *testing.T) {
	// The JSON lane's documented shape, as the demo page writes it.
	in := `{"hello":{"accessToken":"t","instanceId":"orun-grove-1","authorityKind":"TIER2_FALLBACK","protocolVersion":1,"capabilities":["deltas"],"rendererProfile":{"renderer":"WEBGPU"}}}`
	var env ClientEnvelope
	if err := DecodeClient([]byte(in), true, &env); err != nil {
		t.Fatal(err)
	}
	h := env.GetHello()
	if h.GetAccessToken() != "t" || h.GetInstanceId() != "orun-grove-1" || h.GetAuthorityKind() != AuthorityKind_TIER2_FALLBACK ||
		h.GetProtocolVersion() != 1 || h.GetRendererProfile().GetRenderer() != Renderer_WEBGPU {
		t.Fatalf("decoded %v", h)
	}
	// snake_case input is accepted too (protojson's rule).
	if err := DecodeClient([]byte(`{"hello":{"access_token":"t","instance_id":"i"}}`), true, &env); err != nil {
		t.Fatal(err)
	}
}

func TestDecodeErrors(t *testing.T) {
	big := make([]byte, MaxMessageSize+1)
	tests := []struct {
		name     string
		in       []byte
		json     bool
		sentinel error
		code     Code
	}{
		{"binary garbage", []byte{0xff, 0xff, 0xff}, false, ErrMalformed, CodeBadMessage},
		{"binary truncated", []byte{0x0a, 0x05, 0x0a}, false, ErrMalformed, CodeBadMessage},
		{"binary empty", nil, false, ErrMalformed, CodeBadMessage},
		{"binary unknown field only", []byte{0xf8, 0x01, 0x01}, false, ErrMalformed, CodeBadMessage}, // field 31 varint
		{"binary invalid utf8", []byte{0x0a, 0x04, 0x0a, 0x02, 0xc3, 0x28}, false, ErrMalformed, CodeBadMessage},
		{"binary too large", big, false, ErrFrameTooLarge, CodeFrameTooLarge},
		{"json syntax", []byte(`{"hello":`), true, ErrMalformed, CodeBadMessage},
		{"json unknown field", []byte(`{"hello":{"accessTokn":"t"}}`), true, ErrMalformed, CodeBadMessage},
		{"json empty object", []byte(`{}`), true, ErrMalformed, CodeBadMessage},
		{"json wrong type", []byte(`{"ack":{"snapshotSequence":true}}`), true, ErrMalformed, CodeBadMessage},
		{"json too large", big, true, ErrFrameTooLarge, CodeFrameTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c ClientEnvelope
			err := DecodeClient(tc.in, tc.json, &c)
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("DecodeClient err = %v, want %v", err, tc.sentinel)
			}
			if CodeOf(err) != tc.code {
				t.Fatalf("DecodeClient code = %q, want %q", CodeOf(err), tc.code)
			}
			var s ServerEnvelope
			if err := DecodeServer(tc.in, tc.json, &s); !errors.Is(err, tc.sentinel) {
				t.Fatalf("DecodeServer err = %v, want %v", err, tc.sentinel)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	tests := []struct {
		name     string
		env      *ServerEnvelope
		sentinel error
	}{
		{"nil", nil, ErrMalformed},
		{"empty", &ServerEnvelope{}, ErrMalformed},
		{"invalid utf8", &ServerEnvelope{Msg: &ServerEnvelope_Error{Error: &Error{Code: "\xc3\x28"}}}, ErrMalformed},
		{"too large", &ServerEnvelope{Msg: &ServerEnvelope_Event{Event: &WorldEvent{Payload: make([]byte, MaxMessageSize)}}}, ErrFrameTooLarge},
	}
	for _, tc := range tests {
		for _, js := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				dst := []byte("prefix")
				out, err := EncodeServer(dst, tc.env, js)
				if !errors.Is(err, tc.sentinel) {
					t.Fatalf("json=%v: err = %v, want %v", js, err, tc.sentinel)
				}
				if string(out) != "prefix" {
					t.Fatalf("json=%v: dst changed on error: %q", js, out)
				}
			})
		}
	}
	if _, err := EncodeClient(nil, &ClientEnvelope{}, false); !errors.Is(err, ErrMalformed) {
		t.Fatalf("EncodeClient(empty) = %v", err)
	}
}

func TestEncodeAppends(t *testing.T) {
	env := sampleServer()[0].env
	want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(env)
	got, err := EncodeServer([]byte{0xaa}, env, false)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 0xaa || !bytes.Equal(got[1:], want) {
		t.Fatalf("EncodeServer does not append: %x", got)
	}
}

// The decoders replace (not merge into) the target.
func TestDecodeReplaces(t *testing.T) {
	env := &ClientEnvelope{Msg: &ClientEnvelope_Ack{Ack: &Ack{SnapshotSequence: 9}}}
	b, _ := EncodeClient(nil, &ClientEnvelope{Msg: &ClientEnvelope_Ping{Ping: &Ping{ClientTimeMs: 5}}}, false)
	if err := DecodeClient(b, false, env); err != nil {
		t.Fatal(err)
	}
	if env.GetAck() != nil || env.GetPing().GetClientTimeMs() != 5 {
		t.Fatalf("decode merged: %v", env)
	}
}

func fuzzSeedsClient(f *testing.F) {
	for _, tc := range sampleClient() {
		b, err := EncodeClient(nil, tc.env, false)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		j, err := EncodeClient(nil, tc.env, true)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(j, true)
	}
	f.Add([]byte{}, false)
	f.Add([]byte(`{}`), true)
}

func FuzzDecodeClient(f *testing.F) {
	fuzzSeedsClient(f)
	f.Fuzz(func(t *testing.T, b []byte, js bool) {
		var env ClientEnvelope
		if err := DecodeClient(b, js, &env); err != nil {
			if CodeOf(err) != CodeBadMessage && CodeOf(err) != CodeFrameTooLarge {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// Whatever decodes re-encodes and decodes to the same message, on
		// either lane.
		for _, out := range []bool{false, true} {
			re, err := EncodeClient(nil, &env, out)
			if err != nil {
				if errors.Is(err, ErrFrameTooLarge) {
					continue // JSON can outgrow a binary envelope near the limit
				}
				t.Fatalf("re-encode json=%v: %v", out, err)
			}
			var back ClientEnvelope
			if err := DecodeClient(re, out, &back); err != nil {
				t.Fatalf("re-decode json=%v: %v", out, err)
			}
			if !out && !proto.Equal(&env, &back) {
				t.Fatalf("binary round trip changed %v to %v", &env, &back)
			}
		}
	})
}

func FuzzDecodeServer(f *testing.F) {
	for _, tc := range sampleServer() {
		b, err := EncodeServer(nil, tc.env, false)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		j, err := EncodeServer(nil, tc.env, true)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(j, true)
	}
	f.Add(AppendDeltaEnvelope(nil, "i", 1, 2, 3, sampleEntities(), []uint32{1, 2, 3}), false)
	f.Fuzz(func(t *testing.T, b []byte, js bool) {
		var env ServerEnvelope
		if err := DecodeServer(b, js, &env); err != nil {
			if CodeOf(err) != CodeBadMessage && CodeOf(err) != CodeFrameTooLarge {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		re, err := EncodeServer(nil, &env, false)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var back ServerEnvelope
		if err := DecodeServer(re, false, &back); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !proto.Equal(&env, &back) {
			t.Fatalf("round trip changed %v to %v", &env, &back)
		}
		// A decoded snapshot or delta goes through the hot-path types and
		// the hand-written encoder without surprises.
		if s := env.GetSnapshot(); s != nil {
			var w World
			w.FromSnapshot(s)
			_ = AppendSnapshotEnvelope(nil, w.InstanceID, w.Sequence, w.ServerTimeMs, w.Entities)
		}
		if d := env.GetDelta(); d != nil {
			var w World
			_ = w.ApplyDelta(d)
		}
	})
}
