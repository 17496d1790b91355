package bench

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/oshun/egbe-edge/codec"
)

// The lean client's encoders produce what the edge decodes, and its
// parser reads what the edge's encoders (and the generated code) write.
func TestLeanWireAgreesWithCodec(t *testing.T) {
	var m codec.ClientMsg
	if err := codec.DecodeClientMsg(appendPresenceEnvelope(nil, 7, -12_345, 67_890, 1_700_000_000_123), false, &m); err != nil {
		t.Fatal(err)
	}
	if m.Kind != codec.ClientPresenceKind || m.Presence.Seq != 7 || m.Presence.Position.X != -12_345 ||
		m.Presence.Position.Y != 67_890 || m.Presence.ClientTimeMs != 1_700_000_000_123 {
		t.Fatalf("presence decodes as %+v", m.Presence)
	}
	if err := codec.DecodeClientMsg(appendAckEnvelope(nil, 4411), false, &m); err != nil || m.Kind != codec.ClientAckKind || m.AckSeq != 4411 {
		t.Fatalf("ack decodes as kind %v seq %d, %v", m.Kind, m.AckSeq, err)
	}

	ents := []codec.Entity{{ID: 3, Kind: 1, X: 10, Y: -20}, {ID: 0, Kind: 2}, {ID: 900_000, Kind: 1, Z: 5}}
	var lm leanMsg
	if err := parseServer(codec.AppendSnapshotEnvelope(nil, "orun-grove", 41, 1234, ents), &lm); err != nil {
		t.Fatal(err)
	}
	if lm.kind != 2 || lm.seq != 41 || lm.stm != 1234 || !slices.Equal(lm.ids, []uint32{3, 0, 900_000}) {
		t.Fatalf("snapshot parsed as %+v", lm)
	}
	if err := parseServer(codec.AppendDeltaEnvelope(nil, "orun-grove", 40, 42, 1300, ents[:1], []uint32{8, 9}), &lm); err != nil {
		t.Fatal(err)
	}
	if lm.kind != 3 || lm.base != 40 || lm.seq != 42 || lm.stm != 1300 || !slices.Equal(lm.ids, []uint32{3}) || !slices.Equal(lm.removed, []uint32{8, 9}) {
		t.Fatalf("delta parsed as %+v", lm)
	}
	b, _ := proto.Marshal(&codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Error{Error: &codec.Error{Code: "draining", Message: "bye"}}})
	if err := parseServer(b, &lm); err != nil || lm.kind != 7 || lm.errText != "draining bye" {
		t.Fatalf("error parsed as %+v, %v", lm, err)
	}
	if err := parseServer([]byte{0x1a, 0x05, 0x01}, &lm); err == nil {
		t.Fatal("a truncated delta parsed")
	}
	pong, _ := proto.Marshal(&codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Pong{Pong: &codec.Pong{ClientTimeMs: 99, ServerTimeMs: 5}}})
	if id, ok := timeField(pong, 9); !ok || id != 99 {
		t.Fatalf("pong id %d %v", id, ok)
	}
	var lw leanWS
	lw.encodePing(7)
	var cm codec.ClientMsg
	if err := codec.DecodeClientMsg(lw.wbuf, false, &cm); err != nil || cm.Kind != codec.ClientPingKind || cm.PingTimeMs != 7 {
		t.Fatalf("ping decodes as kind %v time %d, %v", cm.Kind, cm.PingTimeMs, err)
	}
	if id, ok := timeField(lw.wbuf, 6); !ok || id != 7 {
		t.Fatalf("ping id %d %v", id, ok)
	}
	if got := applyIDs(nil, []uint32{1, 2, 3, 4}, []uint32{2, 7}, []uint32{4}); !slices.Equal(got, []uint32{1, 3, 2, 7}) {
		t.Fatalf("applyIDs = %v", got)
	}
}
