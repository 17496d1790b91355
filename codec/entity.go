package codec

import "slices"

// Protocol constants carried over from the reference system
// (libs/v6/egbe-protocol: GROUND_REPLICATION_HZ, GROUND_REPLICATION_MAX_BPS,
// GROUND_VISIBLE_AGENT_CAP, GROUND_VISIBLE_PLAYER_CAP).
const (
	// ProtocolVersion is the only ClientHello.protocol_version this edge
	// speaks; anything else is REJECTED with CodeUnsupportedVersion.
	ProtocolVersion = 1

	// GroundReplicationHz is the replication (and presence) cadence.
	GroundReplicationHz = 20

	// GroundReplicationMaxBps is the per-client replication ceiling in
	// bits per second (256 kbit/s).
	GroundReplicationMaxBps = 256_000

	// GroundReplicationMaxBytesPerTick is the ceiling spread evenly over
	// the ticks of one second: 256000 / 8 / 20 = 1600 bytes.
	GroundReplicationMaxBytesPerTick = GroundReplicationMaxBps / 8 / GroundReplicationHz

	// GroundVisibleAgentCap and GroundVisiblePlayerCap bound one client's
	// interest window. Project never returns more than these, whatever the
	// Window asks for.
	GroundVisibleAgentCap  = 32
	GroundVisiblePlayerCap = 8

	// DefaultInterestRadiusMM is the interest radius used when a client does
	// not ask for one (PresencePacket.radius_mm == 0): 60 m. The reference
	// fixes the caps but not a radius; 60 m is conversational-to-landmark
	// range on the ground, and at crowd densities where more than 32 agents
	// stand within it the agent cap, not the radius, does the culling.
	DefaultInterestRadiusMM = 60_000

	// MaxInterestRadiusMM bounds a radius a client may request (200 m);
	// WindowFor clamps to it. Project itself honours any radius.
	MaxInterestRadiusMM = 200_000
)

// Entity is the plain, pointer-free form of EntityState used on the hot
// path. Positions are integer millimetres on the world plane (Z is height).
// Two Entities are equal (==) exactly when their wire encodings are.
type Entity struct {
	ID          uint32
	Kind        EntityKind
	X, Y, Z     int32
	HeadingMdeg int32
	Activity    uint32
	Salience    uint32
}

// IsPlayer reports whether e counts against the player cap. Every other
// kind (AGENT, and UNSPECIFIED or unknown kinds) counts as an agent.
func (e *Entity) IsPlayer() bool { return e.Kind == EntityKind_PLAYER }

// EntityToProto converts e to its wire message. Position is always set,
// even at the origin, so that AppendSnapshotEnvelope/AppendDeltaEnvelope
// (which always write it) are byte-identical to proto.Marshal of the result.
func EntityToProto(e Entity) *EntityState {
	return &EntityState{
		Id:          e.ID,
		Kind:        e.Kind,
		Position:    &Vec3{XMm: e.X, YMm: e.Y, ZMm: e.Z},
		HeadingMdeg: e.HeadingMdeg,
		Activity:    e.Activity,
		Salience:    e.Salience,
	}
}

// EntityFromProto converts a wire message; a nil message or position reads
// as zero.
func EntityFromProto(s *EntityState) Entity {
	p := s.GetPosition()
	return Entity{
		ID:          s.GetId(),
		Kind:        s.GetKind(),
		X:           p.GetXMm(),
		Y:           p.GetYMm(),
		Z:           p.GetZMm(),
		HeadingMdeg: s.GetHeadingMdeg(),
		Activity:    s.GetActivity(),
		Salience:    s.GetSalience(),
	}
}

// World is one decoded instance snapshot. Entities are sorted by ID
// ascending; IDs are unique.
type World struct {
	InstanceID   string
	Sequence     uint64
	ServerTimeMs uint64
	Entities     []Entity
}

// FromSnapshot replaces w with s, reusing the capacity of w.Entities, and
// sorts the entities by ID. If s repeats an ID, the last occurrence wins.
// A nil s empties w.
func (w *World) FromSnapshot(s *AgentStateSnapshot) {
	w.InstanceID = s.GetInstanceId()
	w.Sequence = s.GetSequence()
	w.ServerTimeMs = s.GetServerTimeMs()
	ents := w.Entities[:0]
	for _, es := range s.GetEntities() {
		ents = append(ents, EntityFromProto(es))
	}
	w.Entities = SortEntities(ents)
}

// ToSnapshot converts w to its wire message.
func (w *World) ToSnapshot() *AgentStateSnapshot {
	s := &AgentStateSnapshot{
		InstanceId:   w.InstanceID,
		Sequence:     w.Sequence,
		ServerTimeMs: w.ServerTimeMs,
	}
	if len(w.Entities) > 0 {
		s.Entities = make([]*EntityState, len(w.Entities))
		for i, e := range w.Entities {
			s.Entities[i] = EntityToProto(e)
		}
	}
	return s
}

// ApplyDelta moves w from d.base_sequence to d.sequence. A delta whose base
// is neither w.Sequence nor 0 ("from empty") is refused with
// ErrBaseMismatch and w is left unchanged; a delta for another instance is
// refused the same way. It allocates (it is for test clients and tools, not
// the edge's packet path).
func (w *World) ApplyDelta(d *AgentStateDelta) error {
	if d == nil {
		return ErrMalformed
	}
	if d.GetInstanceId() != w.InstanceID && w.InstanceID != "" {
		return ErrBaseMismatch
	}
	base := w.Entities
	switch d.GetBaseSequence() {
	case 0:
		base = nil
	case w.Sequence:
	default:
		return ErrBaseMismatch
	}
	ups := make([]Entity, 0, len(d.GetUpserts()))
	for _, u := range d.GetUpserts() {
		ups = append(ups, EntityFromProto(u))
	}
	w.Entities = Apply(make([]Entity, 0, len(base)+len(ups)), base, ups, d.GetRemovedIds())
	w.InstanceID = d.GetInstanceId()
	w.Sequence = d.GetSequence()
	w.ServerTimeMs = d.GetServerTimeMs()
	return nil
}

// SortEntities sorts ents by ID in place without allocating and drops
// duplicate IDs (the later element in the input order wins). It returns
// the possibly shortened slice.
func SortEntities(ents []Entity) []Entity {
	if !entitiesSorted(ents) {
		slices.SortStableFunc(ents, cmpEntityID)
	}
	// Drop duplicates, keeping the last of each run (stable sort kept
	// input order within a run).
	out := 0
	for i := range ents {
		if i+1 < len(ents) && ents[i+1].ID == ents[i].ID {
			continue
		}
		ents[out] = ents[i]
		out++
	}
	return ents[:out]
}

func cmpEntityID(a, b Entity) int {
	switch {
	case a.ID < b.ID:
		return -1
	case a.ID > b.ID:
		return 1
	}
	return 0
}

// entitiesSorted reports whether ents is strictly ascending by ID.
func entitiesSorted(ents []Entity) bool {
	for i := 1; i < len(ents); i++ {
		if ents[i].ID <= ents[i-1].ID {
			return false
		}
	}
	return true
}

func idsSorted(ids []uint32) bool {
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return false
		}
	}
	return true
}

// findEntity returns the index of id in ents (sorted by ID).
func findEntity(ents []Entity, id uint32) (int, bool) {
	lo, hi := 0, len(ents)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ents[m].ID < id {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(ents) && ents[lo].ID == id
}
