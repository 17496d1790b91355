package codec

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func equalEntities(a, b []Entity) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func randomEntity(rng *rand.Rand, id uint32) Entity {
	k := EntityKind_AGENT
	if rng.IntN(8) == 0 {
		k = EntityKind_PLAYER
	}
	return Entity{
		ID: id, Kind: k,
		X: rng.Int32N(200_000) - 100_000, Y: rng.Int32N(200_000) - 100_000, Z: rng.Int32N(1000),
		HeadingMdeg: rng.Int32N(720_000) - 360_000,
		Activity:    uint32(rng.IntN(5)),
		Salience:    uint32(rng.IntN(4)),
	}
}

// randomWorld draws n entities with distinct IDs from [1, idSpace].
func randomWorld(rng *rand.Rand, n int, idSpace uint32) []Entity {
	seen := map[uint32]bool{}
	var out []Entity
	for len(out) < n && uint32(len(seen)) < idSpace {
		id := rng.Uint32N(idSpace) + 1
		if seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, randomEntity(rng, id))
	}
	return SortEntities(out)
}

// mutate derives the next tick: some moved, some removed, some added.
func mutate(rng *rand.Rand, base []Entity, idSpace uint32) []Entity {
	var cur []Entity
	for _, e := range base {
		switch rng.IntN(10) {
		case 0: // removed
			continue
		case 1, 2, 3:
			e.X += rng.Int32N(141) - 70
			e.HeadingMdeg += 1000
		case 4:
			e.Activity++
		}
		cur = append(cur, e)
	}
	for range rng.IntN(6) {
		cur = append(cur, randomEntity(rng, rng.Uint32N(idSpace)+1))
	}
	return SortEntities(cur)
}

func TestDiffApplyProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 2000 {
		idSpace := uint32(1 + rng.IntN(100))
		base := randomWorld(rng, rng.IntN(50), idSpace)
		var cur []Entity
		if rng.IntN(4) == 0 {
			cur = randomWorld(rng, rng.IntN(50), idSpace) // unrelated
		} else {
			cur = mutate(rng, base, idSpace)
		}
		ups, rms := Diff(nil, nil, base, cur)
		if !entitiesSorted(ups) || !idsSorted(rms) {
			t.Fatalf("case %d: Diff output not sorted", i)
		}
		got := Apply(nil, base, ups, rms)
		if !equalEntities(got, cur) {
			t.Fatalf("case %d: Apply(base, Diff(base, cur)) != cur\nbase %v\ncur  %v\nups  %v\nrms  %v\ngot  %v", i, base, cur, ups, rms, got)
		}
		// Minimality: nothing unchanged is upserted, nothing present removed.
		for _, u := range ups {
			if j, ok := findEntity(base, u.ID); ok && base[j] == u {
				t.Fatalf("case %d: unchanged %v upserted", i, u)
			}
		}
		for _, id := range rms {
			if _, ok := findEntity(cur, id); ok {
				t.Fatalf("case %d: present %d removed", i, id)
			}
		}
		// The slow path (shuffled inputs) agrees.
		rng.Shuffle(len(ups), func(a, b int) { ups[a], ups[b] = ups[b], ups[a] })
		rng.Shuffle(len(rms), func(a, b int) { rms[a], rms[b] = rms[b], rms[a] })
		if got := Apply(nil, base, ups, rms); !equalEntities(got, cur) {
			t.Fatalf("case %d: unsorted Apply differs", i)
		}
	}
}

func TestDiffCases(t *testing.T) {
	a := Entity{ID: 1, X: 1}
	a2 := Entity{ID: 1, X: 2}
	b := Entity{ID: 2}
	c := Entity{ID: 3}
	tests := []struct {
		name      string
		base, cur []Entity
		ups       []Entity
		rms       []uint32
	}{
		{"both empty", nil, nil, nil, nil},
		{"from empty", nil, []Entity{a, b}, []Entity{a, b}, nil},
		{"to empty", []Entity{a, b}, nil, nil, []uint32{1, 2}},
		{"unchanged", []Entity{a, b}, []Entity{a, b}, nil, nil},
		{"changed", []Entity{a, b}, []Entity{a2, b}, []Entity{a2}, nil},
		{"swap middle", []Entity{a, b}, []Entity{a, c}, []Entity{c}, []uint32{2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ups, rms := Diff(nil, nil, tc.base, tc.cur)
			if !equalEntities(ups, tc.ups) || len(rms) != len(tc.rms) {
				t.Fatalf("Diff = %v %v, want %v %v", ups, rms, tc.ups, tc.rms)
			}
			for i := range rms {
				if rms[i] != tc.rms[i] {
					t.Fatalf("rms = %v, want %v", rms, tc.rms)
				}
			}
		})
	}
}

func TestApplyRemoveAndUpsertSameID(t *testing.T) {
	base := []Entity{{ID: 1}, {ID: 2}}
	got := Apply(nil, base, []Entity{{ID: 2, X: 9}}, []uint32{2})
	if !equalEntities(got, []Entity{{ID: 1}, {ID: 2, X: 9}}) {
		t.Fatalf("got %v", got)
	}
	// Removing an ID that is not there is harmless.
	got = Apply(nil, base, nil, []uint32{5})
	if !equalEntities(got, base) {
		t.Fatalf("got %v", got)
	}
}

func TestWorldApplyDelta(t *testing.T) {
	w := World{InstanceID: "i", Sequence: 10, Entities: []Entity{{ID: 1}, {ID: 2}}}
	tests := []struct {
		name    string
		d       *AgentStateDelta
		err     error
		wantSeq uint64
		want    []Entity
	}{
		{"wrong base", &AgentStateDelta{InstanceId: "i", BaseSequence: 9, Sequence: 11}, ErrBaseMismatch, 10, []Entity{{ID: 1}, {ID: 2}}},
		{"wrong instance", &AgentStateDelta{InstanceId: "j", BaseSequence: 10, Sequence: 11}, ErrBaseMismatch, 10, []Entity{{ID: 1}, {ID: 2}}},
		{"nil", nil, ErrMalformed, 10, []Entity{{ID: 1}, {ID: 2}}},
		{"on base", &AgentStateDelta{InstanceId: "i", BaseSequence: 10, Sequence: 11,
			Upserts: []*EntityState{EntityToProto(Entity{ID: 3})}, RemovedIds: []uint32{1}}, nil, 11, []Entity{{ID: 2}, {ID: 3}}},
		{"from empty", &AgentStateDelta{InstanceId: "i", BaseSequence: 0, Sequence: 12,
			Upserts: []*EntityState{EntityToProto(Entity{ID: 8})}}, nil, 12, []Entity{{ID: 8}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := w.ApplyDelta(tc.d)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if w.Sequence != tc.wantSeq || !equalEntities(w.Entities, tc.want) {
				t.Fatalf("world = %+v", w)
			}
		})
	}
}

func TestDiffApplyAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	base := randomWorld(rng, 40, 80)
	cur := mutate(rng, base, 80)
	ups := make([]Entity, 0, len(cur))
	rms := make([]uint32, 0, len(base))
	dst := make([]Entity, 0, len(cur))
	if n := testing.AllocsPerRun(100, func() {
		ups, rms = Diff(ups[:0], rms[:0], base, cur)
	}); n != 0 {
		t.Fatalf("Diff allocs = %v", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		dst = Apply(dst, base, ups, rms)
	}); n != 0 {
		t.Fatalf("Apply allocs = %v", n)
	}
}

func FuzzDiffApply(f *testing.F) {
	f.Add(uint64(1), uint8(10), uint8(10))
	f.Fuzz(func(t *testing.T, seed uint64, nb, nc uint8) {
		rng := rand.New(rand.NewPCG(seed, seed>>1))
		base := randomWorld(rng, int(nb), 64)
		cur := randomWorld(rng, int(nc), 64)
		ups, rms := Diff(nil, nil, base, cur)
		if got := Apply(nil, base, ups, rms); !equalEntities(got, cur) {
			t.Fatalf("Apply(Diff) != cur")
		}
	})
}
