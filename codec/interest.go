package codec

import "math"

// Window is one client's interest window: an origin on the world plane, a
// radius, and the caps on what it may see.
type Window struct {
	X, Y int32 // origin, mm (the client's latest presence position)
	// RadiusMM is the interest radius; 0 means DefaultInterestRadiusMM
	// (the same convention as PresencePacket.radius_mm).
	RadiusMM uint32
	// MaxAgents and MaxPlayers cap the result; they are clamped to
	// [0, GroundVisibleAgentCap] and [0, GroundVisiblePlayerCap].
	MaxAgents, MaxPlayers int
	// FocusID is an entity the client is focused on (PresencePacket
	// .focus_agent_id): kept regardless of distance, in a slot of its
	// kind's cap. 0 = none.
	FocusID uint32
	// SelfID is the client's own avatar (ServerHello.entity_id): never
	// sent back to it. 0 = none.
	SelfID uint32
}

// Tier2AgentCap is the visible-agent cap for a client's renderer profile
// (the reference's selectTier2AgentDensityBudget): WebGPU 32, WebGL2 18,
// constrained WebGPU 10, constrained WebGL2 6. A nil profile or an
// unspecified renderer (a UE client, a Pixel Streaming worker) gets the
// ground cap, 32.
func Tier2AgentCap(p *RendererProfile) int {
	switch p.GetRenderer() {
	case Renderer_WEBGPU:
		if p.GetConstrained() {
			return 10
		}
		return 32
	case Renderer_WEBGL2:
		if p.GetConstrained() {
			return 6
		}
		return 18
	}
	return GroundVisibleAgentCap
}

// WindowFor builds the window of a client from its latest presence, its own
// entity id and its renderer profile (nil for non-Tier-2 clients). A nil
// presence puts the origin at (0,0). A requested radius of 0 becomes the
// default; larger than MaxInterestRadiusMM is clamped to it.
func WindowFor(p *PresencePacket, selfID uint32, prof *RendererProfile) Window {
	w := Window{
		X:          p.GetPosition().GetXMm(),
		Y:          p.GetPosition().GetYMm(),
		RadiusMM:   p.GetRadiusMm(),
		MaxAgents:  Tier2AgentCap(prof),
		MaxPlayers: GroundVisiblePlayerCap,
		FocusID:    p.GetFocusAgentId(),
		SelfID:     selfID,
	}
	if w.RadiusMM == 0 {
		w.RadiusMM = DefaultInterestRadiusMM
	}
	if w.RadiusMM > MaxInterestRadiusMM {
		w.RadiusMM = MaxInterestRadiusMM
	}
	return w
}

// maxRadius keeps squared distances inside uint64: with |dx|,|dy| <= 2^31
// each square is <= 2^62. Nothing in an int32-millimetre world is usefully
// farther than 2147 km.
const maxRadius = 1 << 31

// Project writes into dst (from dst[:0]) the entities of w inside win and
// returns it, sorted by ID:
//
//   - inside means dx²+dy² <= r² on the plane (Z is ignored);
//   - at most MaxAgents agents and MaxPlayers players (each clamped to the
//     ground caps), nearest first; ties go to higher Salience, then to the
//     lower ID;
//   - the FocusID entity, if present in w, is kept whatever its distance and
//     takes one slot of its kind's cap (if that cap is 0 it is not kept);
//   - SelfID is never included.
//
// Project does not allocate when cap(dst) >= MaxAgents+MaxPlayers (after
// clamping); dst must not alias w.Entities.
func Project(dst []Entity, w *World, win Window) []Entity {
	var q query
	dst, ok := q.start(dst, w, win)
	if !ok {
		return dst
	}
	q.sl.scan(w.Entities, q.ox, q.oy, q.r, q.r2)
	return q.finish(dst, w)
}

// query is one window query in progress: Project's state on the stack,
// shared with Index.Project (which only scans fewer entities).
type query struct {
	sl         selector
	r, r2      uint64
	ox, oy     int64
	focusIdx   int
	hasFocus   bool
	need       int
	focusEntry Entity
}

// start clamps the caps, sizes dst and takes the focused entity's slot.
// It reports false when there is nothing to select (dst is then empty).
func (q *query) start(dst []Entity, w *World, win Window) ([]Entity, bool) {
	maxA := clampInt(win.MaxAgents, GroundVisibleAgentCap)
	maxP := clampInt(win.MaxPlayers, GroundVisiblePlayerCap)
	q.need = maxA + maxP
	if cap(dst) < q.need {
		dst = make([]Entity, 0, q.need)
	}
	dst = dst[:0]
	if w == nil || q.need == 0 {
		return dst, false
	}
	r := uint64(win.RadiusMM)
	if r == 0 {
		r = DefaultInterestRadiusMM
	}
	if r > maxRadius {
		r = maxRadius
	}
	q.r, q.r2 = r, r*r
	q.ox, q.oy = int64(win.X), int64(win.Y)

	// The focused entity takes a slot of its kind, if it is there at all.
	if win.FocusID != 0 && win.FocusID != win.SelfID {
		if i, ok := findEntity(w.Entities, win.FocusID); ok {
			q.focusEntry, q.focusIdx = w.Entities[i], i
			switch {
			case q.focusEntry.IsPlayer() && maxP > 0:
				maxP--
				q.hasFocus = true
			case !q.focusEntry.IsPlayer() && maxA > 0:
				maxA--
				q.hasFocus = true
			}
		}
	}
	// Select with two bounded max-heaps of small keys (the worst kept
	// candidate at the root) in fixed arrays on the stack, then emit the
	// winners in w.Entities order, which is ID order.
	q.sl.capA, q.sl.capP, q.sl.selfID, q.sl.focusID = maxA, maxP, win.SelfID, win.FocusID
	q.sl.bound = math.MaxUint64
	if !q.hasFocus {
		q.sl.focusID = 0
	}
	return dst, true
}

// finish emits the selected entities (and the focus) in ID order.
func (q *query) finish(dst []Entity, w *World) []Entity {
	ah, ph := q.sl.a[:q.sl.na], q.sl.p[:q.sl.np]
	var idx [GroundVisibleAgentCap + GroundVisiblePlayerCap]int32
	n := 0
	for _, c := range ah {
		idx[n] = c.idx
		n++
	}
	for _, c := range ph {
		idx[n] = c.idx
		n++
	}
	if q.hasFocus {
		idx[n] = int32(q.focusIdx)
		n++
	}
	sel := idx[:n]
	for i := 1; i < len(sel); i++ { // insertion sort: n <= 40
		v := sel[i]
		j := i
		for j > 0 && sel[j-1] > v {
			sel[j] = sel[j-1]
			j--
		}
		sel[j] = v
	}
	for _, i := range sel {
		dst = append(dst, w.Entities[i])
	}
	return dst
}

func clampInt(v, hi int) int {
	if v < 0 {
		return 0
	}
	if v > hi {
		return hi
	}
	return v
}

func absDiff(a, b int64) uint64 {
	if a > b {
		return uint64(a - b)
	}
	return uint64(b - a)
}

// selector holds Project's selection state on the stack.
type selector struct {
	a          [GroundVisibleAgentCap]cand
	p          [GroundVisiblePlayerCap]cand
	na, np     int
	capA, capP int
	selfID     uint32 // 0 = none
	focusID    uint32 // kept separately; 0 = none
	// bound is the largest squared distance that can still be selected:
	// once both heaps are full, the farther of their roots (an entity at
	// exactly that distance may still win on salience or ID). Scans skip
	// anything beyond it without a call.
	bound uint64
}

// scan offers every entity within r of (ox, oy) to the heaps. The loop
// keeps only the distance test inline so that its state fits in registers;
// hits (a few percent of a large world) go through hit.
func (s *selector) scan(ents []Entity, ox, oy int64, r, r2 uint64) {
	r1 := r + 1
	for i := range ents {
		e := &ents[i]
		// Branch-free distance: clamping each axis to r+1 keeps the squares
		// inside uint64 and still puts anything clamped outside.
		dx := min(absDiff(int64(e.X), ox), r1)
		dy := min(absDiff(int64(e.Y), oy), r1)
		if d2 := dx*dx + dy*dy; d2 <= r2 && d2 <= s.bound {
			s.hit(e, i, d2)
		}
	}
}

//go:noinline
func (s *selector) hit(e *Entity, i int, d2 uint64) {
	if e.ID == s.selfID && s.selfID != 0 || e.ID == s.focusID && s.focusID != 0 {
		return
	}
	c := cand{d2: d2, sal: e.Salience, id: e.ID, idx: int32(i)}
	if e.IsPlayer() {
		s.np = offerCand(s.p[:s.np:s.capP], c)
	} else {
		s.na = offerCand(s.a[:s.na:s.capA], c)
	}
	if s.na == s.capA && s.np == s.capP {
		s.bound = 0
		if s.capA > 0 {
			s.bound = s.a[0].d2
		}
		if s.capP > 0 {
			s.bound = max(s.bound, s.p[0].d2)
		}
	}
}

// cand is a selection key: an entity's squared distance, salience and ID
// (a total order), and where it sits in World.Entities.
type cand struct {
	d2  uint64
	sal uint32
	id  uint32
	idx int32
}

// worse reports whether a ranks after b: farther, then lower salience,
// then higher ID.
func (a *cand) worse(b *cand) bool {
	if a.d2 != b.d2 {
		return a.d2 > b.d2
	}
	if a.sal != b.sal {
		return a.sal < b.sal
	}
	return a.id > b.id
}

// offerCand keeps in c, a max-heap by worse (the worst kept candidate at
// the root), the cap(c) best candidates offered to it, and returns the new
// length. It never appends, so the arrays behind c stay where they are.
func offerCand(c []cand, x cand) int {
	if len(c) < cap(c) {
		c = c[:len(c)+1]
		c[len(c)-1] = x
		// sift up
		j := len(c) - 1
		for j > 0 {
			i := (j - 1) / 2
			if !c[j].worse(&c[i]) {
				break
			}
			c[i], c[j] = c[j], c[i]
			j = i
		}
		return len(c)
	}
	if len(c) == 0 || !c[0].worse(&x) {
		return len(c)
	}
	c[0] = x
	// sift down
	i, n := 0, len(c)
	for {
		l := 2*i + 1
		if l >= n {
			return len(c)
		}
		j := l
		if r := l + 1; r < n && c[r].worse(&c[l]) {
			j = r
		}
		if !c[j].worse(&c[i]) {
			return len(c)
		}
		c[i], c[j] = c[j], c[i]
		i = j
	}
}
