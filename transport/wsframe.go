package transport

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// WebSocket framing (RFC 6455 section 5), server side. gorilla performs the
// HTTP upgrade; from the 101 response on, this package reads and writes
// frames itself, so a connection's reader fills one reused buffer and its
// writer appends frames to one buffer that leaves in one write per Flush.
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
const (
	wsOpContinuation = 0x0
	wsOpText         = 0x1
	wsOpBinary       = 0x2
	wsOpClose        = 0x8
	wsOpPing         = 0x9
	wsOpPong         = 0xA

	wsFin  = 0x80
	wsMask = 0x80

	// wsMaxControl is the payload limit of a control frame (RFC 6455 5.5).
	wsMaxControl = 125
	// wsMaxServerHeader is the longest header this server writes.
	wsMaxServerHeader = 10
)

// WebSocket close codes (RFC 6455 section 7.4.1) the framing itself uses.
const (
	wsCloseNormal     = 1000
	wsCloseProtocol   = 1002
	wsCloseNoStatus   = 1005 // never on the wire: an empty close body
	wsCloseInvalidUTF = 1007
)

// wsProtoError is a protocol violation and the close code that answers it.
type wsProtoError struct {
	code int
	msg  string
}

func (e *wsProtoError) Error() string { return errWSProtocol.Error() + ": " + e.msg }
func (e *wsProtoError) Unwrap() error { return errWSProtocol }

func protoErr(code int, format string, args ...any) error {
	return &wsProtoError{code: code, msg: fmt.Sprintf(format, args...)}
}

// wsHeader is one parsed client frame header.
type wsHeader struct {
	fin    bool
	op     byte
	length int64 // payload bytes
	mask   [4]byte
	size   int // header bytes, masking key included
}

// parseWSHeader parses the client frame header at the start of b. It returns
// need > 0 (and no error) when b holds only part of the header: at least
// need bytes are required.
func parseWSHeader(b []byte) (h wsHeader, need int, err error) {
	if len(b) < 2 {
		return h, 2, nil
	}
	b0, b1 := b[0], b[1]
	if b0&0x70 != 0 {
		// No extension was negotiated, so no RSV bit may be set.
		return h, 0, protoErr(wsCloseProtocol, "reserved bits set")
	}
	if b1&wsMask == 0 {
		return h, 0, protoErr(wsCloseProtocol, "unmasked client frame")
	}
	h.fin = b0&wsFin != 0
	h.op = b0 & 0x0F
	size := 2
	switch l := b1 & 0x7F; l {
	case 126:
		size += 2
	case 127:
		size += 8
	default:
		h.length = int64(l)
	}
	size += 4
	if len(b) < size {
		return wsHeader{}, size, nil
	}
	switch size {
	case 8:
		h.length = int64(binary.BigEndian.Uint16(b[2:]))
	case 14:
		n := binary.BigEndian.Uint64(b[2:])
		if n>>63 != 0 {
			return h, 0, protoErr(wsCloseProtocol, "64-bit length with the high bit set")
		}
		h.length = int64(n)
	}
	copy(h.mask[:], b[size-4:size])
	h.size = size
	switch h.op {
	case wsOpContinuation, wsOpText, wsOpBinary:
	case wsOpClose, wsOpPing, wsOpPong:
		if !h.fin || h.length > wsMaxControl {
			return h, 0, protoErr(wsCloseProtocol, "fragmented or oversized control frame")
		}
	default:
		return h, 0, protoErr(wsCloseProtocol, "unknown opcode %#x", h.op)
	}
	return h, 0, nil
}

// appendWSHeader appends an unmasked, final server frame header for a
// payload of n bytes.
func appendWSHeader(dst []byte, op byte, n int) []byte {
	dst = append(dst, wsFin|op)
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

// wsUnmask XORs b with key, starting pos bytes into the key, and returns
// the key position after b (for a payload unmasked in pieces).
func wsUnmask(key [4]byte, pos int, b []byte) int {
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

// parseWSClose reads a close frame body: its code (wsCloseNoStatus for an
// empty body). A body that breaks RFC 6455 7.4 is a *wsProtoError.
func parseWSClose(p []byte) (code int, err error) {
	switch {
	case len(p) == 0:
		return wsCloseNoStatus, nil
	case len(p) == 1:
		return 0, protoErr(wsCloseProtocol, "one-byte close body")
	}
	code = int(binary.BigEndian.Uint16(p))
	if !validWSCloseCode(code) {
		return 0, protoErr(wsCloseProtocol, "close code %d", code)
	}
	if !utf8.Valid(p[2:]) {
		return 0, protoErr(wsCloseInvalidUTF, "close reason is not UTF-8")
	}
	return code, nil
}

// validWSCloseCode: the codes a peer may send (RFC 6455 7.4.1, 7.4.2).
func validWSCloseCode(c int) bool {
	switch {
	case c >= 1000 && c <= 1003, c >= 1007 && c <= 1014:
		return true
	case c >= 3000 && c <= 4999:
		return true
	}
	return false
}

// appendWSClose appends a close frame with code and reason (no body for
// wsCloseNoStatus). reason is cut to fit a control frame.
func appendWSClose(dst []byte, code int, reason string) []byte {
	if code == wsCloseNoStatus {
		return appendWSHeader(dst, wsOpClose, 0)
	}
	if len(reason) > wsMaxControl-2 {
		reason = reason[:wsMaxControl-2]
		for len(reason) > 0 && !utf8.ValidString(reason) {
			reason = reason[:len(reason)-1]
		}
	}
	dst = appendWSHeader(dst, wsOpClose, 2+len(reason))
	dst = binary.BigEndian.AppendUint16(dst, uint16(code))
	return append(dst, reason...)
}
