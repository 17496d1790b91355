// Package pxmux is the binary framing of Pixel Streaming data channels
// that the SFU and the synthetic streamer share: the multiplexed-channel
// header of Epic's SFU (PIXEL_STREAMING_SFU.md section 4) and the few
// Epic data-channel messages the synthetic streamer reads and writes.
//
// Multiplexed frames (Epic's sfu_server.js):
//
//	199 | len uint16 LE | player id, UTF-16LE (len bytes) | the message      Multiplexed
//	198 | len uint16 LE | player id, UTF-16LE (len bytes) | 1 byte status   ChannelRelayStatus
//
// Status 1: the player's channels are set up; 0: the player is gone.
//
// Epic data-channel messages (the frontend's StreamMessageController):
// one type byte, then fields; a string is a uint16 LE count of UTF-16
// code units and the units, LE. Player to streamer: UIInteraction (50)
// carries one string. Streamer to player: Response (1) is the type byte
// followed by the UTF-16LE text, with no count.
package pxmux

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf16"
)

// Type bytes.
const (
	Multiplexed   = 199
	RelayStatus   = 198
	Response      = 1  // streamer to player
	UIInteraction = 50 // player to streamer
)

// header is the type byte and the id length.
const header = 3

// MaxIDBytes bounds the id of a frame (256 UTF-16 code units, the
// signalling server's id limit).
const MaxIDBytes = 512

var (
	// ErrShort: a frame is truncated, or a length field is odd or too big.
	ErrShort = errors.New("pxmux: frame truncated")
	// ErrType: the type byte is not the one expected.
	ErrType = errors.New("pxmux: unexpected type byte")
)

func appendUTF16(dst []byte, s string) []byte {
	for _, u := range utf16.Encode([]rune(s)) {
		dst = binary.LittleEndian.AppendUint16(dst, u)
	}
	return dst
}

func decodeUTF16(b []byte) string {
	units := make([]uint16, len(b)/2)
	for i := range units {
		units[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return string(utf16.Decode(units))
}

func appendHeader(dst []byte, typ byte, id string) []byte {
	dst = append(dst, typ, 0, 0)
	n := len(dst)
	dst = appendUTF16(dst, id)
	binary.LittleEndian.PutUint16(dst[n-2:n], uint16(len(dst)-n))
	return dst
}

// Frame returns msg framed for player id (199).
func Frame(id string, msg []byte) []byte {
	return append(appendHeader(make([]byte, 0, header+2*len(id)+len(msg)), Multiplexed, id), msg...)
}

// Status returns the relay-status frame for player id (198).
func Status(id string, up bool) []byte {
	var s byte
	if up {
		s = 1
	}
	return append(appendHeader(make([]byte, 0, header+2*len(id)+1), RelayStatus, id), s)
}

// Parse splits a multiplexed frame into its type (Multiplexed or
// RelayStatus), player id and the rest (the message, or the one status
// byte). rest aliases b.
func Parse(b []byte) (typ byte, id string, rest []byte, err error) {
	if len(b) < header {
		return 0, "", nil, fmt.Errorf("%w: %d bytes", ErrShort, len(b))
	}
	typ = b[0]
	if typ != Multiplexed && typ != RelayStatus {
		return 0, "", nil, fmt.Errorf("%w: %d", ErrType, typ)
	}
	n := int(binary.LittleEndian.Uint16(b[1:3]))
	if n%2 != 0 || n > MaxIDBytes || len(b) < header+n {
		return 0, "", nil, fmt.Errorf("%w: id of %d bytes in %d", ErrShort, n, len(b))
	}
	rest = b[header+n:]
	if typ == RelayStatus && len(rest) != 1 {
		return 0, "", nil, fmt.Errorf("%w: relay status of %d bytes", ErrShort, len(rest))
	}
	return typ, decodeUTF16(b[header : header+n]), rest, nil
}

// EncodeString returns a message of type typ carrying one string field
// (UIInteraction, Command, TextboxEntry).
func EncodeString(typ byte, s string) []byte {
	units := utf16.Encode([]rune(s))
	b := make([]byte, header, header+2*len(units))
	b[0] = typ
	binary.LittleEndian.PutUint16(b[1:3], uint16(len(units)))
	for _, u := range units {
		b = binary.LittleEndian.AppendUint16(b, u)
	}
	return b
}

// DecodeString reads a message of type typ carrying one string field.
func DecodeString(typ byte, b []byte) (string, error) {
	if len(b) < header {
		return "", fmt.Errorf("%w: %d bytes", ErrShort, len(b))
	}
	if b[0] != typ {
		return "", fmt.Errorf("%w: %d, want %d", ErrType, b[0], typ)
	}
	n := 2 * int(binary.LittleEndian.Uint16(b[1:3])) // code units
	if len(b) < header+n {
		return "", fmt.Errorf("%w: string of %d bytes in %d", ErrShort, n, len(b))
	}
	return decodeUTF16(b[header : header+n]), nil
}

// EncodeResponse returns a Response message (streamer to player).
func EncodeResponse(s string) []byte {
	return appendUTF16([]byte{Response}, s)
}

// DecodeResponse reads a Response message.
func DecodeResponse(b []byte) (string, error) {
	if len(b) < 1 || b[0] != Response || len(b)%2 != 1 {
		return "", fmt.Errorf("%w: not a Response", ErrType)
	}
	return decodeUTF16(b[1:]), nil
}
