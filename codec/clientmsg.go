package codec

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// The per-message client path. Presence, acks and pings are most of what a
// client sends (40+ a second each at 20 Hz); DecodeClientMsg reads them with
// protowire into a caller-owned ClientMsg, without reflection and without
// allocating. Everything else (hello, actions, squad, voice) goes to the
// generated code. The result is exactly what proto.Unmarshal gives for the
// same bytes (FuzzDecodeClientMsg holds it to that): the last member of the
// oneof wins, a repeated singular message is merged, a known field with the
// wrong wire type is an unknown field, unknown fields are skipped.

// ClientKind is which ClientEnvelope message a ClientMsg carries: the
// oneof's field number.
type ClientKind uint8

// ClientEnvelope oneof members (egbe.proto field numbers).
const (
	ClientHelloKind    ClientKind = 1
	ClientPresenceKind ClientKind = 2
	ClientActionsKind  ClientKind = 3
	ClientSquadKind    ClientKind = 4
	ClientAckKind      ClientKind = 5
	ClientPingKind     ClientKind = 6
	ClientVoiceKind    ClientKind = 7
)

// Point is a Vec3 without the pointer.
type Point struct{ X, Y, Z int32 }

// Presence is a PresencePacket without pointers. HasPosition and
// HasVelocity say whether the message carried those fields (proto3
// message fields have presence).
type Presence struct {
	Seq          uint64
	Position     Point
	HasPosition  bool
	HeadingMdeg  int32
	Velocity     Point
	HasVelocity  bool
	FocusAgentID uint32
	RadiusMM     uint32
	ClientTimeMs uint64
}

// ClientMsg is one decoded client envelope, reused from message to message
// by a session's reader. Kind says which field holds it: Presence, AckSeq
// and PingTimeMs for the per-tick messages; Env (decoded by the generated
// code) for hello, actions, squad and voice.
type ClientMsg struct {
	Kind       ClientKind
	Presence   Presence
	AckSeq     uint64 // Ack.snapshot_sequence
	PingTimeMs uint64 // Ping.client_time_ms
	Env        ClientEnvelope
}

// DecodeClientMsg decodes one client envelope (binary, or protojson when
// json is set) into m, replacing its contents. Errors are those of
// DecodeClient. Binary presence, ack and ping envelopes do not allocate.
func DecodeClientMsg(b []byte, json bool, m *ClientMsg) error {
	if len(b) > MaxMessageSize {
		return tooLarge(len(b))
	}
	m.Kind = 0
	if json {
		if err := DecodeClient(b, true, &m.Env); err != nil {
			return err
		}
		m.fromEnv()
		return nil
	}
	for rest := b; len(rest) > 0; {
		num, typ, n := consumeTag(rest)
		if n < 0 {
			return malformed("undecodable envelope", protowire.ParseError(n))
		}
		rest = rest[n:]
		if typ == protowire.BytesType && num >= 1 && num <= 7 {
			v, n := protowire.ConsumeBytes(rest)
			if n < 0 {
				return malformed("undecodable envelope", protowire.ParseError(n))
			}
			rest = rest[n:]
			k := ClientKind(num)
			var ok bool
			switch k {
			case ClientPresenceKind:
				if m.Kind != k {
					m.Presence = Presence{}
				}
				ok = m.Presence.merge(v)
			case ClientAckKind:
				if m.Kind != k {
					m.AckSeq = 0
				}
				ok = mergeUint64Field(v, 1, &m.AckSeq)
			case ClientPingKind:
				if m.Kind != k {
					m.PingTimeMs = 0
				}
				ok = mergeUint64Field(v, 1, &m.PingTimeMs)
			default:
				// Hello, actions, squad, voice: the generated code decodes
				// the whole envelope (whichever member ends up last).
				if err := DecodeClient(b, false, &m.Env); err != nil {
					return err
				}
				m.fromEnv()
				return nil
			}
			if !ok {
				return malformed("undecodable envelope", nil)
			}
			m.Kind = k
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, rest)
		if n < 0 {
			return malformed("undecodable envelope", protowire.ParseError(n))
		}
		rest = rest[n:]
	}
	if m.Kind == 0 {
		return malformed("envelope carries no known message", nil)
	}
	return nil
}

// fromEnv sets Kind (and the plain fields of a per-tick message) from Env.
func (m *ClientMsg) fromEnv() {
	switch x := m.Env.Msg.(type) {
	case *ClientEnvelope_Hello:
		m.Kind = ClientHelloKind
	case *ClientEnvelope_Presence:
		m.Kind = ClientPresenceKind
		m.Presence = PresenceFromProto(x.Presence)
	case *ClientEnvelope_Actions:
		m.Kind = ClientActionsKind
	case *ClientEnvelope_Squad:
		m.Kind = ClientSquadKind
	case *ClientEnvelope_Ack:
		m.Kind = ClientAckKind
		m.AckSeq = x.Ack.GetSnapshotSequence()
	case *ClientEnvelope_Ping:
		m.Kind = ClientPingKind
		m.PingTimeMs = x.Ping.GetClientTimeMs()
	case *ClientEnvelope_Voice:
		m.Kind = ClientVoiceKind
	}
}

// PresenceFromProto converts a PresencePacket (nil reads as empty).
func PresenceFromProto(p *PresencePacket) Presence {
	out := Presence{
		Seq: p.GetSeq(), HeadingMdeg: p.GetHeadingMdeg(), FocusAgentID: p.GetFocusAgentId(),
		RadiusMM: p.GetRadiusMm(), ClientTimeMs: p.GetClientTimeMs(),
	}
	if pos := p.GetPosition(); pos != nil {
		out.Position, out.HasPosition = Point{pos.GetXMm(), pos.GetYMm(), pos.GetZMm()}, true
	}
	if v := p.GetVelocityMmS(); v != nil {
		out.Velocity, out.HasVelocity = Point{v.GetXMm(), v.GetYMm(), v.GetZMm()}, true
	}
	return out
}

// Proto converts p to its wire message.
func (p *Presence) Proto() *PresencePacket {
	out := &PresencePacket{Seq: p.Seq, HeadingMdeg: p.HeadingMdeg, FocusAgentId: p.FocusAgentID,
		RadiusMm: p.RadiusMM, ClientTimeMs: p.ClientTimeMs}
	if p.HasPosition {
		out.Position = &Vec3{XMm: p.Position.X, YMm: p.Position.Y, ZMm: p.Position.Z}
	}
	if p.HasVelocity {
		out.VelocityMmS = &Vec3{XMm: p.Velocity.X, YMm: p.Velocity.Y, ZMm: p.Velocity.Z}
	}
	return out
}

// WindowForPresence is WindowFor with a decoded Presence.
func WindowForPresence(p *Presence, selfID uint32, prof *RendererProfile) Window {
	w := Window{X: p.Position.X, Y: p.Position.Y, RadiusMM: p.RadiusMM, MaxAgents: Tier2AgentCap(prof),
		MaxPlayers: GroundVisiblePlayerCap, FocusID: p.FocusAgentID, SelfID: selfID}
	if w.RadiusMM == 0 {
		w.RadiusMM = DefaultInterestRadiusMM
	}
	if w.RadiusMM > MaxInterestRadiusMM {
		w.RadiusMM = MaxInterestRadiusMM
	}
	return w
}

// protobuf scalar conversions, as the generated code applies them to a
// decoded varint.
func asSint32(v uint64) int32  { return int32(protowire.DecodeZigZag(v & math.MaxUint32)) }
func asUint32(v uint64) uint32 { return uint32(v) }

// consumeTag is protowire.ConsumeTag refusing field numbers above
// MaxValidNumber too, as the generated code's decoder does.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}

// mergeUint64Field merges a message whose only known field is the uint64
// want (Ack, Ping).
func mergeUint64Field(b []byte, want protowire.Number, dst *uint64) bool {
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
			if num == want {
				*dst = v
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

// mergePoint merges a Vec3 body into p.
func mergePoint(b []byte, p *Point) bool {
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
			case fnVecX:
				p.X = asSint32(v)
			case fnVecY:
				p.Y = asSint32(v)
			case fnVecZ:
				p.Z = asSint32(v)
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

// PresencePacket field numbers.
const (
	fnPresSeq      = 1
	fnPresPosition = 2
	fnPresHeading  = 3
	fnPresVelocity = 4
	fnPresFocus    = 5
	fnPresRadius   = 6
	fnPresTime     = 7
)

// merge merges a PresencePacket body into p.
func (p *Presence) merge(b []byte) bool {
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
			case fnPresSeq:
				p.Seq = v
			case fnPresHeading:
				p.HeadingMdeg = asSint32(v)
			case fnPresFocus:
				p.FocusAgentID = asUint32(v)
			case fnPresRadius:
				p.RadiusMM = asUint32(v)
			case fnPresTime:
				p.ClientTimeMs = v
			}
		case typ == protowire.BytesType && (num == fnPresPosition || num == fnPresVelocity):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if num == fnPresPosition {
				p.HasPosition = true
				if !mergePoint(v, &p.Position) {
					return false
				}
			} else {
				p.HasVelocity = true
				if !mergePoint(v, &p.Velocity) {
					return false
				}
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

func pointSize(p *Point) int { return sizeSint(p.X) + sizeSint(p.Y) + sizeSint(p.Z) }

func appendPoint(b []byte, num protowire.Number, p *Point) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(pointSize(p)))
	b = appendSint(b, fnVecX, p.X)
	b = appendSint(b, fnVecY, p.Y)
	return appendSint(b, fnVecZ, p.Z)
}

// presenceSize is the size of p's PresencePacket body.
func presenceSize(p *Presence) int {
	n := sizeUint(p.Seq) + sizeSint(p.HeadingMdeg) + sizeUint(uint64(p.FocusAgentID)) +
		sizeUint(uint64(p.RadiusMM)) + sizeUint(p.ClientTimeMs)
	if p.HasPosition {
		n += sizeBytes(pointSize(&p.Position))
	}
	if p.HasVelocity {
		n += sizeBytes(pointSize(&p.Velocity))
	}
	return n
}

// appendPresence appends p's PresencePacket body (fields in number order,
// as proto.Marshal writes them).
func appendPresence(b []byte, p *Presence) []byte {
	b = appendUint(b, fnPresSeq, p.Seq)
	if p.HasPosition {
		b = appendPoint(b, fnPresPosition, &p.Position)
	}
	b = appendSint(b, fnPresHeading, p.HeadingMdeg)
	if p.HasVelocity {
		b = appendPoint(b, fnPresVelocity, &p.Velocity)
	}
	b = appendUint(b, fnPresFocus, uint64(p.FocusAgentID))
	b = appendUint(b, fnPresRadius, uint64(p.RadiusMM))
	return appendUint(b, fnPresTime, p.ClientTimeMs)
}
