package admission

import (
	"context"
	"sync"
	"time"
)

// FleetPOP is one Pixel Streaming POP as the matchmaker holds it: its
// topology and its live load.
type FleetPOP struct {
	ID                   string
	RTTMs                map[string]int // by client region; a region absent is not served
	MaxSessions          int
	PaidHeadroomSessions int // held back from free callers
	Priority             int // programming priority
	Codecs               []string
	Sessions             int // live sessions
	IdleStreamers        int // streamers free to lease
	UtilisationBP        int // sessions per max sessions, basis points
}

// FleetSnapshot is the live Pixel Streaming fleet at one moment.
type FleetSnapshot struct {
	// FreeTierMaxUtilBP: free callers are not sent to a POP at or above it.
	FreeTierMaxUtilBP int
	POPs              []FleetPOP
}

// FleetViewTTL is how long a FleetView reuses a snapshot: the waiting room
// asks on every join and poll, and a snapshot is a registry scan (a Redis
// script in a fleet).
const FleetViewTTL = time.Second

// FleetView is the live fleet for admission: launch candidates per client
// region (LiveFleet) and utilisation per POP (FleetUtilisation), read from
// the matchmaker through read and reused for FleetViewTTL.
type FleetView struct {
	read func() (FleetSnapshot, bool) // immutable; false: no streaming fleet (yet)
	now  func() time.Time             // immutable

	mu   sync.Mutex
	snap FleetSnapshot       // guarded by mu
	byID map[string]FleetPOP // guarded by mu: snap's POPs by id; nil until read
	at   time.Time           // guarded by mu: when snap was read
}

var (
	_ LiveFleet        = (*FleetView)(nil)
	_ FleetUtilisation = (*FleetView)(nil)
)

// NewFleetView reads the fleet through read (false: no streaming fleet,
// so no candidates and no utilisation); now may be nil (time.Now).
func NewFleetView(read func() (FleetSnapshot, bool), now func() time.Time) *FleetView {
	if now == nil {
		now = time.Now
	}
	return &FleetView{read: read, now: now}
}

// current returns the snapshot, read afresh once FleetViewTTL has passed.
func (f *FleetView) current() (FleetSnapshot, map[string]FleetPOP, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if f.byID != nil && now.Sub(f.at) < FleetViewTTL {
		return f.snap, f.byID, true
	}
	snap, ok := f.read()
	if !ok {
		return FleetSnapshot{}, nil, false
	}
	byID := make(map[string]FleetPOP, len(snap.POPs))
	for _, p := range snap.POPs {
		byID[p.ID] = p
	}
	f.snap, f.byID, f.at = snap, byID, now
	return snap, byID, true
}

// PopCandidates implements LiveFleet: every POP serving clientRegion, with
// the idle streamers this caller could really lease. A full POP has none;
// a free caller gets none at or past the free tier's backpressure or
// inside the paid headroom (as the matchmaker will judge).
func (f *FleetView) PopCandidates(_ context.Context, clientRegion string, paid bool) ([]PopCandidate, error) {
	snap, _, ok := f.current()
	if !ok {
		return nil, nil
	}
	var out []PopCandidate
	for _, pop := range snap.POPs {
		rtt, known := pop.RTTMs[clientRegion]
		if !known {
			continue
		}
		avail := pop.IdleStreamers
		switch {
		case pop.Sessions >= pop.MaxSessions:
			avail = 0
		case !paid && (pop.UtilisationBP >= snap.FreeTierMaxUtilBP || pop.Sessions+1 > pop.MaxSessions-pop.PaidHeadroomSessions):
			avail = 0
		}
		out = append(out, PopCandidate{PopID: pop.ID, RTTMs: float64(rtt), AvailableWorkers: avail,
			ProgrammingPriority: pop.Priority, Codecs: pop.Codecs})
	}
	return out, nil
}

// RegionUtilisationBP implements FleetUtilisation.
func (f *FleetView) RegionUtilisationBP(popRegion string) (int, bool) {
	_, byID, ok := f.current()
	if !ok {
		return 0, false
	}
	pop, ok := byID[popRegion]
	return pop.UtilisationBP, ok
}
