package codec

import "google.golang.org/protobuf/encoding/protowire"

// Hand-written encoders for the two per-tick messages. They write a
// ServerEnvelope straight into a byte slice with protowire and produce
// exactly the bytes proto.Marshal gives for the equivalent message (fields
// in number order, proto3 zero values omitted, removed_ids packed), with
// EntityState.position always present (see EntityToProto). Tests pin this
// against proto.MarshalOptions{Deterministic: true}.
//
// Layout (field numbers from egbe.proto):
//
//	ServerEnvelope  2:snapshot | 3:delta            (length-delimited)
//	Snapshot        1:instance_id 2:sequence 3:server_time_ms 4:entities*
//	Delta           1:instance_id 2:base_sequence 3:sequence
//	                4:server_time_ms 5:upserts* 6:removed_ids (packed varint)
//	EntityState     1:id 2:kind 3:position{1:x 2:y 3:z, sint32}
//	                4:heading_mdeg (sint32) 5:activity 6:salience
//
// instanceID must be valid UTF-8 (proto3 strings are; proto.Marshal and
// every decoder refuse otherwise).

const (
	fnEnvSnapshot = 2
	fnEnvDelta    = 3

	fnSnapInstance = 1
	fnSnapSeq      = 2
	fnSnapTime     = 3
	fnSnapEntities = 4

	fnDeltaInstance = 1
	fnDeltaBaseSeq  = 2
	fnDeltaSeq      = 3
	fnDeltaTime     = 4
	fnDeltaUpserts  = 5
	fnDeltaRemoved  = 6

	fnEntID       = 1
	fnEntKind     = 2
	fnEntPosition = 3
	fnEntHeading  = 4
	fnEntActivity = 5
	fnEntSalience = 6

	fnVecX = 1
	fnVecY = 2
	fnVecZ = 3
)

// All field numbers here are < 16, so every tag is one byte.
const tagSize = 1

func sizeUint(v uint64) int {
	if v == 0 {
		return 0
	}
	return tagSize + protowire.SizeVarint(v)
}

func sizeSint(v int32) int {
	if v == 0 {
		return 0
	}
	return tagSize + protowire.SizeVarint(protowire.EncodeZigZag(int64(v)))
}

func sizeBytes(n int) int { return tagSize + protowire.SizeBytes(n) }

func sizeString(s string) int {
	if s == "" {
		return 0
	}
	return sizeBytes(len(s))
}

// appendVarint is protowire.AppendVarint with the sizes an entity's fields
// take (ids, millimetres, millidegrees: up to 3 bytes) written inline.
func appendVarint(b []byte, v uint64) []byte {
	switch {
	case v < 1<<7:
		return append(b, byte(v))
	case v < 1<<14:
		return append(b, byte(v)|0x80, byte(v>>7))
	case v < 1<<21:
		return append(b, byte(v)|0x80, byte(v>>7)|0x80, byte(v>>14))
	}
	return protowire.AppendVarint(b, v)
}

// appendUint and appendSint write a varint field (tag numbers < 16: one
// byte), omitted when zero as proto3 does.
func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(append(b, byte(num)<<3|byte(protowire.VarintType)), v)
}

func appendSint(b []byte, num protowire.Number, v int32) []byte {
	if v == 0 {
		return b
	}
	return appendVarint(append(b, byte(num)<<3|byte(protowire.VarintType)), protowire.EncodeZigZag(int64(v)))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func vecSize(e *Entity) int {
	return sizeSint(e.X) + sizeSint(e.Y) + sizeSint(e.Z)
}

// entitySize is the size of one EntityState body (without its tag/length).
func entitySize(e *Entity) int {
	return sizeUint(uint64(e.ID)) +
		sizeUint(uint64(int64(e.Kind))) + // enums are int32: negatives sign-extend
		sizeBytes(vecSize(e)) +
		sizeSint(e.HeadingMdeg) +
		sizeUint(uint64(e.Activity)) +
		sizeUint(uint64(e.Salience))
}

// maxEntitySize bounds one EntityState body: id 6 + kind 11 + position
// (2 + 3×6) + heading 6 + activity 6 + salience 6 = 55 bytes. Below 128,
// so an entity's (and a position's) length prefix is always one byte and
// can be patched in after the body is written.
const maxEntitySize = 55

func appendEntity(b []byte, num protowire.Number, e *Entity) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = append(b, 0)
	at := len(b)
	b = appendUint(b, fnEntID, uint64(e.ID))
	b = appendUint(b, fnEntKind, uint64(int64(e.Kind)))
	b = append(b, byte(fnEntPosition<<3|protowire.BytesType), 0)
	pos := len(b)
	b = appendSint(b, fnVecX, e.X)
	b = appendSint(b, fnVecY, e.Y)
	b = appendSint(b, fnVecZ, e.Z)
	b[pos-1] = byte(len(b) - pos)
	b = appendSint(b, fnEntHeading, e.HeadingMdeg)
	b = appendUint(b, fnEntActivity, uint64(e.Activity))
	b = appendUint(b, fnEntSalience, uint64(e.Salience))
	b[at-1] = byte(len(b) - at)
	return b
}

// reserveLen appends room for a length prefix of a body of at most bound
// bytes and returns where the body starts.
func reserveLen(b []byte, bound int) ([]byte, int, int) {
	k := protowire.SizeVarint(uint64(bound))
	for range k {
		b = append(b, 0)
	}
	return b, len(b), k
}

// patchLen writes the length of the body b[start:] into the k bytes
// reserved before it, moving the body down if its varint is shorter.
func patchLen(b []byte, start, k int) []byte {
	n := len(b) - start
	w := protowire.SizeVarint(uint64(n))
	at := start - k
	if w < k {
		copy(b[at+w:], b[start:])
		b = b[:len(b)-(k-w)]
	}
	protowire.AppendVarint(b[at:at], uint64(n))
	return b
}

func entitiesSize(ents []Entity) int {
	n := 0
	for i := range ents {
		n += sizeBytes(entitySize(&ents[i]))
	}
	return n
}

func packedSize(ids []uint32) int {
	n := 0
	for _, id := range ids {
		n += protowire.SizeVarint(uint64(id))
	}
	return n
}

// SnapshotEnvelopeSize is len(AppendSnapshotEnvelope(nil, ...)).
func SnapshotEnvelopeSize(instanceID string, seq, serverTimeMs uint64, ents []Entity) int {
	return sizeBytes(snapshotSize(instanceID, seq, serverTimeMs, ents))
}

func snapshotSize(instanceID string, seq, serverTimeMs uint64, ents []Entity) int {
	return sizeString(instanceID) + sizeUint(seq) + sizeUint(serverTimeMs) + entitiesSize(ents)
}

// AppendSnapshotEnvelope appends to b a ServerEnvelope{snapshot:
// AgentStateSnapshot{instanceID, seq, serverTimeMs, ents}} in protobuf
// binary form. It does not allocate when b has the capacity: lengths are
// reserved at an upper bound and patched afterwards, so it needs up to
// ~2 bytes beyond SnapshotEnvelopeSize of spare capacity (MaxMessageSize
// is always enough for a window's worth).
func AppendSnapshotEnvelope(b []byte, instanceID string, seq, serverTimeMs uint64, ents []Entity) []byte {
	b = protowire.AppendTag(b, fnEnvSnapshot, protowire.BytesType)
	b, start, k := reserveLen(b, sizeString(instanceID)+2*(tagSize+protowire.SizeVarint(1<<63))+
		len(ents)*(tagSize+1+maxEntitySize))
	b = appendString(b, fnSnapInstance, instanceID)
	b = appendUint(b, fnSnapSeq, seq)
	b = appendUint(b, fnSnapTime, serverTimeMs)
	for i := range ents {
		b = appendEntity(b, fnSnapEntities, &ents[i])
	}
	return patchLen(b, start, k)
}

// DeltaEnvelopeSize is len(AppendDeltaEnvelope(nil, ...)): what the budget
// is charged for one delta.
func DeltaEnvelopeSize(instanceID string, baseSeq, seq, serverTimeMs uint64, ups []Entity, rms []uint32) int {
	return sizeBytes(deltaSize(instanceID, baseSeq, seq, serverTimeMs, ups, rms))
}

func deltaSize(instanceID string, baseSeq, seq, serverTimeMs uint64, ups []Entity, rms []uint32) int {
	n := sizeString(instanceID) + sizeUint(baseSeq) + sizeUint(seq) + sizeUint(serverTimeMs) + entitiesSize(ups)
	if len(rms) > 0 {
		n += sizeBytes(packedSize(rms))
	}
	return n
}

// AppendDeltaEnvelope appends to b a ServerEnvelope{delta:
// AgentStateDelta{instanceID, baseSeq, seq, serverTimeMs, ups, rms}} in
// protobuf binary form. It does not allocate when b has the capacity
// (DeltaEnvelopeSize plus a few bytes; see AppendSnapshotEnvelope).
func AppendDeltaEnvelope(b []byte, instanceID string, baseSeq, seq, serverTimeMs uint64, ups []Entity, rms []uint32) []byte {
	b = protowire.AppendTag(b, fnEnvDelta, protowire.BytesType)
	b, start, k := reserveLen(b, sizeString(instanceID)+3*(tagSize+protowire.SizeVarint(1<<63))+
		len(ups)*(tagSize+1+maxEntitySize)+tagSize+protowire.SizeVarint(uint64(5*len(rms)))+5*len(rms))
	b = appendString(b, fnDeltaInstance, instanceID)
	b = appendUint(b, fnDeltaBaseSeq, baseSeq)
	b = appendUint(b, fnDeltaSeq, seq)
	b = appendUint(b, fnDeltaTime, serverTimeMs)
	for i := range ups {
		b = appendEntity(b, fnDeltaUpserts, &ups[i])
	}
	if len(rms) > 0 {
		b = protowire.AppendTag(b, fnDeltaRemoved, protowire.BytesType)
		var pstart, pk int
		b, pstart, pk = reserveLen(b, 5*len(rms))
		for _, id := range rms {
			b = protowire.AppendVarint(b, uint64(id))
		}
		b = patchLen(b, pstart, pk)
	}
	return patchLen(b, start, k)
}
