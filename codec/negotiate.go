package codec

import "slices"

// ServerCapabilities are the features this edge offers, in ClientHello
// .capabilities / ServerHello.dropped_features spelling. A client that
// omits one runs without it:
//
//	deltas           AgentStateDelta against acknowledged state; without
//	                 it the client gets a full AgentStateSnapshot each tick
//	unreliable-lane  state on datagrams / the unordered data channel;
//	                 without it, everything on the reliable lane
//	world-events     WorldEvent messages
//	squad-comms      SquadCommsMessage relay
//	voice            VoiceControl / VoiceEvent and the voice SFU
//	action-acks      ActionAck after the shard applies actions
//
// Treat it as read-only; Negotiate reads it on every call.
var ServerCapabilities = []string{"deltas", "unreliable-lane", "world-events", "squad-comms", "voice", "action-acks"}

// Negotiation is the outcome of a handshake.
type Negotiation struct {
	Acceptance Acceptance
	// Dropped names the ServerCapabilities the client did not advertise,
	// sorted; goes to ServerHello.dropped_features. Empty unless DEGRADED.
	Dropped []string
	// Enabled is the capabilities both sides have, in ServerCapabilities
	// order. Empty when REJECTED.
	Enabled []string
	// Code is the reason when REJECTED ("" otherwise).
	Code Code
}

// Has reports whether capability c was negotiated on.
func (n *Negotiation) Has(c string) bool { return slices.Contains(n.Enabled, c) }

// Negotiate decides a ClientHello's protocol version and capabilities:
//
//   - protocol_version other than ProtocolVersion (including 0, unset) is
//     REJECTED with CodeUnsupportedVersion; a nil hello is REJECTED with
//     CodeBadMessage;
//   - a client advertising every ServerCapability is ACCEPTED;
//   - one advertising a subset is DEGRADED, Dropped naming the rest;
//   - capabilities the server does not know are ignored.
//
// Token, admission and shard checks are not Negotiate's business.
func Negotiate(h *ClientHello) Negotiation {
	if h == nil {
		return Negotiation{Acceptance: Acceptance_REJECTED, Code: CodeBadMessage}
	}
	if h.GetProtocolVersion() != ProtocolVersion {
		return Negotiation{Acceptance: Acceptance_REJECTED, Code: CodeUnsupportedVersion}
	}
	n := Negotiation{Acceptance: Acceptance_ACCEPTED}
	for _, c := range ServerCapabilities {
		if slices.Contains(h.GetCapabilities(), c) {
			n.Enabled = append(n.Enabled, c)
		} else {
			n.Dropped = append(n.Dropped, c)
		}
	}
	if len(n.Dropped) > 0 {
		n.Acceptance = Acceptance_DEGRADED
		slices.Sort(n.Dropped)
	}
	return n
}
