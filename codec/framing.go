package codec

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Stream framing: each envelope on a stream (a WebTransport bidirectional
// stream, a shard-link QUIC stream) is preceded by its length as a protobuf
// base-128 varint — the same layout as protodelim, so any protobuf library
// can read it:
//
//	+----------------+------------------------+
//	| uvarint length | length bytes: envelope |
//	+----------------+------------------------+
//
// WebSocket messages and datagrams carry exactly one envelope each and are
// not framed.

// MaxMessageSize bounds one envelope on any lane. The largest legitimate
// message, a full 40-entity snapshot, is a few KiB.
const MaxMessageSize = 64 << 10

var (
	// ErrFrameTooLarge: a frame's length prefix exceeds the limit.
	ErrFrameTooLarge = errors.New("codec: frame too large")
	// ErrBadFrame: a frame's length prefix is malformed.
	ErrBadFrame = errors.New("codec: malformed frame length")
)

// AppendFrame appends msg with its length prefix to dst.
func AppendFrame(dst, msg []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(msg)))
	return append(dst, msg...)
}

// ReadFrame reads one frame from r into buf (grown if needed) and returns
// the envelope bytes, which alias buf. Frames longer than max are refused
// with ErrFrameTooLarge before any of their body is read.
func ReadFrame(r *bufio.Reader, buf []byte, max int) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	if n > uint64(max) {
		return nil, fmt.Errorf("%w: %d > %d bytes", ErrFrameTooLarge, n, max)
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}
