package sfu

import (
	"slices"

	"github.com/oshun/egbe-edge/auth"
)

// member is the voice state of one realtime session: what the realtime
// layer told us (position, squads, mutes) whether or not it has joined
// voice yet. Guarded by SFU.mu.
type member struct {
	sessionID string
	pos       [3]int32 // millimetres
	hasPos    bool
	rankedPos [3]int32 // position at the last recompute
	squads    map[string]struct{}
	muted     map[uint32]struct{} // speaker entity ids
	peer      *peer               // the joined voice peer, if any
}

// policy is a peer's parental-control view, from its access token.
type policy struct {
	mode    string              // auth.Voice*
	friends map[string]struct{} // subjects, for friends-only
}

func newPolicy(a auth.Access) policy {
	p := policy{mode: a.Voice}
	if len(a.Friends) > 0 {
		p.friends = make(map[string]struct{}, len(a.Friends))
		for _, f := range a.Friends {
			p.friends[f] = struct{}{}
		}
	}
	return p
}

// allows reports whether p's owner may hear or be heard by other.
func (p policy) allows(other *peer, squad bool) bool {
	switch p.mode {
	case auth.VoiceOpen:
		return true
	case auth.VoiceSquadOnly:
		return squad
	case auth.VoiceFriendsOnly:
		if squad {
			return true
		}
		_, ok := p.friends[other.subject]
		return ok
	default: // auth.VoiceOff and any unknown mode: fail closed
		return false
	}
}

func shareSquad(a, b *member) bool {
	if len(a.squads) > len(b.squads) {
		a, b = b, a
	}
	for s := range a.squads {
		if _, ok := b.squads[s]; ok {
			return true
		}
	}
	return false
}

func dist2(a, b *member) int64 {
	dx := int64(a.pos[0]) - int64(b.pos[0])
	dy := int64(a.pos[1]) - int64(b.pos[1])
	dz := int64(a.pos[2]) - int64(b.pos[2])
	return dx*dx + dy*dy + dz*dz
}

// candidate is an eligible speaker with its ranking keys.
type candidate struct {
	sp    *peer
	squad bool
	level int // smoothed loudness bucket, higher is louder
	d2    int64
}

// eligible reports whether listener l may hear speaker sp, and the
// ranking keys when it may. Guarded by SFU.mu.
func (s *SFU) eligible(l, sp *peer) (candidate, bool) {
	if l == sp || !sp.hasMic.Load() || l.room != sp.room {
		return candidate{}, false
	}
	lm, sm := l.m, sp.m
	if _, muted := lm.muted[sp.entityID]; muted {
		return candidate{}, false
	}
	squad := shareSquad(lm, sm)
	if !l.policy.allows(sp, squad) || !sp.policy.allows(l, squad) {
		return candidate{}, false
	}
	var d2 int64 = -1
	if lm.hasPos && sm.hasPos {
		d2 = dist2(lm, sm)
	}
	r := s.cfg.ProximityRangeMM
	if !squad && (d2 < 0 || d2 > r*r) {
		return candidate{}, false
	}
	if d2 < 0 {
		d2 = 1 << 62
	}
	// Quantise loudness so that distance breaks ties between speakers of
	// similar level (6 buckets per 10 dB would be noise-driven churn).
	return candidate{sp: sp, squad: squad, level: int(sp.loud.Load()) / 8, d2: d2}, true
}

// rank orders candidates: squad first, then louder, then nearer, then
// lower entity id (deterministic).
func rank(c []candidate) {
	slices.SortFunc(c, func(a, b candidate) int {
		switch {
		case a.squad != b.squad:
			if a.squad {
				return -1
			}
			return 1
		case a.level != b.level:
			return b.level - a.level
		case a.d2 != b.d2:
			if a.d2 < b.d2 {
				return -1
			}
			return 1
		}
		return int(a.sp.entityID) - int(b.sp.entityID)
	})
}

// assign fills slots (current assignment, len K) from the ranked top
// candidates, keeping speakers that stay in the top K in their slot. It
// returns how many slots changed speaker.
func assign(slots []*peer, top []candidate) (changed int) {
	next := make([]*peer, len(slots))
	placed := make(map[*peer]bool, len(top))
	for _, c := range top {
		placed[c.sp] = false
	}
	for i, sp := range slots {
		if _, ok := placed[sp]; ok && sp != nil {
			next[i] = sp
			placed[sp] = true
		}
	}
	free := 0
	for _, c := range top {
		if placed[c.sp] {
			continue
		}
		for next[free] != nil {
			free++
		}
		next[free] = c.sp
	}
	for i := range slots {
		if slots[i] != next[i] {
			changed++
			slots[i] = next[i]
		}
	}
	return changed
}
