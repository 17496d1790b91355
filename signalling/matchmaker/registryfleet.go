package matchmaker

import (
	"errors"
	"fmt"
	"time"

	"github.com/oshun/egbe-edge/signalling"
)

// RegistryFleet adapts the broker's streamer registry to Fleet. Reg may be
// set after New (the broker needs the matchmaker's Hooks before its
// registry exists), but before the first request:
//
//	fleet := &matchmaker.RegistryFleet{}
//	mm, _ := matchmaker.New(mcfg, matchmaker.Deps{Fleet: fleet, ...})
//	srv, _ := signalling.New(scfg, signalling.Deps{Leases: mm.Hooks(), ...})
//	fleet.Reg = srv.Registry()
type RegistryFleet struct{ Reg *signalling.Registry }

var _ Fleet = (*RegistryFleet)(nil)

// Streamers implements Fleet.
func (f *RegistryFleet) Streamers() []Streamer {
	snap := f.Reg.Snapshot()
	out := make([]Streamer, len(snap))
	for i, s := range snap {
		out[i] = Streamer{ID: s.ID, POP: s.POP, Codecs: s.Codecs, State: State(s.State)}
	}
	return out
}

// LeaseIdle implements Fleet.
func (f *RegistryFleet) LeaseIdle(pop, codec, sessionID string, until time.Time) (string, error) {
	s, err := f.Reg.LeaseIdle(pop, codec, sessionID, until)
	if errors.Is(err, signalling.ErrNoIdleStreamer) {
		return "", fmt.Errorf("%w: %w", ErrNoIdleStreamer, err)
	}
	if err != nil {
		return "", err
	}
	return s.ID, nil
}

// Release implements Fleet.
func (f *RegistryFleet) Release(sessionID string) { _ = f.Reg.Release(sessionID) }
