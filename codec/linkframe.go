package codec

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The edge's side of the shard link's per-tick frames (link.proto).
// DecodeShardFrame reads snapshots, action acks and pongs with protowire
// into a reused ShardFrame, without reflection and without allocating once
// warm; the rarer frames (hello, events, opened, squad, error) go to the
// generated code. The result is what proto.Unmarshal gives for the same
// bytes (FuzzDecodeShardFrame). AppendPresenceFrame writes the one
// per-tick edge frame the same way.

// ShardKind is which LinkShardFrame message a ShardFrame carries: the
// oneof's field number.
type ShardKind uint8

// LinkShardFrame oneof members (link.proto field numbers).
const (
	ShardHelloKind        ShardKind = 1
	ShardPongKind         ShardKind = 2
	ShardSnapshotKind     ShardKind = 3
	ShardEventKind        ShardKind = 4
	ShardOpenedKind       ShardKind = 5
	ShardActionAckKind    ShardKind = 6
	ShardSessionEventKind ShardKind = 7
	ShardSquadKind        ShardKind = 8
	ShardErrorKind        ShardKind = 9
)

// Field numbers of the link frames (link.proto).
const (
	fnFrameSession       = 15 // LinkEdgeFrame.session, LinkShardFrame.session
	fnEdgePresence       = 5  // LinkEdgeFrame.presence
	fnPongNonce          = 1
	fnPongEdgeTime       = 2
	fnPongShardTime      = 3
	fnPongSessions       = 4
	fnActionAckID        = 1
	fnEnvServerActionAck = 8 // ServerEnvelope.action_ack
	fnEnvServerPong      = 9 // ServerEnvelope.pong
)

// ShardFrame is one decoded shard -> edge frame, reused by a link reader.
// Kind says which field holds it: Snapshot (sorted by ID, as
// World.FromSnapshot leaves it), ActionAck and the Pong fields for the
// per-tick frames; Msg (decoded by the generated code) for the rest.
type ShardFrame struct {
	Session uint32 // LinkShardFrame.session
	Kind    ShardKind

	Snapshot  World
	ActionAck uint64 // ActionAck.action_id

	PongNonce       uint64
	PongEdgeTimeNs  int64
	PongShardTimeMs uint64
	PongSessions    uint32

	Msg LinkShardFrame

	ids []string // instance ids seen: a snapshot's id is interned, not allocated
}

// maxInterned bounds ShardFrame's instance-id table; ids beyond it are
// allocated per snapshot.
const maxInterned = 256

// DecodeShardFrame decodes one shard -> edge frame body into f, replacing
// its contents (f.Snapshot's entity array is reused). A frame that does not
// decode, or carries no known message, is ErrMalformed. The caller bounds
// the frame's size.
func DecodeShardFrame(b []byte, f *ShardFrame) error {
	f.Kind, f.Session = 0, 0
	for rest := b; len(rest) > 0; {
		num, typ, n := consumeTag(rest)
		if n < 0 {
			return malformed("undecodable link frame", protowire.ParseError(n))
		}
		rest = rest[n:]
		switch {
		case num == fnFrameSession && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(rest)
			if n < 0 {
				return malformed("undecodable link frame", protowire.ParseError(n))
			}
			rest = rest[n:]
			f.Session = uint32(v)
			continue
		case typ == protowire.BytesType && num >= 1 && num <= 9:
			v, n := protowire.ConsumeBytes(rest)
			if n < 0 {
				return malformed("undecodable link frame", protowire.ParseError(n))
			}
			rest = rest[n:]
			k := ShardKind(num)
			var ok bool
			switch k {
			case ShardSnapshotKind:
				if f.Kind != k {
					f.Snapshot.InstanceID, f.Snapshot.Sequence, f.Snapshot.ServerTimeMs = "", 0, 0
					f.Snapshot.Entities = f.Snapshot.Entities[:0]
				}
				ok = f.mergeSnapshot(v)
			case ShardActionAckKind:
				if f.Kind != k {
					f.ActionAck = 0
				}
				ok = mergeUint64Field(v, fnActionAckID, &f.ActionAck)
			case ShardPongKind:
				if f.Kind != k {
					f.PongNonce, f.PongEdgeTimeNs, f.PongShardTimeMs, f.PongSessions = 0, 0, 0, 0
				}
				ok = f.mergePong(v)
			default:
				return f.decodeSlow(b)
			}
			if !ok {
				return malformed("undecodable link frame", nil)
			}
			f.Kind = k
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, rest)
		if n < 0 {
			return malformed("undecodable link frame", protowire.ParseError(n))
		}
		rest = rest[n:]
	}
	switch f.Kind {
	case 0:
		return malformed("link frame carries no known message", nil)
	case ShardSnapshotKind:
		f.Snapshot.Entities = SortEntities(f.Snapshot.Entities)
	}
	return nil
}

// decodeSlow decodes b with the generated code and fills the plain fields
// from it.
func (f *ShardFrame) decodeSlow(b []byte) error {
	if err := binUnmarshal.Unmarshal(b, &f.Msg); err != nil {
		return malformed("undecodable link frame", err)
	}
	f.Session = f.Msg.GetSession()
	switch m := f.Msg.Msg.(type) {
	case nil:
		return malformed("link frame carries no known message", nil)
	case *LinkShardFrame_Hello:
		f.Kind = ShardHelloKind
	case *LinkShardFrame_Pong:
		f.Kind = ShardPongKind
		f.PongNonce, f.PongEdgeTimeNs = m.Pong.GetNonce(), m.Pong.GetEdgeTimeNs()
		f.PongShardTimeMs, f.PongSessions = m.Pong.GetShardTimeMs(), m.Pong.GetSessions()
	case *LinkShardFrame_Snapshot:
		f.Kind = ShardSnapshotKind
		f.Snapshot.FromSnapshot(m.Snapshot)
	case *LinkShardFrame_Event:
		f.Kind = ShardEventKind
	case *LinkShardFrame_Opened:
		f.Kind = ShardOpenedKind
	case *LinkShardFrame_ActionAck:
		f.Kind = ShardActionAckKind
		f.ActionAck = m.ActionAck.GetActionId()
	case *LinkShardFrame_SessionEvent:
		f.Kind = ShardSessionEventKind
	case *LinkShardFrame_Squad:
		f.Kind = ShardSquadKind
	case *LinkShardFrame_Error:
		f.Kind = ShardErrorKind
	}
	return nil
}

func (f *ShardFrame) mergePong(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case fnPongNonce:
				f.PongNonce = v
			case fnPongEdgeTime:
				f.PongEdgeTimeNs = int64(v)
			case fnPongShardTime:
				f.PongShardTimeMs = v
			case fnPongSessions:
				f.PongSessions = uint32(v)
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// mergeSnapshot merges an AgentStateSnapshot body into f.Snapshot
// (entities are appended; SortEntities runs once the frame is read).
func (f *ShardFrame) mergeSnapshot(b []byte) bool {
	w := &f.Snapshot
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && (num == fnSnapSeq || num == fnSnapTime):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if num == fnSnapSeq {
				w.Sequence = v
			} else {
				w.ServerTimeMs = v
			}
		case typ == protowire.BytesType && (num == fnSnapInstance || num == fnSnapEntities):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if num == fnSnapInstance {
				if !utf8.Valid(v) {
					return false
				}
				w.InstanceID = f.intern(v)
				continue
			}
			w.Entities = append(w.Entities, Entity{})
			if !mergeEntity(v, &w.Entities[len(w.Entities)-1]) {
				return false
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false
			}
			b = b[n:]
		}
	}
	return true
}

// intern returns v as a string, from f's table when it was seen before.
func (f *ShardFrame) intern(v []byte) string {
	if string(v) == f.Snapshot.InstanceID {
		return f.Snapshot.InstanceID
	}
	for _, s := range f.ids {
		if string(v) == s {
			return s
		}
	}
	s := string(v)
	if len(f.ids) < maxInterned {
		f.ids = append(f.ids, s)
	}
	return s
}

// mergeEntity merges an EntityState body into e.
func mergeEntity(b []byte, e *Entity) bool {
	for len(b) > 0 {
		num, typ, n := consumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case fnEntID:
				e.ID = uint32(v)
			case fnEntKind:
				e.Kind = EntityKind(int32(v))
			case fnEntHeading:
				e.HeadingMdeg = asSint32(v)
			case fnEntActivity:
				e.Activity = uint32(v)
			case fnEntSalience:
				e.Salience = uint32(v)
			}
		case typ == protowire.BytesType && num == fnEntPosition:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			p := Point{e.X, e.Y, e.Z}
			if !mergePoint(v, &p) {
				return false
			}
			e.X, e.Y, e.Z = p.X, p.Y, p.Z
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false
			}
			b = b[n:]
		}
	}
	return true
}

// AppendPresenceFrame appends one length-prefixed LinkEdgeFrame{session,
// presence: p} to b, as proto.Marshal would write the body. It does not
// allocate when b has the capacity (PresenceFrameSize).
func AppendPresenceFrame(b []byte, session uint32, p *Presence) []byte {
	ps := presenceSize(p)
	body := sizeBytes(ps) + sizeUint(uint64(session))
	b = protowire.AppendVarint(b, uint64(body))
	b = appendUint(b, fnFrameSession, uint64(session)) // the generated code writes it before the oneof
	b = protowire.AppendTag(b, fnEdgePresence, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(ps))
	return appendPresence(b, p)
}

// PresenceFrameSize is len(AppendPresenceFrame(nil, session, p)).
func PresenceFrameSize(session uint32, p *Presence) int {
	body := sizeBytes(presenceSize(p)) + sizeUint(uint64(session))
	return protowire.SizeVarint(uint64(body)) + body
}

// AppendLinkFrame appends m, length-prefixed, to b (the generated code:
// for the frames that are not per tick).
func AppendLinkFrame(b []byte, m proto.Message) ([]byte, error) {
	start := len(b)
	b = append(b, 0, 0, 0, 0) // room for a length of up to 2^28
	out, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return b[:start], malformed("unencodable link frame", err)
	}
	n := len(out) - start - 4
	k := protowire.SizeVarint(uint64(n))
	if k > 4 {
		return b[:start], &WireError{Code: CodeFrameTooLarge, Message: "link frame too large", Err: ErrFrameTooLarge}
	}
	copy(out[start+k:], out[start+4:])
	out = out[:len(out)-(4-k)]
	protowire.AppendVarint(out[start:start], uint64(n))
	return out, nil
}

// AppendPongEnvelope appends ServerEnvelope{pong: Pong{clientMs, serverMs}}
// in binary form without allocating (given the capacity).
func AppendPongEnvelope(b []byte, clientMs, serverMs uint64) []byte {
	n := sizeUint(clientMs) + sizeUint(serverMs)
	b = protowire.AppendTag(b, fnEnvServerPong, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = appendUint(b, 1, clientMs)
	return appendUint(b, 2, serverMs)
}

// AppendActionAckEnvelope appends ServerEnvelope{action_ack:
// ActionAck{id}} in binary form without allocating (given the capacity).
func AppendActionAckEnvelope(b []byte, id uint64) []byte {
	b = protowire.AppendTag(b, fnEnvServerActionAck, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(sizeUint(id)))
	return appendUint(b, fnActionAckID, id)
}
