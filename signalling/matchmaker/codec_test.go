package matchmaker

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

func readSDP(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCheckOffer(t *testing.T) {
	h264, av1 := readSDP(t, "ue_offer_h264.sdp"), readSDP(t, "ue_offer_av1.sdp")
	const audioOnly = "v=0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=rtpmap:111 opus/48000/2\r\n"
	for _, tc := range []struct {
		name, codec, sdp string
		want             error
	}{
		{"UE H264 offer, H264 lease", "H264", h264, nil},
		{"lease codec is case-insensitive", "h264", h264, nil},
		{"UE AV1 offer, AV1 lease", "AV1", av1, nil},
		{"AV1X name", "AV1", strings.ReplaceAll(av1, "AV1/90000", "AV1X/90000"), nil},
		{"LF line endings", "H264", strings.ReplaceAll(h264, "\r\n", "\n"), nil},
		{"H264 offer, AV1 lease", "AV1", h264, ErrCodecNotOffered},
		{"AV1 offer, H264 lease", "H264", av1, ErrCodecNotOffered},
		{"codec only in the audio section", "H264", "v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 VP8/90000\r\nm=audio 9 RTP/AVP 100\r\na=rtpmap:100 H264/90000\r\n", ErrCodecNotOffered},
		{"rtpmap for a payload type not on the m-line", "H264", "v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 VP8/90000\r\na=rtpmap:97 H264/90000\r\n", ErrCodecNotOffered},
		{"wrong clock rate", "H264", "v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 H264/48000\r\n", ErrCodecNotOffered},
		{"rejected video section still counts its rtpmaps", "VP8", "v=0\r\nm=video 0 UDP/TLS/RTP/SAVPF 96\r\na=rtpmap:96 VP8/90000\r\n", nil},
		{"no video section", "H264", audioOnly, ErrNoVideoSection},
		{"empty", "H264", "", ErrNoVideoSection},
		{"unknown lease codec", "H265", h264, ErrCodecNotOffered},
		{"too large", "H264", h264 + strings.Repeat("a=x\r\n", MaxSDPBytes/5), ErrSDPTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckOffer(tc.codec, tc.sdp)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("CheckOffer = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestOfferCheckUsesLeaseCodec(t *testing.T) {
	r := newRig(t, nil, nil)
	r.fleet.add("us-east-1", 1, "AV1", "H264")
	got, err := r.m.Match(context.Background(), req("us-east", "paid", false, "AV1"))
	if err != nil {
		t.Fatal(err)
	}
	hook := r.m.Hooks()
	if err := hook.CheckOffer(got.SessionID, "", readSDP(t, "ue_offer_av1.sdp")); err != nil {
		t.Fatalf("matching offer: %v", err)
	}
	if err := hook.CheckOffer(got.SessionID, "", readSDP(t, "ue_offer_h264.sdp")); !errors.Is(err, ErrCodecNotOffered) {
		t.Fatalf("mismatched offer: %v", err)
	}
	if err := hook.CheckOffer("pxs_unknown", "", readSDP(t, "ue_offer_av1.sdp")); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("unknown session: %v", err)
	}
	// A session matched on another edge: this matchmaker never saw it, but
	// the signed token's codec claim is enough to check the offer.
	if err := hook.CheckOffer("pxs_elsewhere", "AV1", readSDP(t, "ue_offer_av1.sdp")); err != nil {
		t.Fatalf("token codec, matching offer: %v", err)
	}
	if err := hook.CheckOffer("pxs_elsewhere", "AV1", readSDP(t, "ue_offer_h264.sdp")); !errors.Is(err, ErrCodecNotOffered) {
		t.Fatalf("token codec, mismatched offer: %v", err)
	}
	r.m.Release(got.SessionID)
	if err := hook.CheckOffer(got.SessionID, "", readSDP(t, "ue_offer_av1.sdp")); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("released session: %v", err)
	}
}

func FuzzCheckOffer(f *testing.F) {
	f.Add("H264", readSDP(f, "ue_offer_h264.sdp"))
	f.Add("AV1", readSDP(f, "ue_offer_av1.sdp"))
	f.Add("VP8", "m=video 9 X 96\na=rtpmap:96 VP8/90000/2\n")
	f.Add("H264", "m=video\na=rtpmap:\na=rtpmap:96\n")
	f.Fuzz(func(t *testing.T, codec, sdp string) {
		err := CheckOffer(codec, sdp)
		if err == nil && !strings.Contains(sdp, "m=video") {
			t.Fatal("accepted an offer without m=video")
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add(`{"user_id":"u","client_region":"us-east","codecs":["H264","AV1"],"entitlement":"free","cross_region_consent":true}`)
	f.Add(`{"client_region":5}`)
	f.Add(`{"x":1}`)
	f.Add(`[]`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, body string) {
		var req Request
		if rf := decodeStrict([]byte(body), &req); rf != nil && rf.Status != 400 {
			t.Fatalf("status %d", rf.Status)
		}
	})
}

func FuzzParseTopology(f *testing.F) {
	f.Add(string(defaultTopologyJSON))
	f.Add(`{"version":1}`)
	f.Add(`{"version":1,"latency_budget_ms":60,"free_tier_max_utilisation_bp":8500,"sessions_per_gpu_node":6,"regions":{"x":"us"},"pops":[{"id":"p","residency":"us","health":"accepting","max_sessions":1,"gpu_quota":1,"paid_headroom_sessions":0,"priority":0,"codecs":["h264"],"rtt_ms":{"x":1}}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		topo, err := ParseTopology([]byte(s))
		if err != nil {
			return
		}
		if err := topo.Validate(); err != nil {
			t.Fatalf("parsed topology fails Validate: %v", err)
		}
	})
}
