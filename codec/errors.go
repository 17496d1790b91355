package codec

import (
	"errors"
	"fmt"
)

// Code is a wire error code: the string carried in Error.code, the reason
// label in metrics, and (through CloseCode) the close code of a transport.
// Every code the edge sends to a realtime client is in codeTable; nothing
// else may appear on the wire.
type Code string

const (
	CodeBadMessage           Code = "bad_message"          // undecodable envelope
	CodeFrameTooLarge        Code = "frame_too_large"      // over MaxMessageSize
	CodeHelloRequired        Code = "hello_required"       // first message was not hello
	CodeHandshakeTimeout     Code = "handshake_timeout"    // no hello in time
	CodeTokenInvalid         Code = "token_invalid"        // unparsable, forged or wrong type
	CodeTokenExpired         Code = "token_expired"        // exp in the past
	CodeTokenAudience        Code = "token_wrong_audience" // aud is not this edge's
	CodeUnsupportedVersion   Code = "protocol_version_unsupported"
	CodeInstanceNotFound     Code = "instance_shard_not_found" // no shard holds the instance
	CodeShardUnavailable     Code = "shard_unavailable"        // the shard link is down
	CodeResumeInvalid        Code = "resume_token_invalid"     // forged, foreign or unknown session
	CodeResumeExpired        Code = "resume_token_expired"     // past the 60 s retention
	CodeResumeRevoked        Code = "resume_token_revoked"     // an operator revoked the session
	CodeAdmissionDenied      Code = "admission_denied"
	CodeUserCap              Code = "user_session_cap"
	CodeNetworkCap           Code = "network_session_cap"
	CodeTicketRequired       Code = "admission_ticket_required" // waiting room armed
	CodeRateLimited          Code = "rate_limited"
	CodeDraining             Code = "draining"
	CodeNoAvailableTransport Code = "no_available_transport"
	CodeStateUnavailable     Code = "state_unavailable"     // shared state (Redis) unreachable
	CodeVoiceControlInvalid  Code = "voice_control_invalid" // VoiceControl with no op, entity 0, empty or > 128-byte squad id
	CodeVoiceControlLimit    Code = "voice_control_limit"   // over the session's squads (16) or mutes (1024)
	CodeInternal             Code = "internal"
)

// codeTable maps each code to its transport close code (WebSocket close
// status, WebTransport session error code). 4000-4999 is the range RFC 6455
// section 7.4.2 leaves to applications.
var codeTable = map[Code]uint32{
	CodeBadMessage:           4000,
	CodeFrameTooLarge:        4001,
	CodeHelloRequired:        4002,
	CodeHandshakeTimeout:     4003,
	CodeTokenInvalid:         4010,
	CodeTokenExpired:         4011,
	CodeTokenAudience:        4012,
	CodeUnsupportedVersion:   4013,
	CodeInstanceNotFound:     4020,
	CodeShardUnavailable:     4021,
	CodeResumeInvalid:        4022,
	CodeResumeExpired:        4023,
	CodeResumeRevoked:        4024,
	CodeAdmissionDenied:      4030,
	CodeUserCap:              4031,
	CodeNetworkCap:           4032,
	CodeTicketRequired:       4033,
	CodeRateLimited:          4034,
	CodeDraining:             4040,
	CodeNoAvailableTransport: 4041,
	CodeStateUnavailable:     4042,
	CodeVoiceControlInvalid:  4050,
	CodeVoiceControlLimit:    4051,
	CodeInternal:             4099,
}

// CloseCode is the transport close code for c (4099 for an unknown code).
func (c Code) CloseCode() uint32 {
	if n, ok := codeTable[c]; ok {
		return n
	}
	return codeTable[CodeInternal]
}

// Valid reports whether c is in the table.
func (c Code) Valid() bool { _, ok := codeTable[c]; return ok }

// WireError is an error that carries a wire code to the client.
type WireError struct {
	Code    Code
	Message string
	Err     error // the cause, for logs; never sent
}

func (e *WireError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *WireError) Unwrap() error { return e.Err }

// Errorf builds a WireError.
func Errorf(code Code, format string, args ...any) *WireError {
	return &WireError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf extracts the wire code from err, or CodeInternal.
func CodeOf(err error) Code {
	var we *WireError
	if errors.As(err, &we) {
		return we.Code
	}
	return CodeInternal
}

// ToProto renders err as the Error message sent to a client.
func ToProto(err error) *Error {
	var we *WireError
	if errors.As(err, &we) {
		return &Error{Code: string(we.Code), Message: we.Message}
	}
	return &Error{Code: string(CodeInternal), Message: "internal error"}
}
