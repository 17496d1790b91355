package pxsfu

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/oshun/egbe-edge/internal/pxmux"
)

// upstream is the SFU's peer connection with its streamer.
type upstream struct {
	s           *SFU
	pc          *webrtc.PeerConnection
	api         *webrtc.API // immutable: registered with the offer's codecs and payload types
	ssrcAPI     *webrtc.API // immutable: builds SSRC-simulcast layer receivers (startSSRCLayers)
	info        offerInfo   // immutable
	multiplex   bool        // immutable: one shared data stream pair (internal/pxmux)
	scalability string      // immutable: the offer's scalabilityMode
	playerAPI   *webrtc.API // immutable: players' media engine, the negotiated codecs
	video       []*layer    // immutable: lowest resolution first; nil without video
	audio       atomic.Pointer[[]*audioOut]
	ptKind      [128]codecKind // immutable: key-frame test per negotiated video payload type

	dmu     sync.Mutex
	dc      *webrtc.DataChannel // guarded by dmu: the streamer's own channel (multiplexed)
	usedIDs map[uint16]bool     // guarded by dmu: SCTP stream ids in use on this association
	nextID  uint16              // guarded by dmu

	started atomic.Bool // startStreaming sent
	extraMu sync.Mutex
	extra   []*webrtc.RTPReceiver // guarded by extraMu: SSRC-simulcast layer receivers (startSSRCLayers)
	dirty   atomic.Bool           // a player switched layers: rebuild the lists
	pli     func(ssrc uint32)     // immutable; tests: replaces the PLI write

	wgMu   sync.Mutex
	closed bool // guarded by wgMu
	wg     sync.WaitGroup
}

// layer is one simulcast encoding of the upstream video.
type layer struct {
	idx  int32
	info layerInfo
	ssrc atomic.Uint32 // learned from its track
	subs atomic.Pointer[[]*videoOut]

	bytes   atomic.Uint64 // received, for the bitrate
	lastPkt atomic.Int64  // unix ns of the last packet
	lastKey atomic.Int64  // unix ns of the last key frame start
	rate    atomic.Uint64 // bits/s, smoothed (ticker)
	prev    uint64        // owned by the ticker: bytes at the last sample

	kmu     sync.Mutex
	lastReq int64 // guarded by kmu: unix ns of the last PLI sent
	pending int64 // guarded by kmu: unix ns a merged request waits since (0: none)
}

// goTracked runs f on a goroutine the upstream's close waits for.
func (u *upstream) track(f func()) bool {
	u.wgMu.Lock()
	defer u.wgMu.Unlock()
	if u.closed {
		return false
	}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		f()
	}()
	return true
}

// enter counts a pion callback goroutine that runs long (a track reader).
func (u *upstream) enter() bool {
	u.wgMu.Lock()
	defer u.wgMu.Unlock()
	if u.closed {
		return false
	}
	u.wg.Add(1)
	return true
}

func (u *upstream) close() {
	u.wgMu.Lock()
	u.closed = true
	u.wgMu.Unlock()
	_ = u.pc.Close()
	// The peer connection does not know the receivers startSSRCLayers
	// made; stopping them ends their readers.
	u.extraMu.Lock()
	extra := u.extra
	u.extra = nil
	u.extraMu.Unlock()
	for _, r := range extra {
		_ = r.Stop()
	}
	u.wg.Wait()
}

// onStreamerOffer answers the streamer (one at a time).
func (s *SFU) onStreamerOffer(ss *session, m *inbound) {
	s.mu.Lock()
	has := s.up != nil
	s.mu.Unlock()
	if has {
		s.met.refuse(refuseSecondOffer)
		s.log.Warn("streamer offer refused", "err", ErrSecondOffer)
		return
	}
	up, answer, err := s.newUpstream(m)
	if err != nil {
		s.met.refuse(refuseBadOffer)
		s.log.Warn("streamer offer refused", "err", err)
		s.scheduleRetry(ss)
		return
	}
	s.mu.Lock()
	if s.sess != ss { // the session ended meanwhile
		s.mu.Unlock()
		up.close()
		return
	}
	s.up = up
	waiting := s.waiting
	s.waiting = nil
	s.mu.Unlock()
	s.log.Debug("streamer answer", "sdp", answer)
	ss.send(map[string]string{"type": "answer", "sdp": answer})
	s.log.Info("answered streamer", "layers", len(up.video), "simulcast", up.info.video.form,
		"audio", up.info.audio != nil, "data", up.info.data, "multiplex", up.multiplex)
	for _, id := range waiting {
		s.onPlayerConnected(id)
	}
}

// newUpstream builds the streamer's peer connection and answers offer.
func (s *SFU) newUpstream(m *inbound) (*upstream, string, error) {
	info, err := parseOffer(m.SDP)
	if err != nil {
		return nil, "", err
	}
	var parsed sdp.SessionDescription
	_ = parsed.UnmarshalString(m.SDP) // parseOffer did
	me, err := offerMediaEngine(&parsed, info, true)
	if err != nil {
		return nil, "", err
	}
	ir := &interceptor.Registry{}
	// NACKs and receiver reports to the streamer, and transport-wide
	// congestion feedback so its encoder can adapt.
	if err := webrtc.ConfigureNack(me, ir); err != nil {
		return nil, "", err
	}
	if err := webrtc.ConfigureRTCPReports(ir); err != nil {
		return nil, "", err
	}
	if err := webrtc.ConfigureTWCCSender(me, ir); err != nil {
		return nil, "", err
	}
	se := s.port.SettingEngine()
	var ssrcAPI *webrtc.API
	api := webrtc.NewAPI(webrtc.WithMediaEngine(me), webrtc.WithInterceptorRegistry(ir), webrtc.WithSettingEngine(se))
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrBadOffer, err)
	}
	mode := m.ScalabilityMode
	if mode == "" {
		mode = "L1T1"
	}
	if info.video.form == formSSRC {
		rme, err := offerMediaEngine(&parsed, offerInfo{video: info.video}, false)
		if err != nil {
			return nil, "", err
		}
		if err := registerExtensionsByID(rme, &parsed, info.video); err != nil {
			return nil, "", err
		}
		ssrcAPI = webrtc.NewAPI(webrtc.WithMediaEngine(rme), webrtc.WithSettingEngine(s.port.SettingEngine()))
	}
	u := &upstream{s: s, pc: pc, api: api, ssrcAPI: ssrcAPI, info: info, multiplex: truthy(m.Multiplex), scalability: mode,
		usedIDs: make(map[uint16]bool), nextID: 2}
	for i, li := range info.video.layers {
		u.video = append(u.video, &layer{idx: int32(i), info: li})
	}
	fail := func(err error) (*upstream, string, error) {
		u.close()
		return nil, "", fmt.Errorf("%w: %w", ErrBadOffer, err)
	}
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) { u.onTrack(tr) })
	pc.OnDataChannel(func(dc *webrtc.DataChannel) { u.onDataChannel(dc) })
	pc.OnICEConnectionStateChange(func(st webrtc.ICEConnectionState) {
		if st == webrtc.ICEConnectionStateConnected || st == webrtc.ICEConnectionStateCompleted {
			u.onConnected()
		}
	})
	pc.OnConnectionStateChange(func(st webrtc.PeerConnectionState) {
		switch st {
		case webrtc.PeerConnectionStateConnected:
			if info.video.form == formSSRC {
				u.track(u.startSSRCLayers)
			}
		case webrtc.PeerConnectionStateFailed:
			s.log.Warn("streamer peer connection failed")
			u.track(func() { s.upstreamFailed(u) })
		}
	})
	remote := m.SDP
	if info.video.form == formSSRC {
		remote = firstSSRCOnly(remote, info.video)
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: remote}); err != nil {
		return fail(err)
	}
	answer, err := pc.CreateAnswer(nil)
	if err != nil {
		return fail(err)
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(answer); err != nil {
		return fail(err)
	}
	select {
	case <-gathered:
	case <-time.After(5 * time.Second):
		return fail(errors.New("ICE gathering did not complete"))
	}
	for _, t := range pc.GetTransceivers() {
		if t.Mid() == info.video.mid && t.Receiver() != nil {
			for _, c := range t.Receiver().GetParameters().Codecs {
				u.ptKind[c.PayloadType&0x7f] = codecOf(c.MimeType)
			}
		}
	}
	papi, err := u.newPlayerAPI()
	if err != nil {
		return fail(err)
	}
	u.playerAPI = papi
	s.met.upstream.Set(1)
	return u, pc.LocalDescription().SDP, nil
}

// upstreamFailed: the streamer's peer connection failed without the
// server saying the streamer left; start over.
func (s *SFU) upstreamFailed(u *upstream) {
	s.mu.Lock()
	cur := s.up == u
	s.mu.Unlock()
	if cur {
		// dropStreamer closes u, which waits for this goroutine: run it
		// on the SFU's group instead.
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.dropStreamer(true) }()
	}
}

// offerMediaEngine registers exactly the codecs and header extensions of
// the offer's chosen sections (extensions only if exts), with their payload types, so the answer
// accepts what the streamer encodes and every receiver (pion's, and the
// SSRC-simulcast ones built here) knows its payload types. RED and FEC
// are left out: the SFU forwards media packets only.
func offerMediaEngine(d *sdp.SessionDescription, info offerInfo, exts bool) (*webrtc.MediaEngine, error) {
	me := &webrtc.MediaEngine{}
	for _, md := range d.MediaDescriptions {
		var kind webrtc.RTPCodecType
		var mi *mediaInfo
		switch md.MediaName.Media {
		case "video":
			kind, mi = webrtc.RTPCodecTypeVideo, info.video
		case "audio":
			kind, mi = webrtc.RTPCodecTypeAudio, info.audio
		default:
			continue
		}
		if mi == nil || midOf(md) != mi.mid {
			continue
		}
		for _, f := range md.MediaName.Formats {
			pt, err := strconv.ParseUint(f, 10, 7)
			if err != nil {
				continue
			}
			c, err := d.GetCodecForPayloadType(uint8(pt))
			if err != nil {
				continue
			}
			switch strings.ToLower(c.Name) {
			case "red", "ulpfec", "flexfec-03", "cn", "telephone-event":
				continue
			}
			var fb []webrtc.RTCPFeedback
			for _, f := range c.RTCPFeedback {
				t, p, _ := strings.Cut(f, " ")
				fb = append(fb, webrtc.RTCPFeedback{Type: t, Parameter: p})
			}
			channels := uint16(0)
			if n, err := strconv.Atoi(c.EncodingParameters); err == nil {
				channels = uint16(n)
			}
			if err := me.RegisterCodec(webrtc.RTPCodecParameters{
				RTPCodecCapability: webrtc.RTPCodecCapability{
					MimeType: md.MediaName.Media + "/" + c.Name, ClockRate: c.ClockRate, Channels: channels,
					SDPFmtpLine: c.Fmtp, RTCPFeedback: fb,
				},
				PayloadType: webrtc.PayloadType(pt),
			}, kind); err != nil {
				return nil, fmt.Errorf("%w: codec %s: %w", ErrBadOffer, c.Name, err)
			}
		}
		for _, a := range md.Attributes {
			if a.Key != "extmap" || !exts {
				continue
			}
			var em sdp.ExtMap
			if err := em.Unmarshal("extmap:" + a.Value); err != nil || em.URI == nil {
				continue
			}
			uri := em.URI.String()
			if mi.form == formSSRC && (uri == sdp.SDESRTPStreamIDURI || uri == sdp.SDESRepairRTPStreamIDURI) {
				// SSRC simulcast: no RID, and pion must not probe the
				// layers it does not know for one (startSSRCLayers takes them).
				continue
			}
			_ = me.RegisterHeaderExtension(webrtc.RTPHeaderExtensionCapability{URI: uri}, kind)
		}
	}
	return me, nil
}

// registerExtensionsByID registers the header extensions of mi's section
// so that an RTPReceiver built on me (outside the peer connection, which
// alone knows the negotiated ids) gets the offer's ids: an unnegotiated
// media engine numbers extensions 1, 2, ... in registration order, so they
// are registered in id order with placeholders in the gaps. Ids above 14
// (two-byte) are left out.
func registerExtensionsByID(me *webrtc.MediaEngine, d *sdp.SessionDescription, mi *mediaInfo) error {
	uris := map[int]string{}
	for _, md := range d.MediaDescriptions {
		if md.MediaName.Media != "video" || midOf(md) != mi.mid {
			continue
		}
		for _, a := range md.Attributes {
			var em sdp.ExtMap
			if a.Key != "extmap" || em.Unmarshal("extmap:"+a.Value) != nil || em.URI == nil || em.Value > 14 {
				continue
			}
			uris[em.Value] = em.URI.String()
		}
	}
	for id := 1; id <= 14; id++ {
		uri, ok := uris[id]
		if !ok {
			if len(uris) == 0 {
				break
			}
			uri = "urn:egbe:pxsfu:unused:" + strconv.Itoa(id)
		}
		delete(uris, id)
		if err := me.RegisterHeaderExtension(webrtc.RTPHeaderExtensionCapability{URI: uri}, webrtc.RTPCodecTypeVideo); err != nil {
			return err
		}
	}
	return nil
}

func midOf(md *sdp.MediaDescription) string {
	v, _ := md.Attribute("mid")
	return v
}

// onTrack runs on pion's goroutine for each incoming track (each RID layer
// of a RID-simulcast video): it becomes the track's reader.
func (u *upstream) onTrack(tr *webrtc.TrackRemote) {
	if !u.enter() {
		return
	}
	defer u.wg.Done()
	switch tr.Kind() {
	case webrtc.RTPCodecTypeAudio:
		if u.info.audio == nil {
			return
		}
		u.readAudio(tr)
	case webrtc.RTPCodecTypeVideo:
		l := u.layerFor(tr.RID(), uint32(tr.SSRC()))
		if l == nil {
			u.s.log.Warn("streamer track matches no layer", "rid", tr.RID(), "ssrc", tr.SSRC())
			return
		}
		u.readVideo(l, tr)
	}
}

func (u *upstream) layerFor(rid string, ssrc uint32) *layer {
	if len(u.video) == 1 {
		return u.video[0]
	}
	for _, l := range u.video {
		if (rid != "" && l.info.rid == rid) || (rid == "" && l.info.ssrc == ssrc) {
			return l
		}
	}
	return nil
}

// firstSSRCOnly is the offer pion is given for SSRC simulcast: the
// section declares only the first layer's SSRC (and its RTX). pion reads a
// section with several SSRCs as Plan B, and with the Plan B fallback it
// half-configures receivers for the others; startSSRCLayers receives them.
func firstSSRCOnly(raw string, mi *mediaInfo) string {
	drop := map[string]bool{}
	for _, l := range mi.layers[1:] {
		drop[strconv.FormatUint(uint64(l.ssrc), 10)] = true
		if l.rtx != 0 {
			drop[strconv.FormatUint(uint64(l.rtx), 10)] = true
		}
	}
	lines := strings.Split(raw, "\r\n")
	out := lines[:0]
	for _, l := range lines {
		if strings.HasPrefix(l, "a=ssrc-group:SIM ") {
			continue
		}
		if v, ok := strings.CutPrefix(l, "a=ssrc:"); ok {
			if n, _, _ := strings.Cut(v, " "); drop[n] {
				continue
			}
		}
		if v, ok := strings.CutPrefix(l, "a=ssrc-group:FID "); ok {
			if f := strings.Fields(v); len(f) > 0 && drop[f[0]] {
				continue
			}
		}
		out = append(out, l)
	}
	return strings.Join(out, "\r\n")
}

// startSSRCLayers receives the SSRC-simulcast layers pion was not told of
// (firstSSRCOnly): each gets an RTPReceiver of its own on the same
// transport. Their packets wait in the SRTP session until then: pion,
// finding no RID extension negotiated, leaves such streams alone.
func (u *upstream) startSSRCLayers() {
	var dtls *webrtc.DTLSTransport
	var pionSSRC uint32
	for _, t := range u.pc.GetTransceivers() {
		if t.Mid() == u.info.video.mid && t.Receiver() != nil {
			dtls = t.Receiver().Transport()
			if tr := t.Receiver().Track(); tr != nil {
				pionSSRC = uint32(tr.SSRC())
			}
		}
	}
	if dtls == nil {
		u.s.log.Warn("ssrc simulcast: no transport for the video section")
		return
	}
	for _, l := range u.video {
		if l.info.ssrc == pionSSRC {
			continue
		}
		r, err := u.ssrcAPI.NewRTPReceiver(webrtc.RTPCodecTypeVideo, dtls)
		if err != nil {
			u.s.log.Warn("ssrc layer receiver", "ssrc", l.info.ssrc, "err", err)
			continue
		}
		// No RTX association: with one, pion's repair-stream reading
		// starves the primary stream of these standalone receivers (pion
		// v4.2.26). Their retransmissions are dropped; a player's PLI
		// still gets a key frame.
		enc := webrtc.RTPDecodingParameters{RTPCodingParameters: webrtc.RTPCodingParameters{SSRC: webrtc.SSRC(l.info.ssrc)}}
		if err := r.Receive(webrtc.RTPReceiveParameters{Encodings: []webrtc.RTPDecodingParameters{enc}}); err != nil {
			u.s.log.Warn("ssrc layer receive", "ssrc", l.info.ssrc, "err", err)
			continue
		}
		u.extraMu.Lock()
		u.extra = append(u.extra, r)
		u.extraMu.Unlock()
		tr := r.Track()
		if tr == nil {
			continue
		}
		u.s.log.Debug("receiving ssrc layer", "layer", l.idx, "ssrc", l.info.ssrc)
		l := l
		if !u.track(func() { u.readVideo(l, tr) }) {
			return
		}
	}
}

// onConnected: the streamer's ICE is up. Epic's SFU sends startStreaming
// here.
func (u *upstream) onConnected() {
	if u.started.CompareAndSwap(false, true) {
		u.s.sendMsg(map[string]string{"type": "startStreaming"})
	}
}

// readVideo is layer l's reader (see forward.go).
func (u *upstream) readVideo(l *layer, tr *webrtc.TrackRemote) {
	l.ssrc.Store(uint32(tr.SSRC()))
	buf := make([]byte, maxPacket)
	var h rtpHeader
	var n uint32
	fails := 0
	for {
		nb, _, err := tr.Read(buf)
		if err != nil && nb < 12 {
			if !readable(err, &fails) {
				u.s.log.Debug("layer reader ends", "layer", l.idx, "err", err)
				return
			}
			u.s.met.malformed.Inc()
			continue
		}
		fails = 0
		u.onVideo(l, buf[:nb], &h, &n)
	}
}

// onVideo forwards one packet of layer l to its subscribers. h is the
// reader's scratch header, n its count of packets (every 4th is timed).
func (u *upstream) onVideo(l *layer, pkt []byte, h *rtpHeader, n *uint32) {
	m := u.s.met
	at := time.Now().UnixNano()
	m.received.Inc()
	if !h.parse(pkt) {
		m.malformed.Inc()
		return
	}
	key := isKeyframeStart(u.ptKind[h.pt], pkt[h.payOff:h.payEnd])
	l.bytes.Add(uint64(len(pkt)))
	l.lastPkt.Store(at)
	if key {
		l.keyArrived(at)
	}
	subs := l.subs.Load()
	if subs == nil {
		return
	}
	sent := false
	for _, v := range *subs {
		switch r := v.forward(l.idx, h, pkt, key, at); r {
		case fwdSkip:
		case fwdSent, fwdSwitched:
			m.forwarded.Inc()
			sent = true
			if r == fwdSwitched {
				m.switches.Inc()
				u.s.kickRebuild(u)
			}
		default:
			m.dropped[r].Inc()
		}
	}
	if *n++; sent && *n&3 == 0 {
		// The added delay of this packet's last player: read to the
		// return of the fan-out's last write (1 packet in 4 sampled).
		m.forwardDelay.Observe(float64(time.Now().UnixNano()-at) / 1e9)
	}
}

// readable reports whether a track read that failed with err may be
// retried: a packet an interceptor could not parse (a malformed header
// extension, one larger than the buffer) is dropped, a closed track ends
// the reader, and so do many failures in a row.
func readable(err error, fails *int) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) {
		return false
	}
	*fails++
	return *fails < 1000
}

// readAudio is the audio track's reader: every player gets it.
func (u *upstream) readAudio(tr *webrtc.TrackRemote) {
	m := u.s.met
	buf := make([]byte, maxPacket)
	var h rtpHeader
	fails := 0
	for {
		nb, _, err := tr.Read(buf)
		if err != nil && nb < 12 {
			if !readable(err, &fails) {
				return
			}
			m.malformed.Inc()
			continue
		}
		fails = 0
		m.received.Inc()
		if !h.parse(buf[:nb]) {
			m.malformed.Inc()
			continue
		}
		subs := u.audio.Load()
		if subs == nil {
			continue
		}
		for _, a := range *subs {
			if r := a.forward(&h, buf[:nb]); r == fwdSent {
				m.forwarded.Inc()
			} else {
				m.dropped[r].Inc()
			}
		}
	}
}

// keyArrived: a key frame started on l; a merged request waiting for the
// end of the gap is no longer needed.
func (l *layer) keyArrived(at int64) {
	l.lastKey.Store(at)
	l.kmu.Lock()
	if l.pending != 0 && l.pending < at {
		l.pending = 0
	}
	l.kmu.Unlock()
}

// wantKeyframe asks the streamer for a key frame on l, at most one PLI
// per KeyframeInterval: a request inside the gap waits for its end and is
// dropped if a key frame comes first. So a crowd of players joining, or
// switching, costs the streamer a handful of key frames.
func (u *upstream) wantKeyframe(l *layer, reason string) {
	u.s.met.keyAsked.WithLabelValues(reason).Inc()
	now := time.Now().UnixNano()
	send := false
	l.kmu.Lock()
	if now-l.lastReq >= int64(u.s.cfg.KeyframeInterval) {
		l.lastReq, l.pending, send = now, 0, true
	} else if l.pending == 0 {
		l.pending = now
	}
	l.kmu.Unlock()
	if send {
		u.sendPLI(l)
	}
}

// flushKeyframes sends merged requests whose gap has passed (ticker).
func (u *upstream) flushKeyframes(now time.Time) {
	ns := now.UnixNano()
	for _, l := range u.video {
		send := false
		l.kmu.Lock()
		if l.pending != 0 && ns-l.lastReq >= int64(u.s.cfg.KeyframeInterval) {
			l.lastReq, l.pending, send = ns, 0, true
		}
		l.kmu.Unlock()
		if send {
			u.sendPLI(l)
		}
	}
}

func (u *upstream) sendPLI(l *layer) {
	ssrc := l.ssrc.Load()
	if ssrc == 0 {
		return // no packet yet: its first frame is a key frame anyway
	}
	u.s.met.keySent.Inc()
	if u.pli != nil {
		u.pli(ssrc)
		return
	}
	_ = u.pc.WriteRTCP([]rtcp.Packet{&rtcp.PictureLossIndication{MediaSSRC: ssrc}})
}

// newPlayerAPI builds the players' WebRTC API: the codecs negotiated with
// the streamer (same payload types, so packets need no payload type
// rewrite) with the feedback the SFU acts on, no interceptors (the
// forwarder writes straight to each sender's SRTP stream; the SFU reads
// their RTCP itself), on the ICE port.
func (u *upstream) newPlayerAPI() (*webrtc.API, error) {
	me := &webrtc.MediaEngine{}
	for _, t := range u.pc.GetTransceivers() {
		r := t.Receiver()
		if r == nil {
			continue
		}
		var kind webrtc.RTPCodecType
		switch {
		case u.info.video != nil && t.Mid() == u.info.video.mid:
			kind = webrtc.RTPCodecTypeVideo
		case u.info.audio != nil && t.Mid() == u.info.audio.mid:
			kind = webrtc.RTPCodecTypeAudio
		default:
			continue
		}
		for _, c := range r.GetParameters().Codecs {
			if strings.EqualFold(c.MimeType, webrtc.MimeTypeRTX) {
				continue
			}
			c.RTCPFeedback = nil
			if kind == webrtc.RTPCodecTypeVideo {
				c.RTCPFeedback = []webrtc.RTCPFeedback{{Type: "goog-remb"}, {Type: "ccm", Parameter: "fir"},
					{Type: "nack"}, {Type: "nack", Parameter: "pli"}}
			}
			if err := me.RegisterCodec(c, kind); err != nil {
				return nil, err
			}
		}
	}
	se := u.s.port.SettingEngine()
	// Detached data channels: the SFU reads each with a small buffer of
	// its own instead of pion's 64 KiB read loop per channel.
	se.DetachDataChannels()
	// An empty registry, not pion's defaults (NACK responder, reports,
	// stats): those copy and account for every packet of every player.
	return webrtc.NewAPI(webrtc.WithMediaEngine(me), webrtc.WithSettingEngine(se),
		webrtc.WithInterceptorRegistry(&interceptor.Registry{})), nil
}

// allocID takes a free SCTP stream id on the streamer's association.
func (u *upstream) allocID() uint16 {
	u.dmu.Lock()
	defer u.dmu.Unlock()
	for u.usedIDs[u.nextID] {
		u.nextID++
	}
	id := u.nextID
	u.usedIDs[id] = true
	u.nextID++
	return id
}

func (u *upstream) freeIDs(ids ...uint16) {
	u.dmu.Lock()
	for _, id := range ids {
		delete(u.usedIDs, id)
		u.nextID = min(u.nextID, max(id, 2))
	}
	u.dmu.Unlock()
}

// onDataChannel: a channel the streamer opened (its "datachannel"). Its id
// is never handed out; multiplexed, it carries every player's traffic.
func (u *upstream) onDataChannel(dc *webrtc.DataChannel) {
	u.dmu.Lock()
	if id := dc.ID(); id != nil {
		u.usedIDs[*id] = true
	}
	first := u.dc == nil
	if u.multiplex && first {
		u.dc = dc
	}
	u.dmu.Unlock()
	if !u.multiplex || !first {
		return
	}
	dc.OnOpen(func() {
		// Players that asked for channels before the streamer's opened.
		for _, p := range u.s.playersWithChannels() {
			u.sendMux(pxmux.Status(p, true))
		}
	})
	dc.OnMessage(func(msg webrtc.DataChannelMessage) { u.fromStreamerMux(msg.Data) })
}

// sendMux writes a multiplexed frame to the streamer.
func (u *upstream) sendMux(frame []byte) {
	u.dmu.Lock()
	dc := u.dc
	u.dmu.Unlock()
	if dc == nil || dc.ReadyState() != webrtc.DataChannelStateOpen {
		return
	}
	_ = dc.Send(frame)
}

// fromStreamerMux delivers a multiplexed message to its player.
func (u *upstream) fromStreamerMux(b []byte) {
	typ, id, rest, err := pxmux.Parse(b)
	if err != nil {
		u.s.met.refuse(refuseBadMux)
		u.s.log.Debug("streamer data", "err", err)
		return
	}
	if typ != pxmux.Multiplexed {
		return
	}
	u.s.mu.Lock()
	p := u.s.players[id]
	u.s.mu.Unlock()
	if p == nil {
		u.s.met.refuse(refuseUnknownPlayer)
		return
	}
	p.toPlayer(rest, false)
}

// playersWithChannels lists the players whose data channels are set up.
func (s *SFU) playersWithChannels() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, p := range s.players {
		if p.channelsUp.Load() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
