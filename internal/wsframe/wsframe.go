// Package wsframe is WebSocket framing (RFC 6455 section 5), server side,
// for the edge's connections that frame their socket themselves after
// gorilla's HTTP upgrade (transport's realtime WebSocket, the Pixel
// Streaming signalling broker): parsing client frame headers, unmasking,
// and appending unmasked server frames to a write buffer, so a reader can
// parse many frames out of one read and a writer can send many frames in
// one write.
//
// A frame:
//
//	byte 0: FIN(1) RSV1-3(3) opcode(4)
//	byte 1: MASK(1) length(7)     length 126: 16-bit length follows,
//	                              length 127: 64-bit length follows
//	[2 or 8 bytes extended length, big endian]
//	[4 bytes masking key]         client frames are always masked,
//	                              server frames never are
//	payload
package wsframe

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Opcodes and header bits.
const (
	OpContinuation = 0x0
	OpText         = 0x1
	OpBinary       = 0x2
	OpClose        = 0x8
	OpPing         = 0x9
	OpPong         = 0xA

	Fin     = 0x80 // byte 0: the message's last frame
	MaskBit = 0x80 // byte 1: the payload is masked

	// MaxControl is the payload limit of a control frame (RFC 6455 5.5).
	MaxControl = 125
	// MaxServerHeader is the longest header AppendHeader writes.
	MaxServerHeader = 10
)

// Close codes (RFC 6455 section 7.4.1) the framing itself uses.
const (
	CloseNormal      = 1000
	CloseProtocol    = 1002
	CloseNoStatus    = 1005 // never on the wire: an empty close body
	CloseInvalidUTF8 = 1007
	CloseTooBig      = 1009
)

// ProtocolError is a client's violation of RFC 6455 and the close code
// that answers it. It wraps ErrProtocol.
type ProtocolError struct {
	Code int
	Msg  string
}

func (e *ProtocolError) Error() string { return ErrProtocol.Error() + ": " + e.Msg }
func (e *ProtocolError) Unwrap() error { return ErrProtocol }

func protoErr(code int, format string, args ...any) error {
	return &ProtocolError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Header is one parsed client frame header.
type Header struct {
	Fin    bool
	Op     byte
	Length int64 // payload bytes
	Mask   [4]byte
	Size   int // header bytes, masking key included
}

// ParseHeader parses the client frame header at the start of b. It returns
// need > 0 (and no error) when b holds only part of the header: at least
// need bytes are required. No extension is ever negotiated, so a set RSV
// bit is an error, as are an unmasked frame, an unknown opcode, a
// fragmented or oversized control frame and a 64-bit length with the high
// bit set (all *ProtocolError, code 1002).
func ParseHeader(b []byte) (h Header, need int, err error) {
	if len(b) < 2 {
		return h, 2, nil
	}
	b0, b1 := b[0], b[1]
	if b0&0x70 != 0 {
		return h, 0, protoErr(CloseProtocol, "reserved bits set")
	}
	if b1&MaskBit == 0 {
		return h, 0, protoErr(CloseProtocol, "unmasked client frame")
	}
	h.Fin = b0&Fin != 0
	h.Op = b0 & 0x0F
	size := 2
	switch l := b1 & 0x7F; l {
	case 126:
		size += 2
	case 127:
		size += 8
	default:
		h.Length = int64(l)
	}
	size += 4
	if len(b) < size {
		return Header{}, size, nil
	}
	switch size {
	case 8:
		h.Length = int64(binary.BigEndian.Uint16(b[2:]))
	case 14:
		n := binary.BigEndian.Uint64(b[2:])
		if n>>63 != 0 {
			return h, 0, protoErr(CloseProtocol, "64-bit length with the high bit set")
		}
		h.Length = int64(n)
	}
	copy(h.Mask[:], b[size-4:size])
	h.Size = size
	switch h.Op {
	case OpContinuation, OpText, OpBinary:
	case OpClose, OpPing, OpPong:
		if !h.Fin || h.Length > MaxControl {
			return h, 0, protoErr(CloseProtocol, "fragmented or oversized control frame")
		}
	default:
		return h, 0, protoErr(CloseProtocol, "unknown opcode %#x", h.Op)
	}
	return h, 0, nil
}

// HeaderLen is the size of the server frame header AppendHeader writes
// for a payload of n bytes.
func HeaderLen(n int) int {
	switch {
	case n <= 125:
		return 2
	case n <= 0xFFFF:
		return 4
	}
	return 10
}

// AppendHeader appends an unmasked, final server frame header for a
// payload of n bytes.
func AppendHeader(dst []byte, op byte, n int) []byte {
	dst = append(dst, Fin|op)
	switch {
	case n <= 125:
		return append(dst, byte(n))
	case n <= 0xFFFF:
		return append(dst, 126, byte(n>>8), byte(n))
	default:
		dst = append(dst, 127)
		return binary.BigEndian.AppendUint64(dst, uint64(n))
	}
}

// Unmask XORs b with key, starting pos bytes into the key, and returns the
// key position after b (for a payload unmasked in pieces).
func Unmask(key [4]byte, pos int, b []byte) int {
	pos &= 3
	// Byte by byte up to a word boundary of the key, then 8 bytes at a
	// time with the key rotated to pos.
	for len(b) > 0 && pos != 0 {
		b[0] ^= key[pos]
		b = b[1:]
		pos = (pos + 1) & 3
	}
	if len(b) >= 8 {
		k32 := uint64(binary.LittleEndian.Uint32(key[:]))
		k := k32 | k32<<32
		for len(b) >= 8 {
			binary.LittleEndian.PutUint64(b, binary.LittleEndian.Uint64(b)^k)
			b = b[8:]
		}
	}
	for i := range b {
		b[i] ^= key[pos]
		pos = (pos + 1) & 3
	}
	return pos
}

// ParseClose reads a close frame body: its code (CloseNoStatus for an
// empty body). A body that breaks RFC 6455 7.4 is a *ProtocolError.
func ParseClose(p []byte) (code int, err error) {
	switch {
	case len(p) == 0:
		return CloseNoStatus, nil
	case len(p) == 1:
		return 0, protoErr(CloseProtocol, "one-byte close body")
	}
	code = int(binary.BigEndian.Uint16(p))
	if !ValidCloseCode(code) {
		return 0, protoErr(CloseProtocol, "close code %d", code)
	}
	if !utf8.Valid(p[2:]) {
		return 0, protoErr(CloseInvalidUTF8, "close reason is not UTF-8")
	}
	return code, nil
}

// ValidCloseCode reports whether a peer may send code (RFC 6455 7.4.1,
// 7.4.2).
func ValidCloseCode(c int) bool {
	switch {
	case c >= 1000 && c <= 1003, c >= 1007 && c <= 1014:
		return true
	case c >= 3000 && c <= 4999:
		return true
	}
	return false
}

// AppendClose appends a close frame with code and reason (no body for
// CloseNoStatus). reason is cut, on a UTF-8 boundary, to fit a control
// frame.
func AppendClose(dst []byte, code int, reason string) []byte {
	if code == CloseNoStatus {
		return AppendHeader(dst, OpClose, 0)
	}
	if len(reason) > MaxControl-2 {
		reason = reason[:MaxControl-2]
		for len(reason) > 0 && !utf8.ValidString(reason) {
			reason = reason[:len(reason)-1]
		}
	}
	dst = AppendHeader(dst, OpClose, 2+len(reason))
	dst = binary.BigEndian.AppendUint16(dst, uint16(code))
	return append(dst, reason...)
}
