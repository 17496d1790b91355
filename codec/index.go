package codec

import "math"

// Index is a spatial index of one World: its entities bucketed into square
// grid cells, built once per instance tick and shared by every client's
// window query on that tick. Index.Project gives exactly Project's result
// (the selection is a total order, so which entities are scanned first
// does not matter; TestIndexMatchesProject and FuzzIndexProject hold it to
// that) while touching only the cells the window's circle overlaps.
//
// An Index is built by one goroutine (Build) and then read by any number
// (Project) until the next Build; the World must not change in between.
type Index struct {
	w          *World
	minX, minY int64
	shift      uint // cells are 1<<shift mm square
	nx, ny     int
	start      []int32  // cell c (row-major) holds pts[start[c]:start[c+1]]
	pts        []cellPt // entities by cell
	cells      []int32  // scratch: each entity's cell
}

// cellPt is one entity in the grid: its position (the distance test reads
// only these) and its index in World.Entities.
type cellPt struct {
	x, y int32
	idx  int32
}

// indexMinShift is the smallest cell: 2^14 mm ≈ 16 m, so a 60 m window
// covers about 8 x 8 cells. Sparse or huge worlds get larger cells: the
// grid never has more than indexMaxCells(n) cells.
const indexMinShift = 14

func indexMaxCells(n int) int { return 4*n + 64 }

// Build indexes w, reusing the Index's arrays. w is kept (not copied).
func (ix *Index) Build(w *World) {
	ix.w = w
	ents := w.Entities
	if len(ents) == 0 {
		ix.nx, ix.ny = 0, 0
		ix.pts = ix.pts[:0]
		return
	}
	minX, maxX, minY, maxY := int64(ents[0].X), int64(ents[0].X), int64(ents[0].Y), int64(ents[0].Y)
	for i := 1; i < len(ents); i++ {
		x, y := int64(ents[i].X), int64(ents[i].Y)
		minX, maxX = min(minX, x), max(maxX, x)
		minY, maxY = min(minY, y), max(maxY, y)
	}
	shift := uint(indexMinShift)
	limit := indexMaxCells(len(ents))
	for {
		nx, ny := int((maxX-minX)>>shift)+1, int((maxY-minY)>>shift)+1
		if nx*ny <= limit {
			ix.nx, ix.ny = nx, ny
			break
		}
		shift++
	}
	ix.minX, ix.minY, ix.shift = minX, minY, shift
	nc := ix.nx * ix.ny
	if cap(ix.start) < nc+1 {
		ix.start = make([]int32, nc+1, limit+1)
	}
	ix.start = ix.start[:nc+1]
	clear(ix.start)
	if cap(ix.cells) < len(ents) {
		ix.cells = make([]int32, len(ents), cap(ents))
		ix.pts = make([]cellPt, len(ents), cap(ents))
	}
	ix.cells, ix.pts = ix.cells[:len(ents)], ix.pts[:len(ents)]
	// Counting sort by cell: count, prefix sums, place.
	for i := range ents {
		c := int32(int((int64(ents[i].Y)-minY)>>shift)*ix.nx + int((int64(ents[i].X)-minX)>>shift))
		ix.cells[i] = c
		ix.start[c+1]++
	}
	for c := 1; c <= nc; c++ {
		ix.start[c] += ix.start[c-1]
	}
	for i := range ents {
		c := ix.cells[i]
		at := ix.start[c]
		ix.pts[at] = cellPt{x: ents[i].X, y: ents[i].Y, idx: int32(i)}
		ix.start[c]++
	}
	// Placing advanced each start to the next cell's: shift them back.
	for c := nc; c > 0; c-- {
		ix.start[c] = ix.start[c-1]
	}
	ix.start[0] = 0
}

// World is the indexed world.
func (ix *Index) World() *World { return ix.w }

// Project is Project(dst, ix.World(), win), reading only the cells the
// window's circle can reach.
func (ix *Index) Project(dst []Entity, win Window) []Entity {
	var q query
	dst, ok := q.start(dst, ix.w, win)
	if !ok {
		return dst
	}
	ix.scan(&q.sl, q.ox, q.oy, q.r, q.r2)
	return q.finish(dst, ix.w)
}

// scan offers the entities of the cells the window's circle reaches, rows
// nearest the origin first: the heaps fill with near candidates early, and
// their bound (selector.bound) then narrows each further row to the cells
// that can still hold a winner, or skips it.
func (ix *Index) scan(s *selector, ox, oy int64, r, r2 uint64) {
	if ix.nx == 0 {
		return
	}
	ri := int64(r)
	if !ix.overlaps(ox-ri, ox+ri, ix.minX, ix.nx) || !ix.overlaps(oy-ri, oy+ri, ix.minY, ix.ny) {
		return // the window's box misses the grid
	}
	cx0, cx1 := ix.cell(ox-ri, ix.minX, ix.nx), ix.cell(ox+ri, ix.minX, ix.nx)
	cy0, cy1 := ix.cell(oy-ri, ix.minY, ix.ny), ix.cell(oy+ri, ix.minY, ix.ny)
	mid := min(max(ix.cell(oy, ix.minY, ix.ny), cy0), cy1)
	up, down := mid, mid-1 // next rows to scan in each direction
	for up <= cy1 || down >= cy0 {
		// Take the nearer of the two next rows.
		var cy int
		switch {
		case up > cy1:
			cy, down = down, down-1
		case down < cy0:
			cy, up = up, up+1
		case ix.rowGap(up, oy) <= ix.rowGap(down, oy):
			cy, up = up, up+1
		default:
			cy, down = down, down-1
		}
		lim := min(r2, s.bound)
		gap := ix.rowGap(cy, oy)
		if gap > r || gap*gap > lim {
			// Rows only get farther in this direction: stop it.
			if cy >= mid {
				up = cy1 + 1
			} else {
				down = cy0 - 1
			}
			continue
		}
		hw := int64(math.Sqrt(float64(lim-gap*gap))) + 1 // +1: float rounding
		xa, xb := max(ix.cell(ox-hw, ix.minX, ix.nx), cx0), min(ix.cell(ox+hw, ix.minX, ix.nx), cx1)
		row := cy * ix.nx
		ix.scanCells(s, ix.pts[ix.start[row+xa]:ix.start[row+xb+1]], ox, oy, r, r2)
	}
}

// scanCells offers the points within r (and the bound) to s.
func (ix *Index) scanCells(s *selector, pts []cellPt, ox, oy int64, r, r2 uint64) {
	ents := ix.w.Entities
	r1 := r + 1
	for _, p := range pts {
		dx := min(absDiff(int64(p.x), ox), r1)
		dy := min(absDiff(int64(p.y), oy), r1)
		if d2 := dx*dx + dy*dy; d2 <= r2 && d2 <= s.bound {
			s.hit(&ents[p.idx], int(p.idx), d2)
		}
	}
}

// rowGap is the distance along y from v to row cy's extent (0 inside it).
func (ix *Index) rowGap(cy int, v int64) uint64 {
	lo := ix.minY + int64(cy)<<ix.shift
	hi := lo + int64(1)<<ix.shift - 1
	switch {
	case v < lo:
		return uint64(lo - v)
	case v > hi:
		return uint64(v - hi)
	}
	return 0
}

// cell maps coordinate v to its cell along an axis of n cells from lo,
// clamped into [0, n-1].
func (ix *Index) cell(v, lo int64, n int) int {
	if v < lo {
		return 0
	}
	return int(min((v-lo)>>ix.shift, int64(n-1)))
}

// overlaps reports whether [a, b] meets the grid's extent along an axis.
func (ix *Index) overlaps(a, b, lo int64, n int) bool {
	hi := lo + int64(n)<<ix.shift - 1
	return b >= lo && a <= hi
}
