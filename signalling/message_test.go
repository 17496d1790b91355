package signalling

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"
)

// Real Epic UE5.5 messages (lib-pixelstreamingcommon-ue5.5 / UE streamer).
var epicMessages = []string{
	`{"type":"identify"}`,
	`{"type":"config","peerConnectionOptions":{"iceServers":[{"urls":["stun:stun.l.google.com:19302"]}]},"protocolVersion":"1.3.0"}`,
	`{"type":"endpointId","id":"DefaultStreamer","protocolVersion":"1.1.0"}`,
	`{"type":"endpointIdConfirm","committedId":"DefaultStreamer"}`,
	`{"type":"listStreamers"}`,
	`{"type":"streamerList","ids":["DefaultStreamer"]}`,
	`{"type":"subscribe","streamerId":"DefaultStreamer"}`,
	`{"type":"playerConnected","playerId":"Player0","dataChannel":true,"sfu":false}`,
	`{"type":"iceCandidate","candidate":{"candidate":"candidate:1 1 udp 2122260223 10.0.0.5 50000 typ host generation 0 ufrag Xq3b network-id 1","sdpMid":"0","sdpMLineIndex":0,"usernameFragment":"Xq3b"},"playerId":"Player0"}`,
	`{"type":"answer","sdp":"v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n","minBitrateBps":0,"maxBitrateBps":0}`,
	`{"type":"disconnectPlayer","playerId":"Player0","reason":"kicked"}`,
	`{"type":"ping","time":1733150000.125}`,
	`{"type":"pong","time":1733150000125}`,
	`{"type":"streamerIdChanged","newID":"B"}`,
	`{"type":"subscribeFailed","message":"Streamer A is full. Max players = 1."}`,
	`{"type":"layerPreference","spatialLayer":1,"temporalLayer":2,"playerId":"Player0"}`,
	`{"type":"offer","playerId":3,"sdp":"v=0"}`,
	` { "type" : "dataChannelRequest" , "playerId" : "Player1" } `,
	`{"\u0074ype":"offer","playerId":"P","playerId":"Q"}`,
	`null`, `[]`, `{}`, `{"type":7}`, `{"type":"x"`,
}

func ueOffer(t testing.TB) []byte {
	sdp, err := os.ReadFile("testdata/ue_offer.sdp")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"type": "offer", "playerId": "Player0", "sdp": string(sdp), "multiplex": true, "sfu": false})
	return b
}

func TestDecode(t *testing.T) {
	tests := []struct {
		in       string
		wantType string
		wantErr  error
	}{
		{`{"type":"offer","sdp":"x"}`, "offer", nil},
		{` {"sdp":"x" , "type" : "answer"} `, "answer", nil},
		{`{"\u0074ype":"ping"}`, "ping", nil},
		{`{"type":"\u0070ing"}`, "ping", nil},
		{`{"type":"custom","a":{"b":[1,{"c":"}"}]}}`, "custom", nil},
		{`null`, "", ErrNotObject},
		{`"str"`, "", ErrNotObject},
		{`{}`, "", ErrNoType},
		{`{"type":1}`, "", ErrNoType},
		{`{"type":"offer"`, "", ErrBadJSON},
		{``, "", ErrBadJSON},
	}
	for _, tc := range tests {
		var m Message
		err := Decode([]byte(tc.in), &m)
		if !errors.Is(err, tc.wantErr) || m.Type != tc.wantType {
			t.Errorf("Decode(%s) = %q, %v; want %q, %v", tc.in, m.Type, err, tc.wantType, tc.wantErr)
		}
	}
	var m Message
	if err := Decode([]byte(`{"type":"offer","playerId":"P","a":1,"playerId":"Q"}`), &m); err != nil {
		t.Fatal(err)
	}
	if id, _ := m.IDString("playerId"); id != "Q" {
		t.Errorf("last duplicate wins: %q", id)
	}
	if got := string(m.Without("playerId")); got != `{"type":"offer","a":1}` {
		t.Errorf("Without: %s", got)
	}
	if got := string(m.WithString("playerId", "Player1")); got != `{"type":"offer","playerId":"Player1","a":1}` {
		t.Errorf("WithString: %s", got)
	}
}

// TestDecodeAllocs holds the decoder to zero allocations on Epic's types.
func TestDecodeAllocs(t *testing.T) {
	frame := ueOffer(t)
	var m Message
	allocs := testing.AllocsPerRun(100, func() {
		if err := Decode(frame, &m); err != nil || m.Type != typeOffer {
			t.Fatal(err)
		}
		if _, ok := m.Field("playerId"); !ok {
			t.Fatal("no playerId")
		}
	})
	if allocs != 0 {
		t.Fatalf("Decode allocates %v times", allocs)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range epicMessages {
		f.Add([]byte(s))
	}
	f.Add(ueOffer(f))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Message
		err := Decode(b, &m)
		var ref map[string]any
		refErr := json.Unmarshal(b, &ref)
		if err != nil {
			// The decoder may refuse only what encoding/json refuses, what
			// is not an object with a string type, or too many members.
			if refErr == nil && ref != nil {
				if typ, ok := ref["type"].(string); ok && !errors.Is(err, ErrTooManyFields) {
					t.Fatalf("refused %q (type %q): %v", b, typ, err)
				}
			}
			return
		}
		if refErr != nil || ref == nil {
			t.Fatalf("accepted %q that encoding/json refuses: %v", b, refErr)
		}
		if ref["type"] != m.Type {
			t.Fatalf("type %q, encoding/json says %v", m.Type, ref["type"])
		}
		delete(ref, "playerId")
		// A socket's frame header is written from rebuiltLen before the
		// frame is built: it must be exact.
		if n, out := m.rebuiltLen("playerId", nil), m.Without("playerId"); n != len(out) {
			t.Fatalf("rebuiltLen %d, built %d bytes: %q", n, len(out), out)
		}
		if n, out := m.rebuiltLen("playerId", []byte(`"Player7"`)), m.WithString("playerId", "Player7"); n != len(out) {
			t.Fatalf("rebuiltLen %d, built %d bytes: %q", n, len(out), out)
		}
		for _, out := range [][]byte{m.Without("playerId"), m.WithString("playerId", "Player7")} {
			var got map[string]any
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("rebuilt frame %q is bad JSON: %v", out, err)
			}
			if id, ok := got["playerId"]; ok && id != "Player7" {
				t.Fatalf("playerId %v survived in %q", id, out)
			}
			delete(got, "playerId")
			if !reflect.DeepEqual(got, ref) {
				t.Fatalf("rebuilt %q lost fields of %q", out, b)
			}
		}
	})
}

// FuzzInputReport: a worker's egbe.input.stats is accepted only within its
// bounds; nothing panics.
func FuzzInputReport(f *testing.F) {
	f.Add(`{"type":"egbe.input.stats","playerId":"Player3","events":120,"spanMs":10000,"jitterMs":0.4,"mouse":120,"keyboard":0,"motion":60,"zeroInertia":58}`)
	f.Add(`{"type":"egbe.input.stats","playerId":"Player3","events":-1}`)
	f.Add(`{"type":"egbe.input.stats","spanMs":99999999999,"jitterMs":1e309}`)
	f.Add(`{"type":"egbe.input.stats","motion":1,"zeroInertia":2}`)
	f.Fuzz(func(t *testing.T, raw string) {
		r, ok := parseInputReport([]byte(raw))
		if !ok {
			return
		}
		if r.Events < 0 || r.SpanMs < 0 || r.SpanMs > maxReportSpanMs || r.ZeroInertia > r.Motion || r.JitterMs < 0 || r.JitterMs != r.JitterMs {
			t.Fatalf("out-of-bounds report accepted: %+v", r)
		}
	})
}
