package sfu

import "github.com/pion/webrtc/v4"

// Opus as the reference fixes it: 24 kbit/s, mono, 20 ms frames
// (OPUS_24KBPS_MONO_*). The answer says so for every audio m-line, with
// the payload type the client offered and whatever its offer's fmtp said
// (RFC 7587 section 7: in an answer these parameters are the answerer's
// receive preferences, which the client's encoder follows):
//
//	a=fmtp:<pt> minptime=10;useinbandfec=1;stereo=0;sprop-stereo=0;maxaveragebitrate=24000
//
// maxaveragebitrate caps the client's encoder at 24 kbit/s; stereo=0 asks
// for mono; sprop-stereo=0 says what the slots carry (mono); useinbandfec=1
// asks for Opus in-band FEC (forwarded as is: a listener's decoder
// recovers a lost frame from the next packet); minptime=10 is what
// browsers offer. DTX stays the client's choice and passes through.
//
// Frame size: 20 ms is every WebRTC Opus sender's default (RFC 7587
// section 4.2 recommends it), and the answer adds no a=ptime/a=maxptime:
// pion refuses a modified answer (SetLocalDescription must get exactly
// what CreateAnswer returned) and has no API for media-level ptime. A
// client that sends other frame sizes is forwarded unchanged; slot
// rewriting's timestamp step after a speaker switch counts wall time in
// 20 ms units either way.
const opusAnswerFmtp = "minptime=10;useinbandfec=1;stereo=0;sprop-stereo=0;maxaveragebitrate=24000"

// opusCodec is the Opus the SFU registers and answers with. PayloadType 0
// in a transceiver's preferences means "the offer's".
var opusCodec = webrtc.RTPCodecParameters{
	RTPCodecCapability: webrtc.RTPCodecCapability{
		MimeType: webrtc.MimeTypeOpus, ClockRate: opusClock, Channels: 2,
		SDPFmtpLine: opusAnswerFmtp,
	},
}

// preferOpus makes every audio transceiver of pc answer with opusCodec.
// Called after the offer is set (pion has taken the offer's codecs as the
// transceivers' preferences by then) and before CreateAnswer.
func preferOpus(pc *webrtc.PeerConnection) {
	for _, t := range pc.GetTransceivers() {
		if t.Kind() == webrtc.RTPCodecTypeAudio {
			// An m-line without Opus keeps pion's choice (it carries
			// nothing the SFU uses).
			_ = t.SetCodecPreferences([]webrtc.RTPCodecParameters{opusCodec})
		}
	}
}
