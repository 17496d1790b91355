package codec

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func ids(ents []Entity) []uint32 {
	out := make([]uint32, len(ents))
	for i, e := range ents {
		out[i] = e.ID
	}
	return out
}

func agent(id uint32, x, y int32) Entity {
	return Entity{ID: id, Kind: EntityKind_AGENT, X: x, Y: y}
}

func player(id uint32, x, y int32) Entity {
	return Entity{ID: id, Kind: EntityKind_PLAYER, X: x, Y: y}
}

// line puts n agents (IDs from first) on the x axis, step mm apart from x0.
func line(first uint32, n int, x0, step int32) []Entity {
	out := make([]Entity, n)
	for i := range out {
		out[i] = agent(first+uint32(i), x0+int32(i)*step, 0)
	}
	return out
}

func world(ents ...[]Entity) *World {
	var all []Entity
	for _, e := range ents {
		all = append(all, e...)
	}
	return &World{Entities: SortEntities(all)}
}

func TestProject(t *testing.T) {
	win := defaultWindow()
	tests := []struct {
		name string
		w    *World
		win  Window
		want []uint32
	}{
		{"nil world", nil, win, []uint32{}},
		{"empty world", world(), win, []uint32{}},
		{"radius boundary inclusive", world([]Entity{agent(1, 60_000, 0), agent(2, 60_001, 0), agent(3, 0, -60_000), agent(4, 42_426, 42_426), agent(5, 42_427, 42_427)}), win, []uint32{1, 3, 4}},
		{"radius 0 means default", world([]Entity{agent(1, 60_000, 0), agent(2, 60_001, 0)}), Window{MaxAgents: 32, MaxPlayers: 8}, []uint32{1}},
		{"custom radius and origin", world([]Entity{agent(1, 1000, 1000), agent(2, 1000, 1600), agent(3, 0, 0)}), Window{X: 1000, Y: 1000, RadiusMM: 500, MaxAgents: 32}, []uint32{1}},
		{"z ignored", world([]Entity{{ID: 1, X: 10, Z: math.MaxInt32}}), win, []uint32{1}},
		{"nearest agents win", world(line(1, 40, 59_000, -1000)), win, ids(line(9, 32, 27_000, 1000))},
		{"ties by salience then id", world([]Entity{
			{ID: 1, X: 100}, {ID: 2, X: -100, Salience: 5}, {ID: 3, Y: 100}, {ID: 4, Y: -100, Salience: 5},
		}), Window{MaxAgents: 3}, []uint32{1, 2, 4}},
		{"players capped separately", world(line(1, 5, 1000, 1000), []Entity{
			player(100, 1, 0), player(101, 2, 0), player(102, 3, 0), player(103, 4, 0), player(104, 5, 0),
			player(105, 6, 0), player(106, 7, 0), player(107, 8, 0), player(108, 9, 0), player(109, 10, 0),
		}), win, []uint32{1, 2, 3, 4, 5, 100, 101, 102, 103, 104, 105, 106, 107}},
		{"unspecified kind counts as agent", world([]Entity{{ID: 1, X: 1}, {ID: 2, X: 2}, player(3, 3, 0)}), Window{MaxAgents: 1, MaxPlayers: 1}, []uint32{1, 3}},
		{"self excluded", world([]Entity{player(5, 0, 0), player(6, 10, 0), agent(1, 5, 0)}), Window{MaxAgents: 32, MaxPlayers: 8, SelfID: 5}, []uint32{1, 6}},
		{"self excluded even if focused", world([]Entity{player(5, 0, 0), agent(1, 5, 0)}), Window{MaxAgents: 32, MaxPlayers: 8, SelfID: 5, FocusID: 5}, []uint32{1}},
		{"focus far away kept, nearest fill the rest", world(line(1, 40, 1000, 1000), []Entity{agent(999, 5_000_000, -5_000_000)}),
			Window{MaxAgents: 32, MaxPlayers: 8, FocusID: 999}, append(ids(line(1, 31, 1000, 1000)), 999)},
		{"focus inside window not duplicated", world(line(1, 40, 1000, 1000)), Window{MaxAgents: 4, FocusID: 30}, []uint32{1, 2, 3, 30}},
		{"focus missing from world", world(line(1, 10, 1000, 1000)), Window{MaxAgents: 3, FocusID: 77}, []uint32{1, 2, 3}},
		{"focused player takes a player slot", world(line(1, 3, 1000, 1000), []Entity{player(50, 1, 0), player(51, 2, 0), player(60, 9_000_000, 0)}),
			Window{MaxAgents: 32, MaxPlayers: 2, FocusID: 60}, []uint32{1, 2, 3, 50, 60}},
		{"focus with zero cap of its kind dropped", world([]Entity{agent(1, 9_000_000, 0)}), Window{MaxPlayers: 8, FocusID: 1}, []uint32{}},
		{"caps above ground clamped", world(line(1, 100, 100, 100)), Window{MaxAgents: 1000, MaxPlayers: 1000}, ids(line(1, 32, 100, 100))},
		{"negative caps", world(line(1, 10, 100, 100)), Window{MaxAgents: -1, MaxPlayers: -1}, []uint32{}},
		{"extreme coordinates", world([]Entity{agent(1, math.MinInt32, math.MinInt32), agent(2, math.MaxInt32, math.MaxInt32)}),
			Window{X: math.MaxInt32, Y: math.MaxInt32, RadiusMM: math.MaxUint32, MaxAgents: 32}, []uint32{2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Project(nil, tc.w, tc.win)
			if !slices.Equal(ids(got), tc.want) {
				t.Fatalf("Project = %v, want %v", ids(got), tc.want)
			}
		})
	}
}

func TestProjectTier2Caps(t *testing.T) {
	w := world(line(1, 60, 100, 100))
	tests := []struct {
		name string
		prof *RendererProfile
		want int
	}{
		{"nil", nil, 32},
		{"unspecified", &RendererProfile{}, 32},
		{"unspecified constrained", &RendererProfile{Constrained: true}, 32},
		{"webgpu", &RendererProfile{Renderer: Renderer_WEBGPU}, 32},
		{"webgl2", &RendererProfile{Renderer: Renderer_WEBGL2}, 18},
		{"webgpu constrained", &RendererProfile{Renderer: Renderer_WEBGPU, Constrained: true}, 10},
		{"webgl2 constrained", &RendererProfile{Renderer: Renderer_WEBGL2, Constrained: true}, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Tier2AgentCap(tc.prof); got != tc.want {
				t.Fatalf("Tier2AgentCap = %d, want %d", got, tc.want)
			}
			win := WindowFor(&PresencePacket{FocusAgentId: 60}, 0, tc.prof)
			got := Project(nil, w, win)
			if len(got) != tc.want {
				t.Fatalf("Project returned %d agents, want %d", len(got), tc.want)
			}
			// The focused (farthest) agent survives even the tightest cap.
			if got[len(got)-1].ID != 60 {
				t.Fatalf("focus 60 culled: %v", ids(got))
			}
		})
	}
}

func TestWindowFor(t *testing.T) {
	p := &PresencePacket{Position: &Vec3{XMm: 5, YMm: -7}, FocusAgentId: 9, RadiusMm: 10_000}
	if got, want := WindowFor(p, 3, nil), (Window{X: 5, Y: -7, RadiusMM: 10_000, MaxAgents: 32, MaxPlayers: 8, FocusID: 9, SelfID: 3}); got != want {
		t.Fatalf("WindowFor = %+v, want %+v", got, want)
	}
	if got := WindowFor(&PresencePacket{RadiusMm: math.MaxUint32}, 0, nil).RadiusMM; got != MaxInterestRadiusMM {
		t.Fatalf("radius not clamped: %d", got)
	}
	if got := WindowFor(nil, 0, nil); got != defaultWindow() {
		t.Fatalf("WindowFor(nil) = %+v", got)
	}
}

// projectNaive is the specification: sort every candidate, take the best.
func projectNaive(w *World, win Window) []Entity {
	r := uint64(win.RadiusMM)
	if r == 0 {
		r = DefaultInterestRadiusMM
	}
	maxA, maxP := clampInt(win.MaxAgents, 32), clampInt(win.MaxPlayers, 8)
	var out, cands []Entity
	for _, e := range w.Entities {
		switch {
		case win.SelfID != 0 && e.ID == win.SelfID:
		case win.FocusID != 0 && e.ID == win.FocusID:
			if e.IsPlayer() && maxP > 0 {
				maxP--
				out = append(out, e)
			} else if !e.IsPlayer() && maxA > 0 {
				maxA--
				out = append(out, e)
			}
		default:
			dx, dy := float64(e.X)-float64(win.X), float64(e.Y)-float64(win.Y)
			if dx*dx+dy*dy <= float64(r*r) {
				cands = append(cands, e)
			}
		}
	}
	key := func(e *Entity) cand {
		dx, dy := absDiff(int64(e.X), int64(win.X)), absDiff(int64(e.Y), int64(win.Y))
		return cand{d2: dx*dx + dy*dy, sal: e.Salience, id: e.ID}
	}
	slices.SortFunc(cands, func(a, b Entity) int {
		ka, kb := key(&a), key(&b)
		if ka.worse(&kb) {
			return 1
		}
		if kb.worse(&ka) {
			return -1
		}
		return 0
	})
	for _, e := range cands {
		if e.IsPlayer() && maxP > 0 {
			maxP--
			out = append(out, e)
		} else if !e.IsPlayer() && maxA > 0 {
			maxA--
			out = append(out, e)
		}
	}
	slices.SortFunc(out, cmpEntityID)
	return out
}

func TestProjectMatchesNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 1000 {
		w := &World{Entities: randomWorld(rng, rng.IntN(300), 400)}
		for j := range w.Entities {
			// Coarse grid so that distance ties happen.
			w.Entities[j].X = w.Entities[j].X / 10_000 * 10_000
			w.Entities[j].Y = w.Entities[j].Y / 10_000 * 10_000
		}
		win := Window{
			X: rng.Int32N(100_000) - 50_000, Y: rng.Int32N(100_000) - 50_000,
			RadiusMM: uint32(rng.IntN(80_000)), MaxAgents: rng.IntN(40), MaxPlayers: rng.IntN(10),
			FocusID: uint32(rng.IntN(400)), SelfID: uint32(rng.IntN(400)),
		}
		got := Project(nil, w, win)
		want := projectNaive(w, win)
		if !equalEntities(got, want) {
			t.Fatalf("case %d win %+v:\n got %v\nwant %v", i, win, ids(got), ids(want))
		}
		agents, players := 0, 0
		for _, e := range got {
			if e.IsPlayer() {
				players++
			} else {
				agents++
			}
		}
		if agents > GroundVisibleAgentCap || players > GroundVisiblePlayerCap {
			t.Fatalf("case %d: %d agents, %d players", i, agents, players)
		}
	}
}

func TestProjectAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	w := &World{Entities: randomWorld(rng, 500, 1000)}
	win := defaultWindow()
	win.RadiusMM = 100_000
	win.FocusID = w.Entities[3].ID
	dst := make([]Entity, 0, GroundVisibleAgentCap+GroundVisiblePlayerCap)
	if n := testing.AllocsPerRun(100, func() {
		dst = Project(dst, w, win)
	}); n != 0 {
		t.Fatalf("Project allocs = %v", n)
	}
	if len(dst) == 0 {
		t.Fatal("empty projection")
	}
}

// defaultWindow is a window at the origin with the ground caps (32 agents,
// 8 players) and the default radius.
func defaultWindow() Window {
	return Window{
		RadiusMM:   DefaultInterestRadiusMM,
		MaxAgents:  GroundVisibleAgentCap,
		MaxPlayers: GroundVisiblePlayerCap,
	}
}
