package signalling

import (
	"encoding/binary"
	"fmt"
)

// wireEntry is one cross-edge inbox entry (relay.go).
type wireEntry struct {
	kind   byte
	from   string // the sending edge
	player string // the player's id
	gen    uint64 // the link generation
	seq    uint64 // per-direction sequence number
	code   int    // close code (kindClose)
	reason string // close reason (kindClose)
	sess   []byte // the player's session, JSON (kindOpen)
	data   []byte // a frame (kindFrame, kindToP)
}

// An entry on the wire, one inbox message:
//
//	byte     version (wireVersion)
//	byte     kind: O F G towards the streamer's edge, f c u x towards the player's
//	uvarint  generation
//	uvarint  sequence
//	varint   close code
//	5 times  uvarint length, then that many bytes: from, player, reason, session, frame
const (
	wireVersion = 1
	// maxWireEntry bounds a decoded entry (the inbox bounds a message to
	// 1 MiB; a frame is at most Config.MaxMessageBytes).
	maxWireEntry = 1 << 20
)

func knownKind(k byte) bool {
	switch k {
	case kindOpen, kindFrame, kindGone, kindToP, kindClose, kindUnsub, kindKilled:
		return true
	}
	return false
}

// appendEntry appends e's encoding to b.
func appendEntry(b []byte, e wireEntry) []byte {
	b = append(b, wireVersion, e.kind)
	b = binary.AppendUvarint(b, e.gen)
	b = binary.AppendUvarint(b, e.seq)
	b = binary.AppendVarint(b, int64(e.code))
	for _, f := range [...][]byte{[]byte(e.from), []byte(e.player), []byte(e.reason), e.sess, e.data} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// decodeEntry decodes one entry; its byte fields alias b. Errors wrap
// ErrBadRelayEntry.
func decodeEntry(b []byte) (wireEntry, error) {
	var e wireEntry
	bad := func(what string) (wireEntry, error) {
		return wireEntry{}, fmt.Errorf("%w: %s", ErrBadRelayEntry, what)
	}
	if len(b) > maxWireEntry {
		return bad(fmt.Sprintf("%d bytes (max %d)", len(b), maxWireEntry))
	}
	if len(b) < 2 || b[0] != wireVersion {
		return bad("no version 1 header")
	}
	if e.kind = b[1]; !knownKind(e.kind) {
		return bad(fmt.Sprintf("kind %q", e.kind))
	}
	b = b[2:]
	var n int
	if e.gen, n = binary.Uvarint(b); n <= 0 {
		return bad("generation")
	}
	b = b[n:]
	if e.seq, n = binary.Uvarint(b); n <= 0 {
		return bad("sequence")
	}
	b = b[n:]
	code, n := binary.Varint(b)
	if n <= 0 || code < 0 || code > 4999 {
		return bad("close code")
	}
	e.code, b = int(code), b[n:]
	var fields [5][]byte
	for i := range fields {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return bad("field length")
		}
		b = b[n:]
		fields[i], b = b[:l:l], b[l:]
	}
	if len(b) != 0 {
		return bad("trailing bytes")
	}
	if len(fields[0]) == 0 {
		return bad("no sender edge")
	}
	e.from, e.player, e.reason = string(fields[0]), string(fields[1]), string(fields[2])
	if len(fields[3]) > 0 {
		e.sess = fields[3]
	}
	if len(fields[4]) > 0 || e.kind == kindFrame || e.kind == kindToP {
		e.data = fields[4]
	}
	return e, nil
}
