package streamer

import (
	"strings"
	"sync"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"
)

// ridTrack is one simulcast encoding of the pattern. pion's simulcast
// senders send each encoding on its own SSRC but do not stamp the mid and
// rid header extensions a receiver identifies RID layers by (RFC 8852), so
// this track packetizes its frames itself and adds them, as a browser's
// encoder does.
type ridTrack struct {
	rid string
	tr  *webrtc.RTPTransceiver // set once added; its mid names the section

	mu   sync.Mutex
	bind *ridBinding // guarded by mu
}

type ridBinding struct {
	w            webrtc.TrackLocalWriter
	pk           rtp.Packetizer
	midID, ridID uint8
}

var _ webrtc.TrackLocal = (*ridTrack)(nil)

func (t *ridTrack) Bind(ctx webrtc.TrackLocalContext) (webrtc.RTPCodecParameters, error) {
	for _, c := range ctx.CodecParameters() {
		if !strings.EqualFold(c.MimeType, webrtc.MimeTypeH264) {
			continue
		}
		b := &ridBinding{w: ctx.WriteStream(),
			pk: rtp.NewPacketizer(1200, uint8(c.PayloadType), uint32(ctx.SSRC()), &codecs.H264Payloader{},
				rtp.NewRandomSequencer(), 90000)}
		for _, e := range ctx.HeaderExtensions() {
			switch e.URI {
			case sdp.SDESMidURI:
				b.midID = uint8(e.ID)
			case sdp.SDESRTPStreamIDURI:
				b.ridID = uint8(e.ID)
			}
		}
		t.mu.Lock()
		t.bind = b
		t.mu.Unlock()
		return c, nil
	}
	return webrtc.RTPCodecParameters{}, webrtc.ErrUnsupportedCodec
}

func (t *ridTrack) Unbind(webrtc.TrackLocalContext) error {
	t.mu.Lock()
	t.bind = nil
	t.mu.Unlock()
	return nil
}

func (t *ridTrack) ID() string                { return "pixelstreaming_video_track_label" }
func (t *ridTrack) RID() string               { return t.rid }
func (t *ridTrack) StreamID() string          { return "pixelstreaming_av_stream_id" }
func (t *ridTrack) Kind() webrtc.RTPCodecType { return webrtc.RTPCodecTypeVideo }

// WriteSample packetizes one access unit (Annex B) and sends it.
func (t *ridTrack) WriteSample(s sampleOut) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bind
	if b == nil {
		return nil // not negotiated yet
	}
	mid := ""
	if t.tr != nil {
		mid = t.tr.Mid()
	}
	samples := uint32(s.Duration.Seconds() * 90000)
	for _, p := range b.pk.Packetize(s.Data, samples) {
		if b.midID != 0 && mid != "" {
			_ = p.Header.SetExtension(b.midID, []byte(mid))
		}
		if b.ridID != 0 {
			_ = p.Header.SetExtension(b.ridID, []byte(t.rid))
		}
		if _, err := b.w.WriteRTP(&p.Header, p.Payload); err != nil {
			return err
		}
	}
	return nil
}

// sampleOut is one frame for a track.
type sampleOut struct {
	Data     []byte
	Duration time.Duration
}
