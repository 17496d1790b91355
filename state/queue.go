package state

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Lane is a waiting-room lane within a region. At >= 85 % POP utilisation
// the pixel-streaming lane stops draining while the web lane continues.
type Lane string

const (
	LaneWeb      Lane = "web"      // native and Tier-2 web joins
	LanePxstream Lane = "pxstream" // joins that will take a GPU worker
)

// Valid reports whether l is a known lane.
func (l Lane) Valid() bool { return l == LaneWeb || l == LanePxstream }

// Status is where a queue ticket stands.
type Status string

const (
	StatusQueued   Status = "queued"   // waiting in line
	StatusAdmitted Status = "admitted" // inside its join window, not yet used
	StatusUsed     Status = "used"     // admission exercised
	StatusGone     Status = "gone"     // unknown, left, abandoned or refunded
)

// Meta is the waiting room's control state.
type Meta struct {
	Epoch        string          // "<generation>-<random>"; new on every re-arm
	ArmedGlobal  bool            // every region queues
	ArmedRegions map[string]bool // regions armed on their own
	Frozen       bool            // operator freeze: bypass lanes only
	Halved       bool            // operator: global rate halved
	Waitlist     bool            // waitlist mode: new joins go to waitlist capture
}

// Armed reports whether region queues.
func (m Meta) Armed(region string) bool { return m.ArmedGlobal || m.ArmedRegions[region] }

// Op is an operator control.
type Op string

const (
	OpArm      Op = "arm"      // arm Region, or every region when Region is ""
	OpDisarm   Op = "disarm"   // the reverse
	OpFreeze   Op = "freeze"   // admit nothing (bypass lanes still pass)
	OpUnfreeze Op = "unfreeze" //
	OpHalve    Op = "halve"    // halve the global admission rate
	OpRestore  Op = "restore"  // undo halve
	// OpWaitlist switches overflow to waitlist mode (no new places, no
	// wait quoted); OpUnwaitlist undoes it.
	OpWaitlist   Op = "waitlist"
	OpUnwaitlist Op = "unwaitlist"
	// OpRearm starts a new epoch after state loss: an empty, globally armed
	// room. Tickets of the old epoch are refused.
	OpRearm Op = "rearm"
)

// Control is one operator command.
type Control struct {
	Op     Op
	Region string
}

// Rates are the ceilings for one drain, already clamped by the caller to
// downstream health and the utilisation ladder. The store applies the
// operator's halve and freeze on top.
type Rates struct {
	GlobalPerMin, GlobalBurst float64
	RegionPerMin, RegionBurst float64
	PxstreamAllowed           bool          // false at >= 85 % utilisation
	Frozen                    bool          // true at >= 90 % utilisation
	JoinWindow                time.Duration // admitted -> used deadline (5 min)
	KeepPlace                 time.Duration // a ticket not polled for this long loses its place (15 min)
	TicketTTL                 time.Duration // queue ticket lifetime (4 h)
	MaxAdmits                 int           // admits per drain call
}

// Ticket names one place in line.
type Ticket struct {
	ID     string
	Region string
	Lane   Lane
}

// Position answers a join or a poll.
type Position struct {
	Status      Status
	Seq         int64     // global order (the tiebreak across regions)
	Ahead       int64     // queued entries ahead in the region
	Depth       int64     // queued entries in the region
	DrainPerMin int64     // region admits over the trailing minute
	JoinBy      time.Time // admitted: deadline of the join window
	Epoch       string
}

// Queue is the waiting room's shared state. Every method but Meta checks
// the epoch and answers ErrStateLost once it is gone.
type Queue interface {
	Meta(ctx context.Context) (Meta, error)
	Control(ctx context.Context, c Control) (Meta, error)
	// Join enqueues t (idempotent per ticket id), drains its region and
	// answers t's position.
	Join(ctx context.Context, t Ticket, r Rates, now time.Time) (Position, error)
	// Poll marks t as still present, drains its region and answers t's
	// position.
	Poll(ctx context.Context, t Ticket, r Rates, now time.Time) (Position, error)
	// Use exercises an admission (idempotent); false if t is not admitted
	// or its join window has passed.
	Use(ctx context.Context, t Ticket, now time.Time) (bool, error)
	// Leave drops t; an admitted, unused t returns its tokens (once).
	Leave(ctx context.Context, t Ticket, r Rates, now time.Time) (refunded bool, err error)
	// Take takes one token from a plain bucket (signups) in this epoch.
	Take(ctx context.Context, bucket string, perMin, burst float64, now time.Time) (bool, error)
}

// EpochGen is the generation prefix of an epoch (0 if malformed).
func EpochGen(e string) int64 {
	g, _, _ := strings.Cut(e, "-")
	n, _ := strconv.ParseInt(g, 10, 64)
	return n
}

// NewEpoch returns a fresh epoch of generation gen: "<gen>-<random>".
func NewEpoch(gen int64) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return strconv.FormatInt(gen, 10) + "-" + hex.EncodeToString(b)
}

// tokenBucket is a refill-on-read bucket.
type tokenBucket struct {
	tok float64
	ts  int64 // ms
	set bool
}

func (b *tokenBucket) refill(perMs, burst float64, now int64) {
	if !b.set {
		b.tok, b.ts, b.set = burst, now, true
	}
	if now > b.ts {
		b.tok += float64(now-b.ts) * perMs
		b.ts = now
	}
	b.tok = math.Min(b.tok, burst)
}

type memTicket struct {
	region string
	lane   Lane
	seq    int64
	st     Status
	seen   int64
	dl     int64 // join-window deadline
	exp    int64 // ticket expiry
}

// MemoryQueue is the one-node Queue. Wipe simulates state loss for tests.
type MemoryQueue struct {
	mu       sync.Mutex
	known    string                  // epoch this node knows; guarded by mu
	meta     *Meta                   // nil after Wipe; guarded by mu
	seq      int64                   // guarded by mu
	tickets  map[string]*memTicket   // guarded by mu
	lines    map[string][]string     // region|lane -> ticket ids in seq order; guarded by mu
	buckets  map[string]*tokenBucket // guarded by mu
	drained  map[string][]int64      // region -> admit times (trailing minute); guarded by mu
	admitted map[string][]string     // region -> admitted ids in deadline order; guarded by mu
	sweepAt  int                     // ticket count that triggers an expiry sweep; guarded by mu
}

var _ Queue = (*MemoryQueue)(nil)

// NewMemoryQueue returns a disarmed room at generation 1.
func NewMemoryQueue() *MemoryQueue {
	q := &MemoryQueue{}
	q.reset(NewEpoch(1))
	return q
}

func (q *MemoryQueue) reset(epoch string) {
	q.known = epoch
	q.meta = &Meta{Epoch: epoch, ArmedRegions: map[string]bool{}}
	q.seq = 0
	q.tickets = map[string]*memTicket{}
	q.lines = map[string][]string{}
	q.buckets = map[string]*tokenBucket{}
	q.drained = map[string][]int64{}
	q.admitted = map[string][]string{}
	q.sweepAt = 1024
}

// Wipe drops every piece of state, as FLUSHALL would; the node still
// remembers its epoch, so every later call answers ErrStateLost until
// OpRearm.
func (q *MemoryQueue) Wipe() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.meta = nil
	q.tickets = map[string]*memTicket{}
	q.lines = map[string][]string{}
	q.buckets = map[string]*tokenBucket{}
	q.drained = map[string][]int64{}
	q.admitted = map[string][]string{}
	q.sweepAt = 1024
}

func (q *MemoryQueue) check() error {
	if q.meta == nil || q.meta.Epoch != q.known {
		return ErrStateLost
	}
	return nil
}

func copyMeta(m *Meta) Meta {
	out := *m
	out.ArmedRegions = make(map[string]bool, len(m.ArmedRegions))
	for k, v := range m.ArmedRegions {
		out.ArmedRegions[k] = v
	}
	return out
}

// Meta implements Queue.
func (q *MemoryQueue) Meta(context.Context) (Meta, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.check(); err != nil {
		return Meta{}, err
	}
	return copyMeta(q.meta), nil
}

// Control implements Queue.
func (q *MemoryQueue) Control(_ context.Context, c Control) (Meta, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if c.Op == OpRearm {
		q.reset(NewEpoch(EpochGen(q.known) + 1))
		q.meta.ArmedGlobal = true
		return copyMeta(q.meta), nil
	}
	if err := q.check(); err != nil {
		return Meta{}, err
	}
	m := q.meta
	switch c.Op {
	case OpArm, OpDisarm:
		on := c.Op == OpArm
		if c.Region == "" {
			m.ArmedGlobal = on
		} else if on {
			m.ArmedRegions[c.Region] = true
		} else {
			delete(m.ArmedRegions, c.Region)
		}
	case OpFreeze, OpUnfreeze:
		m.Frozen = c.Op == OpFreeze
	case OpHalve, OpRestore:
		m.Halved = c.Op == OpHalve
	case OpWaitlist, OpUnwaitlist:
		m.Waitlist = c.Op == OpWaitlist
	default:
		return Meta{}, fmt.Errorf("%w: unknown op %q", ErrBadArgument, c.Op)
	}
	return copyMeta(m), nil
}

func lineKey(region string, l Lane) string { return region + "|" + string(l) }

func (q *MemoryQueue) bucket(name string) *tokenBucket {
	b := q.buckets[name]
	if b == nil {
		b = &tokenBucket{}
		q.buckets[name] = b
	}
	return b
}

func (r Rates) global(halved bool) (perMs, burst float64) {
	rate := r.GlobalPerMin
	if halved {
		rate /= 2
	}
	return rate / 60000, r.GlobalBurst
}

// refund returns one admission's tokens.
func (q *MemoryQueue) refund(region string, r Rates, now int64) {
	gp, gb := r.global(q.meta.Halved)
	g := q.bucket("global")
	g.refill(gp, gb, now)
	g.tok = math.Min(gb, g.tok+1)
	rb := q.bucket("r:" + region)
	rb.refill(r.RegionPerMin/60000, r.RegionBurst, now)
	rb.tok = math.Min(r.RegionBurst, rb.tok+1)
}

// drain expires lapsed admissions (refunding them) and admits from the
// head of region's lines while both buckets hold a token.
func (q *MemoryQueue) drain(region string, r Rates, now int64) {
	if len(q.tickets) >= q.sweepAt {
		for id, t := range q.tickets {
			if t.exp <= now && t.st != StatusAdmitted {
				q.removeFromLine(id, t)
				delete(q.tickets, id)
			}
		}
		q.sweepAt = 2*len(q.tickets) + 1024
	}
	adm := q.admitted[region]
	for len(adm) > 0 {
		t := q.tickets[adm[0]]
		if t != nil && t.st == StatusAdmitted && t.dl >= now {
			break
		}
		if t != nil && t.st == StatusAdmitted {
			t.st = StatusGone // join window lapsed unused: return its tokens, once
			q.refund(region, r, now)
		}
		adm = adm[1:]
	}
	q.admitted[region] = adm
	if q.meta.Frozen || r.Frozen {
		return
	}
	gp, gb := r.global(q.meta.Halved)
	g := q.bucket("global")
	g.refill(gp, gb, now)
	rb := q.bucket("r:" + region)
	rb.refill(r.RegionPerMin/60000, r.RegionBurst, now)
	admitted := 0
scan:
	for scanned := 0; admitted < r.MaxAdmits && scanned < 4*r.MaxAdmits && g.tok >= 1 && rb.tok >= 1; scanned++ {
		web := q.lines[lineKey(region, LaneWeb)]
		px := q.lines[lineKey(region, LanePxstream)]
		var id string
		switch {
		case len(web) > 0 && (!r.PxstreamAllowed || len(px) == 0 || q.tickets[web[0]].seq < q.tickets[px[0]].seq):
			id = web[0]
			q.lines[lineKey(region, LaneWeb)] = web[1:]
		case r.PxstreamAllowed && len(px) > 0:
			id = px[0]
			q.lines[lineKey(region, LanePxstream)] = px[1:]
		default:
			break scan // both lines empty (or only a paused pixel-stream line)
		}
		t := q.tickets[id]
		if now-t.seen > r.KeepPlace.Milliseconds() {
			t.st = StatusGone // abandoned: the tab closed more than KeepPlace ago
			continue
		}
		g.tok--
		rb.tok--
		t.st = StatusAdmitted
		t.dl = now + r.JoinWindow.Milliseconds()
		q.admitted[region] = append(q.admitted[region], id)
		q.drained[region] = append(q.drained[region], now)
		admitted++
	}
	d := q.drained[region]
	i := sort.Search(len(d), func(i int) bool { return d[i] > now-60000 })
	q.drained[region] = d[i:]
}

func (q *MemoryQueue) removeFromLine(id string, t *memTicket) {
	k := lineKey(t.region, t.lane)
	if i := slices.Index(q.lines[k], id); i >= 0 {
		q.lines[k] = slices.Delete(q.lines[k], i, i+1)
	}
}

func (q *MemoryQueue) position(t *memTicket, region string, now int64) Position {
	p := Position{Status: StatusGone, Epoch: q.known}
	web := q.lines[lineKey(region, LaneWeb)]
	px := q.lines[lineKey(region, LanePxstream)]
	p.Depth = int64(len(web) + len(px))
	p.DrainPerMin = int64(len(q.drained[region]))
	if t == nil {
		return p
	}
	p.Status, p.Seq = t.st, t.seq
	switch t.st {
	case StatusQueued:
		for _, l := range [][]string{web, px} {
			p.Ahead += int64(sort.Search(len(l), func(i int) bool { return q.tickets[l[i]].seq >= t.seq }))
		}
	case StatusAdmitted:
		p.JoinBy = time.UnixMilli(t.dl)
	}
	return p
}

func (q *MemoryQueue) lookup(t Ticket) *memTicket {
	mt := q.tickets[t.ID]
	if mt == nil || mt.region != t.Region {
		return nil
	}
	return mt
}

// Join implements Queue.
func (q *MemoryQueue) Join(_ context.Context, t Ticket, r Rates, now time.Time) (Position, error) {
	if t.ID == "" || t.Region == "" || !t.Lane.Valid() {
		return Position{}, fmt.Errorf("%w: ticket %+v", ErrBadArgument, t)
	}
	ms := now.UnixMilli()
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.check(); err != nil {
		return Position{}, err
	}
	mt := q.tickets[t.ID]
	if mt == nil {
		q.seq++
		mt = &memTicket{region: t.Region, lane: t.Lane, seq: q.seq, st: StatusQueued, seen: ms, exp: ms + r.TicketTTL.Milliseconds()}
		q.tickets[t.ID] = mt
		k := lineKey(t.Region, t.Lane)
		q.lines[k] = append(q.lines[k], t.ID)
	}
	q.drain(t.Region, r, ms)
	return q.position(q.lookup(t), t.Region, ms), nil
}

// Poll implements Queue.
func (q *MemoryQueue) Poll(_ context.Context, t Ticket, r Rates, now time.Time) (Position, error) {
	ms := now.UnixMilli()
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.check(); err != nil {
		return Position{}, err
	}
	if mt := q.lookup(t); mt != nil && mt.st == StatusQueued {
		mt.seen = ms
		mt.exp = ms + r.TicketTTL.Milliseconds() // silent refresh
	}
	q.drain(t.Region, r, ms)
	return q.position(q.lookup(t), t.Region, ms), nil
}

// Use implements Queue.
func (q *MemoryQueue) Use(_ context.Context, t Ticket, now time.Time) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.check(); err != nil {
		return false, err
	}
	mt := q.lookup(t)
	switch {
	case mt == nil:
		return false, nil
	case mt.st == StatusUsed:
		return true, nil
	case mt.st == StatusAdmitted && mt.dl >= now.UnixMilli():
		mt.st = StatusUsed
		return true, nil
	}
	return false, nil
}

// Leave implements Queue.
func (q *MemoryQueue) Leave(_ context.Context, t Ticket, r Rates, now time.Time) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.check(); err != nil {
		return false, err
	}
	mt := q.lookup(t)
	if mt == nil {
		return false, nil
	}
	refund := false
	switch mt.st {
	case StatusQueued:
		q.removeFromLine(t.ID, mt)
	case StatusAdmitted:
		refund = true
		q.refund(t.Region, r, now.UnixMilli())
	}
	mt.st = StatusGone
	return refund, nil
}

// Take implements Queue.
func (q *MemoryQueue) Take(_ context.Context, bucket string, perMin, burst float64, now time.Time) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.check(); err != nil {
		return false, err
	}
	b := q.bucket("x:" + bucket)
	b.refill(perMin/60000, burst, now.UnixMilli())
	if b.tok < 1 {
		return false, nil
	}
	b.tok--
	return true, nil
}
