package codec

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Data-path sentinels. Decoders return a *WireError whose Code is the wire
// code to send back and whose Err wraps one of these (and ErrFrameTooLarge
// from framing.go), so both errors.Is and CodeOf work on the result.
var (
	// ErrMalformed: an envelope (or delta) that does not decode, or decodes
	// to no known message.
	ErrMalformed = errors.New("codec: malformed envelope")
	// ErrBaseMismatch: a delta whose base is not the receiver's state.
	ErrBaseMismatch = errors.New("codec: delta base mismatch")
	// ErrOverBudget: replication over the 256 kbit/s ceiling.
	ErrOverBudget = errors.New("codec: over replication budget")
	// ErrBadRate: a non-positive tick rate or negative payload size.
	ErrBadRate = errors.New("codec: invalid replication rate")
)

// Binary: proto3 as generated; unknown fields are kept (so a relayed
// message from a newer peer survives a round trip), invalid UTF-8 in a
// string is an error.
//
// JSON (WebSocket subprotocol "egbe.v1.json"): protojson with the standard
// lowerCamelCase names, e.g. {"hello":{"accessToken":"…","instanceId":"…"}}.
// Decoding is strict: an unknown field name is an error (JSON peers are
// the demo page and debugging tools, where a typo should fail loudly, not
// be dropped). The original snake_case names are accepted on input, as
// protojson always does; 64-bit integers are strings on output; enums are
// names. protojson output whitespace is deliberately unstable: compare
// JSON semantically, never byte for byte.
var (
	binUnmarshal  = proto.UnmarshalOptions{}
	binMarshal    = proto.MarshalOptions{Deterministic: true}
	jsonUnmarshal = protojson.UnmarshalOptions{DiscardUnknown: false}
	jsonMarshal   = protojson.MarshalOptions{}
)

func malformed(what string, err error) error {
	if err == nil {
		return &WireError{Code: CodeBadMessage, Message: what, Err: ErrMalformed}
	}
	return &WireError{Code: CodeBadMessage, Message: what, Err: fmt.Errorf("%w: %w", ErrMalformed, err)}
}

func tooLarge(n int) error {
	return &WireError{
		Code:    CodeFrameTooLarge,
		Message: fmt.Sprintf("envelope of %d bytes exceeds %d", n, MaxMessageSize),
		Err:     ErrFrameTooLarge,
	}
}

func decode(b []byte, json bool, into proto.Message) error {
	if len(b) > MaxMessageSize {
		return tooLarge(len(b))
	}
	var err error
	if json {
		err = jsonUnmarshal.Unmarshal(b, into)
	} else {
		err = binUnmarshal.Unmarshal(b, into)
	}
	if err != nil {
		return malformed("undecodable envelope", err)
	}
	return nil
}

func encode(dst []byte, m proto.Message, json bool) ([]byte, error) {
	start := len(dst)
	var (
		out []byte
		err error
	)
	if json {
		out, err = jsonMarshal.MarshalAppend(dst, m)
	} else {
		out, err = binMarshal.MarshalAppend(dst, m)
	}
	if err != nil {
		return dst, malformed("unencodable envelope", err)
	}
	if n := len(out) - start; n > MaxMessageSize {
		return dst, tooLarge(n)
	}
	return out, nil
}

// DecodeClient decodes one client envelope (binary protobuf, or protojson
// when json is set) into into, replacing its contents. Input over
// MaxMessageSize is refused before decoding (CodeFrameTooLarge,
// ErrFrameTooLarge); input that does not decode, or that carries no message
// this version knows (empty, or only unknown fields), is CodeBadMessage /
// ErrMalformed.
func DecodeClient(b []byte, json bool, into *ClientEnvelope) error {
	if into == nil {
		return malformed("nil envelope", nil)
	}
	if err := decode(b, json, into); err != nil {
		return err
	}
	if into.Msg == nil {
		return malformed("envelope carries no known message", nil)
	}
	return nil
}

// DecodeServer is DecodeClient for server envelopes (Go test clients,
// bench harness).
func DecodeServer(b []byte, json bool, into *ServerEnvelope) error {
	if into == nil {
		return malformed("nil envelope", nil)
	}
	if err := decode(b, json, into); err != nil {
		return err
	}
	if into.Msg == nil {
		return malformed("envelope carries no known message", nil)
	}
	return nil
}

// EncodeServer appends env to dst (deterministic binary, or protojson) and
// returns the extended slice. An envelope with no message, or one that does
// not marshal (invalid UTF-8), is ErrMalformed; a result over
// MaxMessageSize is ErrFrameTooLarge. On error dst is returned unchanged
// (its spare capacity may have been written).
func EncodeServer(dst []byte, env *ServerEnvelope, json bool) ([]byte, error) {
	if env.GetMsg() == nil {
		return dst, malformed("empty server envelope", nil)
	}
	return encode(dst, env, json)
}

// EncodeClient is EncodeServer for client envelopes.
func EncodeClient(dst []byte, env *ClientEnvelope, json bool) ([]byte, error) {
	if env.GetMsg() == nil {
		return dst, malformed("empty client envelope", nil)
	}
	return encode(dst, env, json)
}
