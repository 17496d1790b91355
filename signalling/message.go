package signalling

import (
	"encoding/json"
	"strconv"
)

// Wire: one JSON object per WebSocket text frame, always with a string
// "type" field (Epic lib-pixelstreamingcommon-ue5.5, signalling_messages.proto).
// Unknown fields pass through untouched: the broker relays the sender's bytes
// member by member and only edits "playerId".

// Message types the broker understands (signalling_messages.proto).
const (
	typeIdentify              = "identify"
	typeConfig                = "config"
	typeEndpointID            = "endpointId"
	typeEndpointIDConfirm     = "endpointIdConfirm"
	typeStreamerIDChanged     = "streamerIdChanged"
	typeListStreamers         = "listStreamers"
	typeStreamerList          = "streamerList"
	typeSubscribe             = "subscribe"
	typeUnsubscribe           = "unsubscribe"
	typeSubscribeFailed       = "subscribeFailed"
	typePlayerConnected       = "playerConnected"
	typePlayerDisconnected    = "playerDisconnected"
	typeDisconnectPlayer      = "disconnectPlayer"
	typeOffer                 = "offer"
	typeAnswer                = "answer"
	typeIceCandidate          = "iceCandidate"
	typeLayerPreference       = "layerPreference"
	typeDataChannelRequest    = "dataChannelRequest"
	typePeerDataChannelsReady = "peerDataChannelsReady"
	typePing                  = "ping"
	typePong                  = "pong"
	// The SFU role (PIXEL_STREAMING_SFU.md section 2).
	typeStartStreaming       = "startStreaming"
	typeStopStreaming        = "stopStreaming"
	typePeerDataChannels     = "peerDataChannels"
	typeStreamerDataChannels = "streamerDataChannels"
	typeStreamerDisconnected = "streamerDisconnected"
)

// knownType interns the type names above, so decoding one does not allocate.
func knownType(b []byte) (string, bool) {
	for _, t := range allTypes {
		if t == string(b) {
			return t, true
		}
	}
	return "", false
}

var allTypes = [...]string{typeIdentify, typeConfig, typeEndpointID, typeEndpointIDConfirm,
	typeStreamerIDChanged, typeListStreamers, typeStreamerList, typeSubscribe,
	typeUnsubscribe, typeSubscribeFailed, typePlayerConnected,
	typePlayerDisconnected, typeDisconnectPlayer, typeOffer, typeAnswer,
	typeIceCandidate, typeLayerPreference, typeDataChannelRequest,
	typePeerDataChannelsReady, typePing, typePong, typeStartStreaming,
	typeStopStreaming, typePeerDataChannels, typeStreamerDataChannels,
	typeStreamerDisconnected}

// MaxFields is the most top-level members a message may have. Epic's
// richest message (offer) has six.
const MaxFields = 64

// span is a half-open byte range of Message.Raw.
type span struct{ lo, hi int }

// member is one top-level "key": value of a message.
type member struct {
	all span // from the key's opening quote to the value's end
	key span // inside the quotes, escapes not decoded
	val span // the raw value
	esc bool // key holds a backslash escape
}

// Message is one decoded signalling message. It aliases the frame it was
// decoded from; Decode fills a caller-owned Message without allocating for
// Epic's message types.
type Message struct {
	Raw  []byte // the frame
	Type string // the "type" value (unquoted)

	n       int
	members [MaxFields]member
}

// Decode parses frame into m: frame must be one JSON object with a string
// "type". Errors: ErrBadJSON, ErrNotObject, ErrNoType, ErrTooManyFields.
// One pass validates the frame (exactly what json.Valid accepts,
// jsonscan.go) and splits its top-level members; invalid JSON is
// ErrBadJSON whatever else is wrong with it.
func Decode(frame []byte, m *Message) error {
	m.Raw, m.Type, m.n = frame, "", 0
	i := wsAt(frame, 0)
	if i >= len(frame) {
		return ErrBadJSON
	}
	if frame[i] != '{' {
		if end, ok := validValue(frame, i, 0); !ok || wsAt(frame, end) != len(frame) {
			return ErrBadJSON
		}
		return ErrNotObject
	}
	i = wsAt(frame, i+1)
	if i < len(frame) && frame[i] == '}' {
		if wsAt(frame, i+1) != len(frame) {
			return ErrBadJSON
		}
		return ErrNoType
	}
	tooMany := false
	for {
		if i >= len(frame) || frame[i] != '"' {
			return ErrBadJSON
		}
		ke, ok := validString(frame, i)
		if !ok {
			return ErrBadJSON
		}
		mb := member{all: span{lo: i}, key: span{i + 1, ke - 1}}
		for _, c := range frame[mb.key.lo:mb.key.hi] {
			if c == '\\' {
				mb.esc = true
				break
			}
		}
		if i = wsAt(frame, ke); i >= len(frame) || frame[i] != ':' {
			return ErrBadJSON
		}
		i = wsAt(frame, i+1)
		ve, ok := validValue(frame, i, 1)
		if !ok {
			return ErrBadJSON
		}
		mb.val = span{i, ve}
		mb.all.hi = ve
		if m.n == MaxFields {
			tooMany = true // still validate the rest: bad JSON wins
		} else {
			m.members[m.n] = mb
			m.n++
		}
		if i = wsAt(frame, ve); i >= len(frame) {
			return ErrBadJSON
		}
		if frame[i] == '}' {
			break
		}
		if frame[i] != ',' {
			return ErrBadJSON
		}
		i = wsAt(frame, i+1)
	}
	if wsAt(frame, i+1) != len(frame) {
		return ErrBadJSON
	}
	if tooMany {
		m.n = 0
		return ErrTooManyFields
	}
	t, ok := m.Field("type")
	if !ok || len(t) < 2 || t[0] != '"' {
		return ErrNoType
	}
	if kt, ok := knownType(t[1 : len(t)-1]); ok {
		m.Type = kt
		return nil
	}
	var s string
	if err := json.Unmarshal(t, &s); err != nil {
		return ErrNoType
	}
	m.Type = s
	return nil
}

// keyIs reports whether member mb's key is k.
func (m *Message) keyIs(mb *member, k string) bool {
	raw := m.Raw[mb.key.lo:mb.key.hi]
	if !mb.esc {
		return string(raw) == k
	}
	var s string
	if err := json.Unmarshal(m.Raw[mb.key.lo-1:mb.key.hi+1], &s); err != nil {
		return false
	}
	return s == k
}

// Field returns the raw value of key (the last one, as JSON.parse does).
func (m *Message) Field(key string) ([]byte, bool) {
	for j := m.n - 1; j >= 0; j-- {
		mb := &m.members[j]
		if m.keyIs(mb, key) {
			return m.Raw[mb.val.lo:mb.val.hi], true
		}
	}
	return nil, false
}

// String returns key's value if it is a JSON string.
func (m *Message) String(key string) (string, bool) {
	raw, ok := m.Field(key)
	if !ok || len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// IDString returns key's value as an id: a string as is, a number in its
// JSON text form (UE streamers may send playerId as a number).
func (m *Message) IDString(key string) (string, bool) {
	raw, ok := m.Field(key)
	if !ok || len(raw) == 0 {
		return "", false
	}
	if c := raw[0]; c == '-' || (c >= '0' && c <= '9') {
		return string(raw), true
	}
	return m.String(key)
}

// Without returns a new frame with every key member removed; the other
// members keep their bytes and order.
func (m *Message) Without(key string) []byte {
	return m.rebuild(key, nil)
}

// WithString returns a new frame whose key member is the JSON string val:
// replaced in place when present (duplicates dropped), appended otherwise.
func (m *Message) WithString(key, val string) []byte {
	return m.rebuild(key, appendQuote(nil, val))
}

// rebuild is the frame with every key member removed (val nil), or with
// its first key member's value replaced by the JSON value val (appended
// when there is none) and the others removed. Every other member keeps
// its bytes and order.
func (m *Message) rebuild(key string, val []byte) []byte {
	return m.appendRebuilt(make([]byte, 0, m.rebuiltLen(key, val)), key, val)
}

// rebuiltLen is len(m.rebuild(key, val)), computed without building it
// (a socket's frame header comes first).
func (m *Message) rebuiltLen(key string, val []byte) int {
	n, members := 2, 0 // the braces
	done := val == nil
	for j := 0; j < m.n; j++ {
		mb := &m.members[j]
		if m.keyIs(mb, key) {
			if done {
				continue
			}
			done = true
			n += mb.val.lo - mb.all.lo + len(val)
		} else {
			n += mb.all.hi - mb.all.lo
		}
		members++
	}
	if !done {
		var q [64]byte
		n += len(strconv.AppendQuote(q[:0], key)) + 1 + len(val)
		members++
	}
	if members > 1 {
		n += members - 1 // commas
	}
	return n
}

// appendRebuilt appends m.rebuild(key, val) to out.
func (m *Message) appendRebuilt(out []byte, key string, val []byte) []byte {
	out = append(out, '{')
	done := val == nil
	first := true
	for j := 0; j < m.n; j++ {
		mb := &m.members[j]
		if m.keyIs(mb, key) {
			if done {
				continue
			}
			done = true
			if !first {
				out = append(out, ',')
			}
			first = false
			out = append(out, m.Raw[mb.all.lo:mb.val.lo]...)
			out = append(out, val...)
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, m.Raw[mb.all.lo:mb.all.hi]...)
	}
	if !done {
		if !first {
			out = append(out, ',')
		}
		out = strconv.AppendQuote(out, key)
		out = append(out, ':')
		out = append(out, val...)
	}
	return append(out, '}')
}

// Messages the broker composes. Ids are quoted with encoding/json, so an id
// a streamer chose cannot break the frame.

func quote(s string) []byte {
	return appendQuote(nil, s)
}

// appendQuote appends s as encoding/json quotes it. Plain printable ASCII
// (every id the broker mints, and Epic's) is copied as is; anything else
// goes through encoding/json, so the bytes are identical.
func appendQuote(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(out, q...)
		}
	}
	out = append(out, '"')
	out = append(out, s...)
	return append(out, '"')
}

// msgIdentify is shared by every streamer socket; queued frames are never
// modified.
var msgIdentify = []byte(`{"type":"identify"}`)

func msgConfig(pco json.RawMessage) []byte {
	out := []byte(`{"type":"config","peerConnectionOptions":`)
	out = append(out, pco...)
	return append(out, `,"protocolVersion":"`+ProtocolVersion+`"}`...)
}

func msgEndpointIDConfirm(id string) []byte {
	return append(append([]byte(`{"type":"endpointIdConfirm","committedId":`), quote(id)...), '}')
}

func msgStreamerIDChanged(id string) []byte {
	return append(append([]byte(`{"type":"streamerIdChanged","newID":`), quote(id)...), '}')
}

func msgStreamerList(ids []string) []byte {
	n := 32
	for _, id := range ids {
		n += len(id) + 3
	}
	out := append(make([]byte, 0, n), `{"type":"streamerList","ids":[`...)
	for i, id := range ids {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendQuote(out, id)
	}
	return append(out, "]}"...)
}

func msgSubscribeFailed(text string) []byte {
	return append(append([]byte(`{"type":"subscribeFailed","message":`), quote(text)...), '}')
}

func msgPlayerConnected(id string) []byte {
	return append(append([]byte(`{"type":"playerConnected","playerId":`), quote(id)...),
		`,"dataChannel":true,"sfu":false}`...)
}

// msgSFUConnected is what an SFU's upstream streamer gets when the SFU
// subscribes: the SFU's player id, with sfu:true.
func msgSFUConnected(id string) []byte {
	return append(append([]byte(`{"type":"playerConnected","playerId":`), quote(id)...),
		`,"dataChannel":true,"sfu":true}`...)
}

// msgStreamerDisconnected tells an SFU its upstream streamer left.
var msgStreamerDisconnected = []byte(`{"type":"streamerDisconnected"}`)

func msgPlayerDisconnected(id string) []byte {
	return append(append([]byte(`{"type":"playerDisconnected","playerId":`), quote(id)...), '}')
}

// msgPong echoes ping's time unchanged; a missing time is 0.
func msgPong(m *Message) []byte {
	t, ok := m.Field("time")
	if !ok {
		t = []byte("0")
	}
	return append(append([]byte(`{"type":"pong","time":`), t...), '}')
}
