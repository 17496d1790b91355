package codec

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"
)

var deterministic = proto.MarshalOptions{Deterministic: true}

func protoEntities(ents []Entity) []*EntityState {
	if len(ents) == 0 {
		return nil
	}
	out := make([]*EntityState, len(ents))
	for i, e := range ents {
		out[i] = EntityToProto(e)
	}
	return out
}

func manyIDs(n int, from uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = from + uint32(i)
	}
	return out
}

// edgeEntities exercises every varint width, zero omission, negative
// zigzag and an out-of-range enum.
func edgeEntities() []Entity {
	return []Entity{
		{},
		{ID: 1},
		{ID: 2, Kind: EntityKind_PLAYER, X: -1, Y: 1, Z: -64, HeadingMdeg: 63},
		{ID: 127, Kind: EntityKind_AGENT, X: math.MaxInt32, Y: math.MinInt32, Z: 128, HeadingMdeg: -359999, Activity: 128, Salience: 16384},
		{ID: math.MaxUint32, Kind: EntityKind(-1), X: 5, Activity: math.MaxUint32, Salience: math.MaxUint32},
		{ID: 300, Kind: EntityKind(99), HeadingMdeg: math.MinInt32},
	}
}

func TestAppendEnvelopeMatchesProtoMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]Entity, 40)
	for i := range random {
		random[i] = randomEntity(rng, uint32(i*3+1))
	}
	tests := []struct {
		name         string
		instance     string
		base, seq, t uint64
		ents         []Entity
		rms          []uint32
	}{
		{"empty", "", 0, 0, 0, nil, nil},
		{"header only", "orun-grove-1", 10, 11, 1764690000500, nil, nil},
		{"sample", "orun-grove-1", 4410, 4411, 1764690000550, sampleEntities(), []uint32{3, 9}},
		{"edge values", "x", math.MaxUint64, math.MaxUint64, 1, edgeEntities(), []uint32{0, 1, 127, 128, 16383, 16384, math.MaxUint32}},
		{"removals only", "i", 1, 2, 3, nil, []uint32{5}},
		{"many small removals", "i", 1, 2, 3, nil, manyIDs(40, 1)},     // packed length reserved wide, written narrow
		{"many large removals", "i", 1, 2, 3, nil, manyIDs(40, 1<<28)}, // packed length over 127
		{"full window", "orun-grove-1", 99, 100, 5000, random, nil},
		{"long instance id", string(bytes.Repeat([]byte("é"), 100)), 1, 2, 3, sampleEntities(), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name+"/snapshot", func(t *testing.T) {
			want, err := deterministic.Marshal(&ServerEnvelope{Msg: &ServerEnvelope_Snapshot{Snapshot: &AgentStateSnapshot{
				InstanceId: tc.instance, Sequence: tc.seq, ServerTimeMs: tc.t, Entities: protoEntities(tc.ents),
			}}})
			if err != nil {
				t.Fatal(err)
			}
			got := AppendSnapshotEnvelope([]byte{0xee}, tc.instance, tc.seq, tc.t, tc.ents)
			if !bytes.Equal(got[1:], want) || got[0] != 0xee {
				t.Fatalf("AppendSnapshotEnvelope\n got %x\nwant %x", got[1:], want)
			}
			if n := SnapshotEnvelopeSize(tc.instance, tc.seq, tc.t, tc.ents); n != len(want) {
				t.Fatalf("SnapshotEnvelopeSize = %d, want %d", n, len(want))
			}
		})
		t.Run(tc.name+"/delta", func(t *testing.T) {
			want, err := deterministic.Marshal(&ServerEnvelope{Msg: &ServerEnvelope_Delta{Delta: &AgentStateDelta{
				InstanceId: tc.instance, BaseSequence: tc.base, Sequence: tc.seq, ServerTimeMs: tc.t,
				Upserts: protoEntities(tc.ents), RemovedIds: tc.rms,
			}}})
			if err != nil {
				t.Fatal(err)
			}
			got := AppendDeltaEnvelope(nil, tc.instance, tc.base, tc.seq, tc.t, tc.ents, tc.rms)
			if !bytes.Equal(got, want) {
				t.Fatalf("AppendDeltaEnvelope\n got %x\nwant %x", got, want)
			}
			if n := DeltaEnvelopeSize(tc.instance, tc.base, tc.seq, tc.t, tc.ents, tc.rms); n != len(want) {
				t.Fatalf("DeltaEnvelopeSize = %d, want %d", n, len(want))
			}
			// And it decodes back to the same entities.
			var env ServerEnvelope
			if err := DecodeServer(got, false, &env); err != nil {
				t.Fatal(err)
			}
			d := env.GetDelta()
			if len(d.GetUpserts()) != len(tc.ents) {
				t.Fatalf("decoded %d upserts, want %d", len(d.GetUpserts()), len(tc.ents))
			}
			for i, u := range d.GetUpserts() {
				if e := EntityFromProto(u); e != tc.ents[i] {
					t.Fatalf("upsert %d = %+v, want %+v", i, e, tc.ents[i])
				}
			}
		})
	}
}

func TestEntityProtoRoundTrip(t *testing.T) {
	for _, e := range edgeEntities() {
		if got := EntityFromProto(EntityToProto(e)); got != e {
			t.Errorf("round trip %+v -> %+v", e, got)
		}
	}
	if got := EntityFromProto(nil); got != (Entity{}) {
		t.Errorf("EntityFromProto(nil) = %+v", got)
	}
	if got := EntityFromProto(&EntityState{Id: 3}); got != (Entity{ID: 3}) {
		t.Errorf("nil position = %+v", got)
	}
}

func TestWorldSnapshotRoundTrip(t *testing.T) {
	snap := &AgentStateSnapshot{InstanceId: "i", Sequence: 5, ServerTimeMs: 6, Entities: []*EntityState{
		EntityToProto(Entity{ID: 9, X: 1}), EntityToProto(Entity{ID: 2}), EntityToProto(Entity{ID: 9, X: 2}), EntityToProto(Entity{ID: 5}),
	}}
	w := World{Entities: make([]Entity, 0, 8)}
	backing := &w.Entities[:1][0]
	w.FromSnapshot(snap)
	want := []Entity{{ID: 2}, {ID: 5}, {ID: 9, X: 2}} // sorted, later duplicate wins
	if !equalEntities(w.Entities, want) {
		t.Fatalf("FromSnapshot = %+v, want %+v", w.Entities, want)
	}
	if &w.Entities[0] != backing {
		t.Fatal("FromSnapshot did not reuse capacity")
	}
	back := w.ToSnapshot()
	var w2 World
	w2.FromSnapshot(back)
	if w2.InstanceID != "i" || w2.Sequence != 5 || w2.ServerTimeMs != 6 || !equalEntities(w2.Entities, want) {
		t.Fatalf("ToSnapshot round trip = %+v", w2)
	}
	w.FromSnapshot(nil)
	if len(w.Entities) != 0 || w.Sequence != 0 {
		t.Fatalf("FromSnapshot(nil) = %+v", w)
	}
}

func TestAppendDeltaEnvelopeAllocs(t *testing.T) {
	ents := sampleEntities()
	rms := []uint32{3, 4, 5}
	buf := make([]byte, 0, 1024)
	if n := testing.AllocsPerRun(100, func() {
		buf = AppendDeltaEnvelope(buf[:0], "orun-grove-1", 1, 2, 3, ents, rms)
	}); n != 0 {
		t.Fatalf("AppendDeltaEnvelope allocs = %v", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		buf = AppendSnapshotEnvelope(buf[:0], "orun-grove-1", 2, 3, ents)
	}); n != 0 {
		t.Fatalf("AppendSnapshotEnvelope allocs = %v", n)
	}
}
