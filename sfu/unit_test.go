package sfu

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pion/rtp"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
)

func TestParseRTP(t *testing.T) {
	mk := func(mod func(*rtp.Packet)) []byte {
		p := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: 7, Timestamp: 960, SSRC: 9, Marker: true}, Payload: []byte{1, 2, 3}}
		if mod != nil {
			mod(p)
		}
		b, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name    string
		b       []byte
		levelID uint8
		ok      bool
		level   int
		voice   bool
		payload []byte
	}{
		{"plain", mk(nil), 1, true, noAudioLevel, false, []byte{1, 2, 3}},
		{"one-byte level", mk(func(p *rtp.Packet) { _ = p.SetExtension(1, []byte{0x80 | 42}) }), 1, true, 42, true, []byte{1, 2, 3}},
		{"other id", mk(func(p *rtp.Packet) { _ = p.SetExtension(3, []byte{0x80 | 42}) }), 1, true, noAudioLevel, false, []byte{1, 2, 3}},
		{"level after another element", mk(func(p *rtp.Packet) {
			_ = p.SetExtension(2, []byte{9, 9, 9})
			_ = p.SetExtension(5, []byte{17})
		}), 5, true, 17, false, []byte{1, 2, 3}},
		{"two-byte level", mk(func(p *rtp.Packet) {
			p.Extension, p.ExtensionProfile = true, 0x1000
			_ = p.SetExtension(20, []byte{0x80 | 5})
		}), 20, true, 5, true, []byte{1, 2, 3}},
		{"csrc", mk(func(p *rtp.Packet) { p.CSRC = []uint32{1, 2} }), 1, true, noAudioLevel, false, []byte{1, 2, 3}},
		{"padding", mk(func(p *rtp.Packet) { p.Padding = true; p.PaddingSize = 4 }), 1, true, noAudioLevel, false, []byte{1, 2, 3}},
		{"short", []byte{0x80, 111, 0}, 1, false, 0, false, nil},
		{"version 1", append([]byte{0x40}, mk(nil)[1:]...), 1, false, 0, false, nil},
		{"csrc overrun", append([]byte{0x8f}, mk(nil)[1:]...), 1, false, 0, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var in rtpInfo
			ok := parseRTP(c.b, c.levelID, &in)
			if ok != c.ok {
				t.Fatalf("ok = %v", ok)
			}
			if !ok {
				return
			}
			if in.seq != 7 || in.ts != 960 || in.ssrc != 9 || in.pt != 111 || !in.marker {
				t.Fatalf("header %+v", in)
			}
			if in.audioLevel != c.level || in.voice != c.voice {
				t.Fatalf("level %d voice %v", in.audioLevel, in.voice)
			}
			if got := c.b[in.payOff:in.payEnd]; string(got) != string(c.payload) {
				t.Fatalf("payload %v", got)
			}
		})
	}
}

func FuzzParseRTP(f *testing.F) {
	f.Add(opusPacket(1), uint8(1))
	p := &rtp.Packet{Header: rtp.Header{Version: 2, Padding: true, PaddingSize: 3, CSRC: []uint32{5}}, Payload: []byte{1}}
	b, _ := p.Marshal()
	f.Add(b, uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, id uint8) {
		var in rtpInfo
		if parseRTP(b, id, &in) {
			if in.payOff > in.payEnd || in.payEnd > len(b) {
				t.Fatalf("payload bounds %d..%d of %d", in.payOff, in.payEnd, len(b))
			}
			if in.audioLevel < noAudioLevel || in.audioLevel > 127 {
				t.Fatalf("level %d", in.audioLevel)
			}
		}
	})
}

const seedOffer = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\n" +
	"m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=rtpmap:111 opus/48000/2\r\na=sendrecv\r\n" +
	"m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:1\r\na=rtpmap:111 opus/48000/2\r\na=recvonly\r\n"

func TestCheckOffer(t *testing.T) {
	info, err := checkOffer(seedOffer)
	if err != nil {
		t.Fatal(err)
	}
	if info.dirs["0"] != "sendrecv" || info.dirs["1"] != "recvonly" {
		t.Fatalf("dirs %v", info.dirs)
	}
	if _, err := checkOffer("garbage"); !errors.Is(err, ErrBadSDP) {
		t.Fatalf("garbage: %v", err)
	}
	pcmu := "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 0\r\na=mid:0\r\na=rtpmap:0 PCMU/8000\r\n"
	if _, err := checkOffer(pcmu); !errors.Is(err, ErrNoOpus) {
		t.Fatalf("pcmu: %v", err)
	}
}

func FuzzCheckOffer(f *testing.F) {
	f.Add(seedOffer)
	f.Add("v=0\r\n")
	f.Fuzz(func(t *testing.T, s string) {
		_, err := checkOffer(s)
		if err != nil && !errors.Is(err, ErrBadSDP) && !errors.Is(err, ErrNoOpus) {
			t.Fatalf("untyped error %v", err)
		}
	})
}

func TestRankAndAssign(t *testing.T) {
	p := func(id uint32) *peer { return &peer{entityID: id} }
	a, b, c, d, e := p(1), p(2), p(3), p(4), p(5)
	cands := []candidate{
		{sp: a, level: 5, d2: 100},
		{sp: b, level: 9, d2: 900},
		{sp: c, squad: true, level: 0, d2: 1 << 40},
		{sp: d, level: 9, d2: 100}, // as loud as b, nearer
		{sp: e, level: 1, d2: 1},
	}
	rank(cands)
	var order []uint32
	for _, x := range cands {
		order = append(order, x.sp.entityID)
	}
	want := []uint32{3, 4, 2, 1, 5}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("rank order %v, want %v", order, want)
		}
	}
	// Speakers staying in the top K keep their slots.
	slots := []*peer{b, nil, a}
	if n := assign(slots, cands[:3]); n != 2 || slots[0] != b || slots[1] != c && slots[1] != d || slots[2] == a {
		t.Fatalf("assign changed %d: %v", n, slots)
	}
	if n := assign(slots, nil); n != 3 || slots[0] != nil {
		t.Fatalf("clear changed %d", n)
	}
}

func TestPolicy(t *testing.T) {
	friend := &peer{subject: "f"}
	stranger := &peer{subject: "x"}
	cases := []struct {
		acc              auth.Access
		other            *peer
		squad, wantAllow bool
	}{
		{auth.Access{}, stranger, false, true},
		{auth.Access{Voice: auth.VoiceOff}, friend, true, false},
		{auth.Access{Voice: auth.VoiceSquadOnly}, friend, false, false},
		{auth.Access{Voice: auth.VoiceSquadOnly}, stranger, true, true},
		{auth.Access{Voice: auth.VoiceFriendsOnly, Friends: []string{"f"}}, friend, false, true},
		{auth.Access{Voice: auth.VoiceFriendsOnly, Friends: []string{"f"}}, stranger, false, false},
		{auth.Access{Voice: auth.VoiceFriendsOnly}, stranger, true, true},
		{auth.Access{Voice: "something-new"}, stranger, true, false}, // fail closed
	}
	for i, c := range cases {
		if got := newPolicy(c.acc).allows(c.other, c.squad); got != c.wantAllow {
			t.Errorf("case %d: allows = %v", i, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"slots":    func(c *Config) { c.Slots = 0 },
		"loss":     func(c *Config) { c.LossBudget = 1 },
		"latency":  func(c *Config) { c.LatencyBudgetMs = 0 },
		"speaking": func(c *Config) { c.SpeakingOff = 120 },
	} {
		c := Default()
		mod(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestControlErrors: a client's mistakes are client codes from the
// realtime protocol's table (never internal) and change nothing.
func TestControlErrors(t *testing.T) {
	s := bareSFU(t, func(c *Config) { c.MaxMutes = 2 })
	s.members = map[string]*member{}
	s.rooms = map[string]map[*peer]bool{}
	for i := range 16 {
		if err := s.Control("x", joinSquad(fmt.Sprint("squad-", i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []uint32{1, 2} {
		if err := s.Control("x", mute(id)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name     string
		vc       *codec.VoiceControl
		sentinel error
		code     codec.Code
	}{
		{"nil", nil, ErrBadControl, codec.CodeVoiceControlInvalid},
		{"empty operation", &codec.VoiceControl{}, ErrBadControl, codec.CodeVoiceControlInvalid},
		{"mute entity 0", mute(0), ErrBadControl, codec.CodeVoiceControlInvalid},
		{"empty squad id", joinSquad(""), ErrBadControl, codec.CodeVoiceControlInvalid},
		{"129-byte squad id", joinSquad(strings.Repeat("s", 129)), ErrBadControl, codec.CodeVoiceControlInvalid},
		{"17th squad", joinSquad("squad-16"), ErrLimit, codec.CodeVoiceControlLimit},
		{"3rd mute", mute(3), ErrLimit, codec.CodeVoiceControlLimit},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := s.Control("x", c.vc)
			if !errors.Is(err, c.sentinel) || codec.CodeOf(err) != c.code || !c.code.Valid() {
				t.Fatalf("got %v (code %s), want %v with code %s", err, codec.CodeOf(err), c.sentinel, c.code)
			}
			if p := codec.ToProto(err); p.GetCode() != string(c.code) || p.GetMessage() == "" {
				t.Fatalf("client sees %v", p)
			}
		})
	}
	m := s.members["x"]
	if len(m.squads) != 16 || len(m.muted) != 2 {
		t.Fatalf("refused controls changed the member: %d squads, %d mutes", len(m.squads), len(m.muted))
	}
	// At the limit, joining a squad already joined is no error.
	if err := s.Control("x", joinSquad("squad-3")); err != nil {
		t.Fatal(err)
	}
	if err := s.Control("x", joinSquad(strings.Repeat("s", 128))); !errors.Is(err, ErrLimit) {
		t.Fatalf("a 128-byte id is valid (and over the squad limit here): %v", err)
	}
}
