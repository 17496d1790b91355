package sfu

import (
	"strings"
	"testing"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/oshun/egbe-edge/auth"
)

// opusFmtps returns the a=fmtp value per Opus payload type of every audio
// m-line of raw.
func opusFmtps(t *testing.T, raw string) []map[string]string {
	t.Helper()
	var d sdp.SessionDescription
	if err := d.UnmarshalString(raw); err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, md := range d.MediaDescriptions {
		if md.MediaName.Media != "audio" {
			continue
		}
		opus := map[string]bool{}
		fmtp := map[string]string{}
		for _, a := range md.Attributes {
			pt, rest, _ := strings.Cut(a.Value, " ")
			switch a.Key {
			case "rtpmap":
				if strings.HasPrefix(strings.ToLower(rest), "opus/48000") {
					opus[pt] = true
				}
			case "fmtp":
				fmtp[pt] = rest
			}
		}
		m := map[string]string{}
		for pt := range opus {
			m[pt] = fmtp[pt]
		}
		out = append(out, m)
	}
	return out
}

// TestOpusAnswer: the answer carries the reference's Opus parameters on
// every audio m-line, with the payload type the client offered, whether
// the client offered browser defaults or something else entirely (payload
// type 109 as Firefox uses, stereo, no FEC); each hears the other, on its
// own payload type.
func TestOpusAnswer(t *testing.T) {
	e := newEnv(t, nil)
	// A browser-like client (pion's defaults: 111, minptime=10;useinbandfec=1).
	tok1 := e.session(sessionName(1), "user1", "r", 1, auth.Access{})
	c1, offer1 := newClient(t, 1, 2, true)
	answer1 := e.joinClient(tok1, sessionName(1), c1, offer1)
	// A client that offers otherwise.
	other := otherOpusAPI(t)
	tok2 := e.session(sessionName(2), "user2", "r", 2, auth.Access{})
	c2, offer2 := newClientAPI(t, 2, 2, other)
	if !strings.Contains(offer2, "a=fmtp:109 stereo=1;sprop-stereo=1;useinbandfec=0") {
		t.Fatalf("the other client's offer is not what the test means:\n%s", offer2)
	}
	answer2 := e.joinClient(tok2, sessionName(2), c2, offer2)
	for name, c := range map[string]struct {
		answer, pt string
	}{"browser defaults": {answer1, "111"}, "other offer": {answer2, "109"}} {
		for i, m := range opusFmtps(t, c.answer) {
			if len(m) != 1 || m[c.pt] != opusAnswerFmtp {
				t.Errorf("%s: audio m-line %d answers Opus %v, want {%s: %s}", name, i, m, c.pt, opusAnswerFmtp)
			}
		}
	}
	e.sfu.UpdatePosition(sessionName(1), 0, 0, 0)
	e.sfu.UpdatePosition(sessionName(2), 0, 0, 0)
	expectHearing(t, []*client{c1, c2}, map[*client][]byte{c1: {2}, c2: {1}})
}

// otherOpusAPI is a client API whose Opus is payload type 109 with stereo
// and no FEC (what a non-browser client might offer).
func otherOpusAPI(t *testing.T) *webrtc.API {
	me := &webrtc.MediaEngine{}
	if err := me.RegisterCodec(webrtc.RTPCodecParameters{
		RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2,
			SDPFmtpLine: "stereo=1;sprop-stereo=1;useinbandfec=0"},
		PayloadType: 109,
	}, webrtc.RTPCodecTypeAudio); err != nil {
		t.Fatal(err)
	}
	if err := me.RegisterHeaderExtension(webrtc.RTPHeaderExtensionCapability{URI: sdp.AudioLevelURI}, webrtc.RTPCodecTypeAudio); err != nil {
		t.Fatal(err)
	}
	var se webrtc.SettingEngine
	se.SetIncludeLoopbackCandidate(true)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetInterfaceFilter(func(name string) bool { return name == "lo" })
	return webrtc.NewAPI(webrtc.WithMediaEngine(me), webrtc.WithSettingEngine(se), webrtc.WithInterceptorRegistry(&interceptor.Registry{}))
}
