package codec

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// clientMsgSeeds are real client envelopes plus the protobuf corner cases
// the hand-written decoder must get right: a repeated singular message
// (merged), a oneof whose last member wins, unknown fields, a known field
// with the wrong wire type.
func clientMsgSeeds(t testing.TB) [][]byte {
	var out [][]byte
	for _, s := range sampleClient() {
		b, err := proto.Marshal(s.env)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	pres := func(p *PresencePacket) []byte {
		b, _ := proto.Marshal(&ClientEnvelope{Msg: &ClientEnvelope_Presence{Presence: p}})
		return b
	}
	ack := func(seq uint64) []byte {
		b, _ := proto.Marshal(&ClientEnvelope{Msg: &ClientEnvelope_Ack{Ack: &Ack{SnapshotSequence: seq}}})
		return b
	}
	hello, _ := proto.Marshal(&ClientEnvelope{Msg: &ClientEnvelope_Hello{Hello: &ClientHello{AccessToken: "t"}}})
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	unknown := protowire.AppendTag(nil, 99, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 5)
	wrongType := protowire.AppendTag(nil, 2, protowire.VarintType) // presence as a varint: unknown
	wrongType = protowire.AppendVarint(wrongType, 1)
	out = append(out,
		cat(pres(&PresencePacket{Seq: 1, Position: &Vec3{XMm: 5}}), pres(&PresencePacket{Position: &Vec3{YMm: -7}, RadiusMm: 9})),
		cat(pres(&PresencePacket{Seq: 1}), ack(4), pres(&PresencePacket{Position: &Vec3{ZMm: 2}})),
		cat(ack(4), ack(9)),
		cat(pres(&PresencePacket{Seq: 3}), hello),
		cat(hello, ack(2)),
		cat(unknown, ack(2), unknown),
		cat(wrongType, ack(3)),
		wrongType,
		unknown,
		pres(&PresencePacket{}),
		pres(&PresencePacket{Position: &Vec3{}, VelocityMmS: &Vec3{XMm: -1, YMm: 1 << 30}, HeadingMdeg: -1 << 31}),
		[]byte{0x12, 0x00},
		[]byte{0x12, 0x02, 0x08},
		[]byte{0xff, 0xff, 0xff, 0xff, 0x0f},
		[]byte{0x0b, 0x0c},
	)
	return out
}

// sameClientMsg reports whether m (DecodeClientMsg's result) says what env
// (proto.Unmarshal's) says.
func sameClientMsg(m *ClientMsg, env *ClientEnvelope) bool {
	switch x := env.Msg.(type) {
	case *ClientEnvelope_Presence:
		return m.Kind == ClientPresenceKind && m.Presence == PresenceFromProto(x.Presence)
	case *ClientEnvelope_Ack:
		return m.Kind == ClientAckKind && m.AckSeq == x.Ack.GetSnapshotSequence()
	case *ClientEnvelope_Ping:
		return m.Kind == ClientPingKind && m.PingTimeMs == x.Ping.GetClientTimeMs()
	case *ClientEnvelope_Hello:
		return m.Kind == ClientHelloKind && proto.Equal(&m.Env, env)
	case *ClientEnvelope_Actions:
		return m.Kind == ClientActionsKind && proto.Equal(&m.Env, env)
	case *ClientEnvelope_Squad:
		return m.Kind == ClientSquadKind && proto.Equal(&m.Env, env)
	case *ClientEnvelope_Voice:
		return m.Kind == ClientVoiceKind && proto.Equal(&m.Env, env)
	}
	return false
}

func checkClientMsg(t *testing.T, b []byte, m *ClientMsg) {
	t.Helper()
	var env ClientEnvelope
	want := DecodeClient(b, false, &env)
	got := DecodeClientMsg(b, false, m)
	switch {
	case (want == nil) != (got == nil):
		t.Fatalf("% x: proto says %v, DecodeClientMsg says %v", b, want, got)
	case got != nil:
		if CodeOf(got) != CodeOf(want) {
			t.Fatalf("% x: code %q, want %q", b, CodeOf(got), CodeOf(want))
		}
	case !sameClientMsg(m, &env):
		t.Fatalf("% x: decoded %+v, proto %v", b, m.Presence, &env)
	}
}

func TestDecodeClientMsgMatchesProto(t *testing.T) {
	var m ClientMsg // reused, as a session reader reuses it
	for _, b := range clientMsgSeeds(t) {
		checkClientMsg(t, b, &m)
	}
	// JSON goes through protojson and still fills the plain fields.
	if err := DecodeClientMsg([]byte(`{"presence":{"seq":"4","position":{"xMm":7}}}`), true, &m); err != nil ||
		m.Kind != ClientPresenceKind || m.Presence.Seq != 4 || m.Presence.Position.X != 7 || !m.Presence.HasPosition {
		t.Fatalf("json presence: %v %+v", err, m.Presence)
	}
	if err := DecodeClientMsg(make([]byte, MaxMessageSize+1), false, &m); CodeOf(err) != CodeFrameTooLarge {
		t.Fatalf("oversized: %v", err)
	}
}

// FuzzDecodeClientMsg: on every input DecodeClientMsg agrees with the
// generated code (proto.Unmarshal): the same message, or an error both ways.
func FuzzDecodeClientMsg(f *testing.F) {
	for _, b := range clientMsgSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m ClientMsg
		checkClientMsg(t, b, &m)
	})
}

func TestDecodeClientMsgAllocs(t *testing.T) {
	for _, s := range sampleClient() {
		switch s.env.Msg.(type) {
		case *ClientEnvelope_Presence, *ClientEnvelope_Ack, *ClientEnvelope_Ping:
		default:
			continue
		}
		b, _ := proto.Marshal(s.env)
		var m ClientMsg
		if n := testing.AllocsPerRun(200, func() {
			if err := DecodeClientMsg(b, false, &m); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: %.1f allocs per decode, want 0", s.name, n)
		}
	}
}

func BenchmarkDecodeClientMsg(b *testing.B) {
	for _, s := range sampleClient() {
		if s.name != "client_presence" && s.name != "client_ack" {
			continue
		}
		buf, _ := proto.Marshal(s.env)
		b.Run(s.name+"/protowire", func(b *testing.B) {
			b.ReportAllocs()
			var m ClientMsg
			for b.Loop() {
				_ = DecodeClientMsg(buf, false, &m)
			}
		})
		b.Run(s.name+"/generated", func(b *testing.B) {
			b.ReportAllocs()
			var env ClientEnvelope
			for b.Loop() {
				_ = DecodeClient(buf, false, &env)
			}
		})
	}
}
