package admission

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// Events is the operator's events file: what a booking system and the
// partner desk know that neither the policy nor the topology can. Decoded
// strictly; every entry is validated.
//
//	{"version": 1,
//	 "events": [{"id": "saraswati-opening", "pop": "us-east-1",
//	             "start": "2026-06-01T19:00:00Z", "end": "2026-06-01T21:00:00Z",
//	             "prewarmMinutes": 30, "reservedSessions": 200, "walkUpSlots": 50,
//	             "priority": 4, "attendees": ["user-1", "user-2"],
//	             "concert": {"codec": "H264", "sfus": [{"id": "SFU", "seats": 250}]}}],
//	 "grants": [{"subject": "instructor-7", "maxSessions": 6, "reason": "verified instructor"}],
//	 "institutions": [{"name": "Lagos Polytechnic", "networks": ["198.51.100.0/24"]}]}
//
// An event's booked attendees are inside a paid booked window from
// start-prewarm to end: exempt from the free-tier budget, the walk-up pool
// and backpressure, and a bypass lane of the waiting room (the pre-warm
// lane). While it runs (prewarm included) its POP holds reservedSessions
// back from everyone else, and a free request naming the event (event_id)
// without a booking is a walk-up: it takes one of walkUpSlots, fleet-wide,
// or falls back. Requests naming the event get priority added at its POP.
// A grant lifts a subject's Pixel Streaming cap; an institution's networks
// get the institutional network cap. A concert (optional) is served by
// SFUs: every match naming it takes a seat on one of them (fleet-wide)
// instead of a whole streamer.
type Events struct {
	Version      int           `json:"version"`
	Events       []Event       `json:"events"`
	Grants       []Grant       `json:"grants"`
	Institutions []Institution `json:"institutions"`

	grants   map[string]UserGrant // built by Validate
	networks []netip.Prefix       // built by Validate
}

// Event is one scheduled event (a concert) at a POP.
type Event struct {
	ID               string    `json:"id"`
	POP              string    `json:"pop"`
	Start            time.Time `json:"start"`
	End              time.Time `json:"end"`
	PrewarmMinutes   int       `json:"prewarmMinutes"`
	ReservedSessions int       `json:"reservedSessions"`
	WalkUpSlots      int       `json:"walkUpSlots"`
	Priority         int       `json:"priority"`
	Attendees        []string  `json:"attendees"`
	// Concert, when set, makes this an SFU-fronted stream: a match for it
	// takes a seat on one of its SFUs instead of a whole streamer.
	Concert *Concert `json:"concert,omitempty"`
}

// Concert is how an event is streamed to many players: one UE worker
// fanned out by SFUs (Epic's SFU or the edge's Go SFU), each seating so
// many players, counted fleet-wide.
type Concert struct {
	// Codec is the stream's video codec (what the UE worker encodes and
	// the SFUs forward): H264, AV1, VP8 or VP9. The match requires the
	// player to accept it. Default H264.
	Codec string `json:"codec"`
	// SFUs are the SFUs' streamer ids (their endpointId) and seats.
	SFUs []ConcertSFU `json:"sfus"`
}

// ConcertSFU is one SFU of a concert.
type ConcertSFU struct {
	ID    string `json:"id"`
	Seats int    `json:"seats"`
}

// SeatLimits is the concert's SFUs as seat limits.
func (c *Concert) SeatLimits() []state.SeatLimit {
	out := make([]state.SeatLimit, len(c.SFUs))
	for i, s := range c.SFUs {
		out[i] = state.SeatLimit{SFU: s.ID, Seats: s.Seats}
	}
	return out
}

// concertCodecs are the codecs a concert may name (the matchmaker's).
var concertCodecs = []string{"H264", "AV1", "VP8", "VP9"}

// Grant lifts one subject's Pixel Streaming concurrency cap.
type Grant struct {
	Subject     string `json:"subject"`
	MaxSessions int    `json:"maxSessions"`
	Reason      string `json:"reason"`
}

// Institution is an approved institution: its networks get the
// institutional network cap (64 by default instead of 8).
type Institution struct {
	Name     string   `json:"name"`
	Networks []string `json:"networks"`
}

// maxEventsBytes bounds the events file.
const maxEventsBytes = 4 << 20

// LoadEvents reads and validates an events file.
func LoadEvents(path string) (*Events, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEvents, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxEventsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEvents, err)
	}
	if len(b) > maxEventsBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrEvents, maxEventsBytes)
	}
	return ParseEvents(b)
}

// ParseEvents decodes an events document strictly and validates it.
func ParseEvents(b []byte) (*Events, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var ev Events
	if err := dec.Decode(&ev); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEvents, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the events object", ErrEvents)
	}
	if err := ev.Validate(); err != nil {
		return nil, err
	}
	return &ev, nil
}

// Validate checks every entry and builds the lookup tables.
func (ev *Events) Validate() error {
	bad := func(f string, args ...any) error { return fmt.Errorf("%w: "+f, append([]any{ErrEvents}, args...)...) }
	if ev.Version != 1 {
		return bad("version %d, want 1", ev.Version)
	}
	ids := map[string]bool{}
	for i, e := range ev.Events {
		switch {
		case e.ID == "" || ids[e.ID]:
			return bad("events[%d]: id %q empty or repeated", i, e.ID)
		case e.POP == "":
			return bad("event %s: pop required", e.ID)
		case e.Start.IsZero() || !e.End.After(e.Start):
			return bad("event %s: need start < end", e.ID)
		case e.PrewarmMinutes < 0 || e.ReservedSessions < 0 || e.WalkUpSlots < 0 || e.Priority < 0:
			return bad("event %s: prewarmMinutes, reservedSessions, walkUpSlots and priority must not be negative", e.ID)
		case strings.ContainsAny(e.ID, "{}"):
			return bad("event %s: id must not contain { or }", e.ID)
		}
		if c := e.Concert; c != nil {
			if c.Codec == "" {
				c.Codec = "H264"
			}
			i := slices.IndexFunc(concertCodecs, func(n string) bool { return strings.EqualFold(n, c.Codec) })
			if i < 0 {
				return bad("event %s: concert codec %q: want one of %v", e.ID, c.Codec, concertCodecs)
			}
			c.Codec = concertCodecs[i]
			if len(c.SFUs) == 0 {
				return bad("event %s: concert needs at least one sfu", e.ID)
			}
			sfus := map[string]bool{}
			for j, f := range c.SFUs {
				if f.ID == "" || sfus[f.ID] || f.Seats < 1 {
					return bad("event %s: concert sfus[%d]: id %q empty or repeated, or seats %d < 1", e.ID, j, f.ID, f.Seats)
				}
				sfus[f.ID] = true
			}
		}
		ids[e.ID] = true
	}
	ev.grants = map[string]UserGrant{}
	for i, g := range ev.Grants {
		if g.Subject == "" || g.MaxSessions < 1 {
			return bad("grants[%d]: subject and maxSessions >= 1 required", i)
		}
		ev.grants[g.Subject] = UserGrant{MaxSessions: g.MaxSessions, Reason: g.Reason}
	}
	ev.networks = nil
	for i, in := range ev.Institutions {
		if in.Name == "" || len(in.Networks) == 0 {
			return bad("institutions[%d]: name and networks required", i)
		}
		for _, n := range in.Networks {
			p, err := netip.ParsePrefix(n)
			if err != nil {
				return bad("institution %s: network %q: %v", in.Name, n, err)
			}
			ev.networks = append(ev.networks, p.Masked())
		}
	}
	return nil
}

// Grant is subject's cap grant, or nil.
func (ev *Events) Grant(subject string) *UserGrant {
	if ev == nil {
		return nil
	}
	if g, ok := ev.grants[subject]; ok {
		return &g
	}
	return nil
}

// InstitutionApproved reports whether ip is inside an approved
// institution's networks.
func (ev *Events) InstitutionApproved(ip netip.Addr) bool {
	if ev == nil || !ip.IsValid() {
		return false
	}
	ip = ip.Unmap()
	for _, p := range ev.networks {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// window reports whether now is inside e's window, pre-warm included.
func (e *Event) window(now time.Time) bool {
	return !now.Before(e.Start.Add(-time.Duration(e.PrewarmMinutes)*time.Minute)) && now.Before(e.End)
}

// Booked is the event subject has booked whose window (pre-warm included)
// holds now, or nil.
func (ev *Events) Booked(subject string, now time.Time) *Event {
	if ev == nil || subject == "" {
		return nil
	}
	for i := range ev.Events {
		e := &ev.Events[i]
		if e.window(now) && slices.Contains(e.Attendees, subject) {
			return e
		}
	}
	return nil
}

// InPrewarmWindow implements PrewarmOracle: a booked attendee inside a
// paid event's window rides the waiting room's pre-warm bypass lane.
func (ev *Events) InPrewarmWindow(subject string, now time.Time) bool {
	return ev.Booked(subject, now) != nil
}

// Running is the event with id whose window holds now, or nil.
func (ev *Events) Running(id string, now time.Time) *Event {
	if ev == nil || id == "" {
		return nil
	}
	for i := range ev.Events {
		if e := &ev.Events[i]; e.ID == id && e.window(now) {
			return e
		}
	}
	return nil
}

// HeldBack is, per POP, the sessions running events hold back from
// subject (every event subject has not booked).
func (ev *Events) HeldBack(subject string, now time.Time) map[string]int {
	if ev == nil {
		return nil
	}
	var out map[string]int
	for i := range ev.Events {
		e := &ev.Events[i]
		if e.ReservedSessions == 0 || !e.window(now) || slices.Contains(e.Attendees, subject) {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		out[e.POP] += e.ReservedSessions
	}
	return out
}
