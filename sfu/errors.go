package sfu

import (
	"errors"
	"net/http"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
)

var (
	// ErrBadRequest: the join/leave body is not the documented JSON, is too
	// large, or misses a field.
	ErrBadRequest = errors.New("sfu: bad request")
	// ErrBadSDP: the offer does not parse as SDP or is not an offer.
	ErrBadSDP = errors.New("sfu: malformed sdp offer")
	// ErrNoOpus: the offer has no audio m-line offering Opus/48000/2.
	ErrNoOpus = errors.New("sfu: offer has no opus audio")
	// ErrUnauthorized: no, or an invalid or expired, bearer access token.
	ErrUnauthorized = errors.New("sfu: unauthorized")
	// ErrForbidden: the token's subject does not own the realtime session
	// or the voice peer named in the request.
	ErrForbidden = errors.New("sfu: session belongs to another user")
	// ErrUnknownSession: no live realtime session has that id.
	ErrUnknownSession = errors.New("sfu: unknown realtime session")
	// ErrUnknownPeer: no voice peer has that id.
	ErrUnknownPeer = errors.New("sfu: unknown voice peer")
	// ErrBadControl: a VoiceControl with no op, an empty or over-long
	// (> 128 bytes) squad id, or entity id 0. Control returns it inside a
	// *codec.WireError with code voice_control_invalid.
	ErrBadControl = errors.New("sfu: bad voice control")
	// ErrLimit: a per-session limit (squads, mutes) would be exceeded.
	// Control returns it inside a *codec.WireError with code
	// voice_control_limit.
	ErrLimit = errors.New("sfu: voice control limit exceeded")
	// ErrClosed: the SFU is shutting down.
	ErrClosed = errors.New("sfu: closed")
	// ErrConfig: Config.Validate failed.
	ErrConfig = errors.New("sfu: invalid config")
	// ErrNegotiation: pion failed to answer a well-formed offer.
	ErrNegotiation = errors.New("sfu: negotiation failed")
)

// Code is the "code" of an HTTP error body and the reason label of
// egbe_sfu_join_errors_total. One table: errorTable.
type Code string

// Wire error codes of the voice HTTP API.
const (
	CodeBadRequest     Code = "bad_request"
	CodeBadSDP         Code = "bad_sdp"
	CodeNoOpus         Code = "no_opus"
	CodeTokenInvalid   Code = "token_invalid"
	CodeTokenExpired   Code = "token_expired"
	CodeForbidden      Code = "session_forbidden"
	CodeUnknownSession Code = "session_not_found"
	CodeUnknownPeer    Code = "voice_peer_not_found"
	CodeUnavailable    Code = "voice_unavailable"
	CodeRoomElsewhere  Code = "voice_room_elsewhere" // 409: join at the edge_url given
	CodeStateDown      Code = "state_unavailable"    // 503: the fleet's room table is unreachable
	CodeInternal       Code = "internal"
)

// errorTable maps sentinels to wire code and HTTP status, most specific
// first.
var errorTable = []struct {
	err    error
	code   Code
	status int
}{
	{auth.ErrExpired, CodeTokenExpired, http.StatusUnauthorized},
	{ErrUnauthorized, CodeTokenInvalid, http.StatusUnauthorized},
	{ErrBadSDP, CodeBadSDP, http.StatusBadRequest},
	{ErrNoOpus, CodeNoOpus, http.StatusBadRequest},
	{ErrBadRequest, CodeBadRequest, http.StatusBadRequest},
	{ErrForbidden, CodeForbidden, http.StatusForbidden},
	{ErrUnknownSession, CodeUnknownSession, http.StatusNotFound},
	{ErrUnknownPeer, CodeUnknownPeer, http.StatusNotFound},
	{ErrClosed, CodeUnavailable, http.StatusServiceUnavailable},
	{ErrRoomElsewhere, CodeRoomElsewhere, http.StatusConflict},
	{ErrStateUnavailable, CodeStateDown, http.StatusServiceUnavailable},
}

// codeOf maps an error to its wire code and HTTP status.
func codeOf(err error) (Code, int) {
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return e.code, e.status
		}
	}
	return CodeInternal, http.StatusInternalServerError
}

// controlError is a voice control refusal as the realtime client sees it:
// a client error code from the realtime protocol's one table
// (codec.codeTable), wrapping the sentinel.
func controlError(sentinel error, format string, args ...any) error {
	code := codec.CodeVoiceControlInvalid
	if errors.Is(sentinel, ErrLimit) {
		code = codec.CodeVoiceControlLimit
	}
	we := codec.Errorf(code, format, args...)
	we.Err = sentinel
	return we
}
