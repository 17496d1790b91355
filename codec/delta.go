package codec

// Delta semantics (AgentStateDelta): applying upserts and removed_ids to the
// entity set at base_sequence yields the set at sequence. An upsert carries
// the whole entity (no field masks): an entity either is unchanged and
// absent from the delta, or present in full. base_sequence 0 means "from
// empty" — the delta's upserts are the whole set, the client's equivalent
// of a snapshot.

// Diff appends to ups the entities of cur that are new or changed versus
// base, and to rms the IDs in base missing from cur. base and cur must be
// sorted by ID ascending (as World.Entities and Project's results are);
// ups and rms come out sorted too. Diff does not allocate when ups and rms
// have the capacity (len(cur) and len(base) are always enough).
func Diff(ups []Entity, rms []uint32, base, cur []Entity) ([]Entity, []uint32) {
	i, j := 0, 0
	for i < len(base) && j < len(cur) {
		b, c := &base[i], &cur[j]
		switch {
		case b.ID == c.ID:
			if *b != *c {
				ups = append(ups, *c)
			}
			i++
			j++
		case b.ID < c.ID:
			rms = append(rms, b.ID)
			i++
		default:
			ups = append(ups, *c)
			j++
		}
	}
	for ; i < len(base); i++ {
		rms = append(rms, base[i].ID)
	}
	ups = append(ups, cur[j:]...)
	return ups, rms
}

// Apply is Diff's inverse: it appends to dst[:0] the set base with the IDs
// in rms removed and the entities in ups inserted or replaced, sorted by
// ID, and returns it. Apply(dst, base, Diff(nil, nil, base, cur)) == cur.
//
// base must be sorted by ID. When ups and rms are sorted (as Diff and the
// edge produce them) Apply is one merge pass and does not allocate given
// the capacity; otherwise it falls back to a slower path that still gives
// the right answer (an ID both removed and upserted ends up upserted; a
// repeated upsert ID keeps the last one). dst must not alias base.
func Apply(dst []Entity, base []Entity, ups []Entity, rms []uint32) []Entity {
	dst = dst[:0]
	if !entitiesSorted(ups) || !idsSorted(rms) {
		return applySlow(dst, base, ups, rms)
	}
	i, j, k := 0, 0, 0 // base, ups, rms
	for i < len(base) {
		b := &base[i]
		for k < len(rms) && rms[k] < b.ID {
			k++
		}
		removed := k < len(rms) && rms[k] == b.ID
		for j < len(ups) && ups[j].ID < b.ID {
			dst = append(dst, ups[j])
			j++
		}
		switch {
		case j < len(ups) && ups[j].ID == b.ID:
			dst = append(dst, ups[j])
			j++
		case !removed:
			dst = append(dst, *b)
		}
		i++
	}
	return append(dst, ups[j:]...)
}

func applySlow(dst []Entity, base []Entity, ups []Entity, rms []uint32) []Entity {
	for _, b := range base {
		removed := false
		for _, id := range rms {
			if id == b.ID {
				removed = true
				break
			}
		}
		if !removed {
			dst = append(dst, b)
		}
	}
	for _, u := range ups {
		i, ok := findEntity(dst, u.ID)
		if ok {
			dst[i] = u
			continue
		}
		dst = append(dst, Entity{})
		copy(dst[i+1:], dst[i:])
		dst[i] = u
	}
	return dst
}
