package codec

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// gridWorld is n entities (a tenth of them players) spread over a square
// of half-size half, optionally clustered, with some duplicate positions.
func gridWorld(rng *rand.Rand, n int, half int32, clustered bool) *World {
	ents := make([]Entity, 0, n)
	for i := range n {
		e := Entity{ID: uint32(i*3 + 1), Kind: EntityKind_AGENT, Salience: uint32(rng.IntN(4))}
		if i%10 == 0 {
			e.Kind = EntityKind_PLAYER
		}
		switch {
		case clustered && i%3 == 0:
			e.X, e.Y = rng.Int32N(2000)-1000, rng.Int32N(2000)-1000
		case i > 0 && i%17 == 0:
			e.X, e.Y = ents[i-1].X, ents[i-1].Y // same spot as another
		default:
			e.X, e.Y = int32(rng.Int64N(2*int64(half))-int64(half)), int32(rng.Int64N(2*int64(half))-int64(half))
		}
		ents = append(ents, e)
	}
	return &World{InstanceID: "x", Sequence: 1, Entities: ents}
}

func randomWindow(rng *rand.Rand, w *World, half int32) Window {
	coord := func() int32 {
		v := rng.Int64N(4*int64(half)+1) - 2*int64(half)
		return int32(max(min(v, math.MaxInt32), math.MinInt32))
	}
	win := Window{X: coord(), Y: coord(),
		MaxAgents: rng.IntN(40), MaxPlayers: rng.IntN(10)}
	switch rng.IntN(5) {
	case 0:
		win.RadiusMM = 0
	case 1:
		win.RadiusMM = math.MaxUint32
	default:
		win.RadiusMM = uint32(rng.Int64N(int64(half) * 2))
	}
	if len(w.Entities) > 0 && rng.IntN(3) == 0 {
		win.FocusID = w.Entities[rng.IntN(len(w.Entities))].ID
	}
	if len(w.Entities) > 0 && rng.IntN(2) == 0 {
		win.SelfID = w.Entities[rng.IntN(len(w.Entities))].ID
	}
	return win
}

// TestIndexMatchesProject: Index.Project equals Project on random worlds
// (dense, sparse, clustered, huge, empty) and windows (inside, outside,
// huge radius, focus, self).
func TestIndexMatchesProject(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var ix Index
	for _, c := range []struct {
		n         int
		half      int32
		clustered bool
	}{{0, 1000, false}, {1, 1000, false}, {50, 100_000, false}, {540, 200_000, false}, {2000, 100_000, true},
		{300, math.MaxInt32 / 2, false}, {300, 10, false}, {1000, 2_000_000, true}} {
		t.Run(fmt.Sprintf("n=%d,half=%d,clustered=%v", c.n, c.half, c.clustered), func(t *testing.T) {
			for range 20 {
				w := gridWorld(rng, c.n, c.half, c.clustered)
				ix.Build(w)
				for range 50 {
					win := randomWindow(rng, w, c.half)
					got, want := ix.Project(nil, win), Project(nil, w, win)
					if !slices.Equal(got, want) {
						t.Fatalf("window %+v:\n got %v\nwant %v", win, got, want)
					}
				}
			}
		})
	}
}

// FuzzIndexProject checks Index.Project against Project for fuzzed worlds
// and windows.
func FuzzIndexProject(f *testing.F) {
	f.Add(uint64(1), 100, int32(1000), int32(0), int32(0), uint32(500), uint8(32), uint8(8))
	f.Add(uint64(2), 540, int32(200_000), int32(10_000), int32(-30_000), uint32(60_000), uint8(32), uint8(8))
	f.Add(uint64(3), 3, int32(math.MaxInt32), int32(math.MinInt32), int32(math.MaxInt32), uint32(math.MaxUint32), uint8(1), uint8(1))
	f.Fuzz(func(t *testing.T, seed uint64, n int, half, x, y int32, r uint32, maxA, maxP uint8) {
		if n < 0 || n > 3000 || half <= 0 {
			return
		}
		rng := rand.New(rand.NewPCG(seed, 7))
		w := gridWorld(rng, n, half, seed%2 == 0)
		var ix Index
		ix.Build(w)
		win := Window{X: x, Y: y, RadiusMM: r, MaxAgents: int(maxA), MaxPlayers: int(maxP)}
		if n > 0 {
			win.FocusID, win.SelfID = w.Entities[int(seed%uint64(n))].ID, w.Entities[int((seed/7)%uint64(n))].ID
		}
		if got, want := ix.Project(nil, win), Project(nil, w, win); !slices.Equal(got, want) {
			t.Fatalf("window %+v:\n got %v\nwant %v", win, got, want)
		}
	})
}

func TestIndexAllocs(t *testing.T) {
	worlds := benchWorlds(4)
	var ix Index
	ix.Build(&worlds[0])
	dst := make([]Entity, 0, GroundVisibleAgentCap+GroundVisiblePlayerCap)
	win := defaultWindow()
	k := 0
	if n := testing.AllocsPerRun(100, func() {
		ix.Build(&worlds[k%len(worlds)])
		k++
		dst = ix.Project(dst, win)
	}); n != 0 {
		t.Fatalf("%.1f allocs per build+query, want 0", n)
	}
}

// BenchmarkIndexProject compares one window query by the grid index with
// the linear scan, on the 500-agent bench world (and the per-tick Build).
func BenchmarkIndexProject(b *testing.B) {
	worlds := benchWorlds(64)
	dst := make([]Entity, 0, 40)
	rng := rand.New(rand.NewPCG(9, 9))
	wins := make([]Window, 64)
	for i := range wins {
		wins[i] = defaultWindow()
		wins[i].X, wins[i].Y = rng.Int32N(300_000)-150_000, rng.Int32N(300_000)-150_000
	}
	b.Run("build", func(b *testing.B) {
		b.ReportAllocs()
		var ix Index
		i := 0
		for b.Loop() {
			ix.Build(&worlds[i%len(worlds)])
			i++
		}
	})
	b.Run("index", func(b *testing.B) {
		b.ReportAllocs()
		var ix Index
		ix.Build(&worlds[0])
		i := 0
		for b.Loop() {
			dst = ix.Project(dst, wins[i%len(wins)])
			i++
		}
	})
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			dst = Project(dst, &worlds[0], wins[i%len(wins)])
			i++
		}
	})
}
