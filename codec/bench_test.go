package codec

import (
	"math/rand/v2"
	"testing"
)

// benchWorlds is a 500-agent, 40-player instance on a 400 m × 400 m plane
// over ticks consecutive 20 Hz ticks: half the agents walk at ~1.4 m/s
// (70 mm a tick) in a fixed direction, the rest stand; every player walks.
// At that density about 35 agents stand within the default 60 m radius of
// the plane's centre, so the 32-agent cap binds.
func benchWorlds(ticks int) []World {
	const agents, players, half = 500, 40, 200_000
	rng := rand.New(rand.NewPCG(20, 26))
	type mover struct{ vx, vy int32 }
	ents := make([]Entity, 0, agents+players)
	moves := make([]mover, 0, agents+players)
	for i := range agents + players {
		e := Entity{
			ID:          uint32(1000 + i*7),
			Kind:        EntityKind_AGENT,
			X:           rng.Int32N(2*half) - half,
			Y:           rng.Int32N(2*half) - half,
			HeadingMdeg: rng.Int32N(360_000),
			Activity:    uint32(rng.IntN(6)),
			Salience:    uint32(rng.IntN(100)),
		}
		m := mover{}
		if i >= agents {
			e.Kind = EntityKind_PLAYER
		}
		if i >= agents || rng.IntN(2) == 0 {
			m = mover{rng.Int32N(141) - 70, rng.Int32N(141) - 70}
		}
		ents = append(ents, e)
		moves = append(moves, m)
	}
	worlds := make([]World, ticks)
	for t := range worlds {
		cur := make([]Entity, len(ents))
		copy(cur, ents)
		worlds[t] = World{InstanceID: "orun-grove-1", Sequence: uint64(t + 1), ServerTimeMs: uint64(t * 50), Entities: cur}
		for i := range ents {
			ents[i].X += moves[i].vx
			ents[i].Y += moves[i].vy
			if moves[i].vx != 0 && rng.IntN(20) == 0 {
				ents[i].HeadingMdeg = rng.Int32N(360_000)
			}
		}
	}
	return worlds
}

// BenchmarkProjectDelta500 is one client's per-tick work at the edge for a
// 500-agent instance: project the new snapshot to its window, diff against
// its previous projection, encode the delta envelope. The sub-benchmarks
// time each stage alone.
func BenchmarkProjectDelta500(b *testing.B) {
	const ticks = 256
	worlds := benchWorlds(ticks)
	win := defaultWindow()
	win.SelfID = worlds[0].Entities[len(worlds[0].Entities)-1].ID // a player
	win.FocusID = worlds[0].Entities[17].ID                       // an agent, likely far away

	const capEnts = GroundVisibleAgentCap + GroundVisiblePlayerCap
	projs := make([][]Entity, ticks)
	for t := range projs {
		projs[t] = Project(make([]Entity, 0, capEnts), &worlds[t], win)
	}
	b.Logf("window holds %d entities", len(projs[0]))

	b.Run("pipeline", func(b *testing.B) {
		b.ReportAllocs()
		prev := Project(make([]Entity, 0, capEnts), &worlds[0], win)
		cur := make([]Entity, 0, capEnts)
		ups := make([]Entity, 0, capEnts)
		rms := make([]uint32, 0, capEnts)
		buf := make([]byte, 0, MaxMessageSize)
		t, bytes := 1, 0
		for b.Loop() {
			w := &worlds[t]
			cur = Project(cur, w, win)
			ups, rms = Diff(ups[:0], rms[:0], prev, cur)
			buf = AppendDeltaEnvelope(buf[:0], w.InstanceID, w.Sequence-1, w.Sequence, w.ServerTimeMs, ups, rms)
			bytes += len(buf)
			prev, cur = cur, prev
			if t++; t == ticks {
				t = 0
			}
		}
		b.ReportMetric(float64(bytes)/float64(b.N), "B/delta")
	})
	b.Run("project", func(b *testing.B) {
		b.ReportAllocs()
		dst := make([]Entity, 0, capEnts)
		t := 0
		for b.Loop() {
			dst = Project(dst, &worlds[t], win)
			if t++; t == ticks {
				t = 0
			}
		}
	})
	b.Run("diff", func(b *testing.B) {
		b.ReportAllocs()
		ups := make([]Entity, 0, capEnts)
		rms := make([]uint32, 0, capEnts)
		t := 1
		for b.Loop() {
			ups, rms = Diff(ups[:0], rms[:0], projs[t-1], projs[t])
			if t++; t == ticks {
				t = 1
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		type delta struct {
			ups []Entity
			rms []uint32
		}
		deltas := make([]delta, ticks)
		for t := 1; t < ticks; t++ {
			deltas[t].ups, deltas[t].rms = Diff(nil, nil, projs[t-1], projs[t])
		}
		buf := make([]byte, 0, MaxMessageSize)
		t := 1
		for b.Loop() {
			d := &deltas[t]
			buf = AppendDeltaEnvelope(buf[:0], "orun-grove-1", uint64(t), uint64(t+1), uint64(t*50), d.ups, d.rms)
			if t++; t == ticks {
				t = 1
			}
		}
	})
	b.Run("encode-proto-marshal", func(b *testing.B) {
		// The generated-code baseline AppendDeltaEnvelope replaces.
		b.ReportAllocs()
		ups, rms := Diff(nil, nil, projs[0], projs[1])
		buf := make([]byte, 0, MaxMessageSize)
		for b.Loop() {
			env := &ServerEnvelope{Msg: &ServerEnvelope_Delta{Delta: &AgentStateDelta{
				InstanceId: "orun-grove-1", BaseSequence: 1, Sequence: 2, ServerTimeMs: 50,
				Upserts: protoEntities(ups), RemovedIds: rms,
			}}}
			buf, _ = deterministic.MarshalAppend(buf[:0], env)
		}
	})
}

func BenchmarkBudgetAllow(b *testing.B) {
	b.ReportAllocs()
	bg := NewBudget(GroundReplicationMaxBps, 0)
	var now int64
	for b.Loop() {
		now += 50_000_000
		bg.Allow(now, 700)
	}
}
