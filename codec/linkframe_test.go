package codec

import (
	"bytes"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// shardFrameSeeds are real link frames (a 500-agent snapshot, acks,
// pongs, the rarer frames) plus protobuf corner cases.
func shardFrameSeeds(t testing.TB) [][]byte {
	w := benchWorlds(1)[0]
	snap := w.ToSnapshot()
	frames := []*LinkShardFrame{
		{Msg: &LinkShardFrame_Snapshot{Snapshot: snap}},
		{Msg: &LinkShardFrame_Snapshot{Snapshot: &AgentStateSnapshot{InstanceId: "orun-grove", Sequence: 9,
			Entities: []*EntityState{{Id: 3, Kind: EntityKind_PLAYER}, {Id: 1, Position: &Vec3{XMm: -4}}, {Id: 3, Salience: 8}}}}},
		{Session: 12, Msg: &LinkShardFrame_ActionAck{ActionAck: &ActionAck{ActionId: 77}}},
		{Msg: &LinkShardFrame_Pong{Pong: &LinkPong{Nonce: 4, EdgeTimeNs: -9, ShardTimeMs: 1764690000123, Sessions: 300}}},
		{Msg: &LinkShardFrame_Hello{Hello: &LinkShardHello{Version: 2, ShardId: "s1", Instances: []string{"a", "b"}}}},
		{Session: 3, Msg: &LinkShardFrame_Opened{Opened: &LinkSessionOpened{EntityId: 1000001, LastActionId: 5, Resumed: true}}},
		{Session: 3, Msg: &LinkShardFrame_SessionEvent{SessionEvent: &WorldEvent{Seq: 2, Kind: "action.wave", EntityId: 4}}},
		{Msg: &LinkShardFrame_Event{Event: &LinkInstanceEvent{InstanceId: "a", Event: &WorldEvent{Kind: "ambient.birdsong"}}}},
		{Session: 3, Msg: &LinkShardFrame_Squad{Squad: &SquadCommsMessage{SquadId: "red", Text: "hi"}}},
		{Session: 3, Msg: &LinkShardFrame_Error{Error: &Error{Code: "internal"}}},
	}
	var out [][]byte
	for _, f := range frames {
		b, err := proto.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	ack, _ := proto.Marshal(&LinkShardFrame{Msg: &LinkShardFrame_ActionAck{ActionAck: &ActionAck{ActionId: 1}}})
	small, _ := proto.Marshal(&LinkShardFrame{Msg: &LinkShardFrame_Snapshot{Snapshot: &AgentStateSnapshot{InstanceId: "x", Entities: []*EntityState{{Id: 2}}}}})
	more, _ := proto.Marshal(&LinkShardFrame{Session: 5, Msg: &LinkShardFrame_Snapshot{Snapshot: &AgentStateSnapshot{Sequence: 3, Entities: []*EntityState{{Id: 1, Position: &Vec3{YMm: 2}}}}}})
	bad := []byte{0x1a, 0x03, 0x0a, 0x01, 0xff} // instance id that is not UTF-8
	sess := protowire.AppendTag(nil, 15, protowire.BytesType)
	sess = protowire.AppendBytes(sess, []byte{1})
	out = append(out,
		append(slices.Clone(small), more...), // merged snapshot
		append(slices.Clone(small), append(slices.Clone(ack), small...)...),
		append(slices.Clone(sess), ack...),
		bad, nil, []byte{0x7a, 0x00}, []byte{0x32, 0x02, 0x08},
	)
	return out
}

func sameShardFrame(f *ShardFrame, m *LinkShardFrame) bool {
	if f.Session != m.GetSession() {
		return false
	}
	switch x := m.Msg.(type) {
	case *LinkShardFrame_Snapshot:
		var w World
		w.FromSnapshot(x.Snapshot)
		return f.Kind == ShardSnapshotKind && f.Snapshot.InstanceID == w.InstanceID && f.Snapshot.Sequence == w.Sequence &&
			f.Snapshot.ServerTimeMs == w.ServerTimeMs && slices.Equal(f.Snapshot.Entities, w.Entities)
	case *LinkShardFrame_ActionAck:
		return f.Kind == ShardActionAckKind && f.ActionAck == x.ActionAck.GetActionId()
	case *LinkShardFrame_Pong:
		p := x.Pong
		return f.Kind == ShardPongKind && f.PongNonce == p.GetNonce() && f.PongEdgeTimeNs == p.GetEdgeTimeNs() &&
			f.PongShardTimeMs == p.GetShardTimeMs() && f.PongSessions == p.GetSessions()
	case nil:
		return false
	}
	return proto.Equal(&f.Msg, m) && f.Kind != 0
}

func checkShardFrame(t *testing.T, b []byte, f *ShardFrame) {
	t.Helper()
	var m LinkShardFrame
	want := proto.Unmarshal(b, &m)
	if want == nil && m.Msg == nil {
		want = ErrMalformed
	}
	got := DecodeShardFrame(b, f)
	switch {
	case (want == nil) != (got == nil):
		t.Fatalf("% x: proto says %v, DecodeShardFrame says %v", b, want, got)
	case got == nil && !sameShardFrame(f, &m):
		t.Fatalf("% x: decoded kind %d session %d %+v, proto %v", b, f.Kind, f.Session, f.Snapshot, &m)
	}
}

func TestDecodeShardFrameMatchesProto(t *testing.T) {
	var f ShardFrame
	for _, b := range shardFrameSeeds(t) {
		checkShardFrame(t, b, &f)
	}
}

// FuzzDecodeShardFrame: on every input DecodeShardFrame agrees with
// proto.Unmarshal.
func FuzzDecodeShardFrame(f *testing.F) {
	for _, b := range shardFrameSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr ShardFrame
		checkShardFrame(t, b, &fr)
	})
}

func TestDecodeShardFrameAllocs(t *testing.T) {
	seeds := shardFrameSeeds(t)
	var f ShardFrame
	for i, b := range seeds[:4] { // snapshot x2, action ack, pong
		if err := DecodeShardFrame(b, &f); err != nil { // warm: entity array, interned id
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(100, func() {
			if err := DecodeShardFrame(b, &f); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("frame %d: %.1f allocs per decode, want 0", i, n)
		}
	}
}

func TestEdgeFrameEncoders(t *testing.T) {
	for _, s := range sampleClient() {
		pp := s.env.GetPresence()
		if pp == nil {
			continue
		}
		for _, p := range []Presence{PresenceFromProto(pp), {}, {HasPosition: true}, {Seq: 1 << 62, HasVelocity: true, Velocity: Point{-1, 0, 1}}} {
			for _, sess := range []uint32{0, 1, 1 << 31} {
				want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&LinkEdgeFrame{Session: sess, Msg: &LinkEdgeFrame_Presence{Presence: p.Proto()}})
				if err != nil {
					t.Fatal(err)
				}
				want = AppendFrame(nil, want)
				got := AppendPresenceFrame(nil, sess, &p)
				if !bytes.Equal(got, want) || PresenceFrameSize(sess, &p) != len(want) {
					t.Fatalf("presence frame\n got % x\nwant % x", got, want)
				}
				buf := make([]byte, 0, 128)
				if n := testing.AllocsPerRun(50, func() { buf = AppendPresenceFrame(buf[:0], sess, &p) }); n != 0 {
					t.Fatalf("%.1f allocs", n)
				}
			}
		}
	}
	det := proto.MarshalOptions{Deterministic: true}
	for _, c := range [][2]uint64{{0, 0}, {1, 2}, {1 << 63, 1764690000123}} {
		want, _ := det.Marshal(&ServerEnvelope{Msg: &ServerEnvelope_Pong{Pong: &Pong{ClientTimeMs: c[0], ServerTimeMs: c[1]}}})
		if got := AppendPongEnvelope(nil, c[0], c[1]); !bytes.Equal(got, want) {
			t.Fatalf("pong % x want % x", got, want)
		}
		want, _ = det.Marshal(&ServerEnvelope{Msg: &ServerEnvelope_ActionAck{ActionAck: &ActionAck{ActionId: c[0]}}})
		if got := AppendActionAckEnvelope(nil, c[0]); !bytes.Equal(got, want) {
			t.Fatalf("action ack % x want % x", got, want)
		}
	}
	open := &LinkEdgeFrame{Session: 9, Msg: &LinkEdgeFrame_Open{Open: &LinkSessionOpen{SessionId: "s_1", InstanceId: "a"}}}
	want, _ := proto.Marshal(open)
	got, err := AppendLinkFrame([]byte{0xaa}, open)
	if err != nil || !bytes.Equal(got, append([]byte{0xaa}, AppendFrame(nil, want)...)) {
		t.Fatalf("link frame % x, %v", got, err)
	}
}

func BenchmarkDecodeShardFrame(b *testing.B) {
	seeds := shardFrameSeeds(b)
	b.Run("snapshot500/protowire", func(b *testing.B) {
		b.ReportAllocs()
		var f ShardFrame
		for b.Loop() {
			_ = DecodeShardFrame(seeds[0], &f)
		}
	})
	b.Run("snapshot500/generated", func(b *testing.B) {
		b.ReportAllocs()
		var w World
		for b.Loop() {
			var m LinkShardFrame
			_ = proto.Unmarshal(seeds[0], &m)
			w.FromSnapshot(m.GetSnapshot())
		}
	})
	b.Run("action_ack/protowire", func(b *testing.B) {
		b.ReportAllocs()
		var f ShardFrame
		for b.Loop() {
			_ = DecodeShardFrame(seeds[2], &f)
		}
	})
}
