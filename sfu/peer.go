package sfu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pion/rtp"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
)

// peer is one client's voice PeerConnection: a microphone in (the peer as
// speaker) and K slots out (the peer as listener).
type peer struct {
	id        string // voice_peer_id; immutable after join
	sessionID string // immutable after join
	subject   string // immutable after join
	entityID  uint32 // immutable after join
	region    string // immutable after join
	room      string // immutable after join
	policy    policy // immutable after join
	pc        *webrtc.PeerConnection
	slots     []*slotTrack // immutable after join

	m          *member         // guarded by SFU.mu
	assigned   []*peer         // guarded by SFU.mu; speaker per slot
	lastSlots  []uint32        // guarded by SFU.mu; last sent VoiceEvent
	lastActive []uint32        // guarded by SFU.mu
	quality    Quality         // guarded by SFU.mu
	qc         qualityCounters // owned by Run (sampleQuality)
	rep        reportState     // owned by Run (sendReports)
	rtcpSSRC   uint32          // immutable after join: our RTCP SSRC when no slot is bound
	micSSRC    atomic.Uint32   // the microphone stream's SSRC, once it arrives (onTrack)
	in         inbound         // owned by the read loop: mic reception state
	mic        micStats        // published by the read loop
	lsr        atomic.Uint32   // NTP mid-32 of the mic's last sender report (micRTCPLoop)
	lsrAt      atomic.Int64    // its arrival, unix ns
	rttMicros  atomic.Int64    // last RTT from a reception report on a slot (rtcpLoop)
	slotLoss   atomic.Uint32   // last reported fraction lost on a slot, x/256 (rtcpLoop)

	// Speaker side, written by the read loop.
	hasMic    atomic.Bool
	loud      atomic.Int32 // smoothed loudness 0..127 (127 - RFC 6464 level)
	speaking  atomic.Bool
	lastVoice atomic.Int64          // unix ns of the last non-silent packet
	subs      atomic.Pointer[[]sub] // listeners holding this speaker; replaced by recompute

	done      chan struct{} // closed by leave
	closeOnce sync.Once
	wg        sync.WaitGroup // read loop and RTCP readers
	wgMu      sync.Mutex     // orders wg.Add against leave's Wait
	left      bool           // guarded by wgMu
}

// sub is one listener slot that currently carries a speaker.
type sub struct {
	l    *peer
	slot int
}

// Quality is a peer's last RTCP-derived sample.
type Quality struct {
	RTTMs    float64 // round trip from listeners' receiver reports on its slots
	Loss     float64 // worst of inbound (mic) loss and reported slot loss, 0..1
	JitterMs float64 // inbound (mic) interarrival jitter
	Flagged  bool    // over LatencyBudgetMs or LossBudget
}

// goTracked runs f on a goroutine owned by p (waited for by leave).
func (p *peer) goTracked(f func()) bool {
	p.wgMu.Lock()
	defer p.wgMu.Unlock()
	if p.left {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
	return true
}

// slotTrack is one send-only audio slot: a webrtc.TrackLocal whose SSRC is
// fixed by its sender; whichever speaker holds the slot is rewritten onto it.
type slotTrack struct {
	id, stream string
	// pt is the Opus payload type this m-line negotiated (the offer's:
	// 111 from Chrome, 109 from Firefox). Immutable after join. The
	// sender, built from the SFU's API, would otherwise bind the API's
	// registration (111).
	pt   uint8
	cur  atomic.Pointer[peer]    // speaker holding the slot (set by recompute)
	bind atomic.Pointer[binding] // set by Bind

	// mu serialises the speakers' fan-outs into this slot (only around a
	// switch do two speakers' read loops meet here): the rewrite and the
	// write happen together, so the wire order is the sequence order.
	mu  sync.Mutex
	rw  rewriter   // guarded by mu
	hdr rtp.Header // guarded by mu: the outgoing header, reused

	// For sender reports; written under mu, read by Run.
	sent, octets atomic.Uint32
	lastTS       atomic.Uint32
	lastAt       atomic.Int64
}

type binding struct {
	w    webrtc.TrackLocalWriter
	ssrc uint32
	pt   uint8
}

var _ webrtc.TrackLocal = (*slotTrack)(nil)

func (t *slotTrack) Bind(ctx webrtc.TrackLocalContext) (webrtc.RTPCodecParameters, error) {
	for _, c := range ctx.CodecParameters() {
		if strings.EqualFold(c.MimeType, webrtc.MimeTypeOpus) {
			pt := uint8(c.PayloadType)
			if t.pt != 0 {
				pt = t.pt
				c.PayloadType = webrtc.PayloadType(pt)
			}
			t.bind.Store(&binding{w: ctx.WriteStream(), ssrc: uint32(ctx.SSRC()), pt: pt})
			return c, nil
		}
	}
	return webrtc.RTPCodecParameters{}, webrtc.ErrUnsupportedCodec
}

func (t *slotTrack) Unbind(webrtc.TrackLocalContext) error { t.bind.Store(nil); return nil }
func (t *slotTrack) ID() string                            { return t.id }
func (t *slotTrack) RID() string                           { return "" }
func (t *slotTrack) StreamID() string                      { return t.stream }
func (t *slotTrack) Kind() webrtc.RTPCodecType             { return webrtc.RTPCodecTypeAudio }

// negotiatedOpusPT is the Opus payload type of t's m-line as negotiated
// (0 if none).
func negotiatedOpusPT(t *webrtc.RTPTransceiver) uint8 {
	for _, c := range t.Receiver().GetParameters().Codecs {
		if strings.EqualFold(c.MimeType, webrtc.MimeTypeOpus) {
			return uint8(c.PayloadType)
		}
	}
	return 0
}

// offerInfo is what checkOffer learns from an offer.
type offerInfo struct {
	dirs map[string]string // mid -> direction of the client's audio m-lines
}

// maxSDPBytes bounds an offer.
const maxSDPBytes = 32 << 10

// checkOffer rejects malformed SDP and offers without Opus audio.
func checkOffer(raw string) (offerInfo, error) {
	if len(raw) == 0 || len(raw) > maxSDPBytes {
		return offerInfo{}, fmt.Errorf("%w: %d bytes", ErrBadSDP, len(raw))
	}
	var d sdp.SessionDescription
	if err := d.UnmarshalString(raw); err != nil {
		return offerInfo{}, fmt.Errorf("%w: %w", ErrBadSDP, err)
	}
	info := offerInfo{dirs: make(map[string]string)}
	opus := false
	for _, md := range d.MediaDescriptions {
		if md.MediaName.Media != "audio" {
			continue
		}
		dir := "sendrecv"
		mid := ""
		for _, a := range md.Attributes {
			switch a.Key {
			case "sendrecv", "sendonly", "recvonly", "inactive":
				dir = a.Key
			case "mid":
				mid = a.Value
			case "rtpmap":
				if _, enc, ok := strings.Cut(a.Value, " "); ok &&
					strings.HasPrefix(strings.ToLower(enc), "opus/48000") {
					opus = true
				}
			}
		}
		if mid != "" {
			info.dirs[mid] = dir
		}
	}
	if !opus {
		return offerInfo{}, ErrNoOpus
	}
	return info, nil
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func randUint32() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return be32(b[:])
}

// join answers a client's offer and adds its peer to the session's room.
func (s *SFU) join(ctx context.Context, acc auth.Access, sessionID, offer string) (*peer, string, error) {
	info, err := checkOffer(offer)
	if err != nil {
		return nil, "", err
	}
	si, ok := s.deps.Sessions.VoiceSession(sessionID)
	if !ok {
		return nil, "", ErrUnknownSession
	}
	if si.Subject != acc.Subject {
		return nil, "", ErrForbidden
	}
	claimed, err := s.claimRoom(ctx, si.InstanceID)
	if err != nil {
		return nil, "", err
	}
	defer claimed()
	s.mu.Lock()
	closed, full := s.closed, s.cfg.MaxPeers > 0 && len(s.peers) >= s.cfg.MaxPeers
	s.mu.Unlock()
	if closed || full {
		return nil, "", ErrClosed
	}
	pc, err := s.api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrNegotiation, err)
	}
	p := &peer{
		id: newID(), sessionID: sessionID, subject: acc.Subject, entityID: si.EntityID,
		region: si.Region, room: si.InstanceID, policy: newPolicy(acc), pc: pc,
		rtcpSSRC: randUint32(), done: make(chan struct{}),
	}
	fail := func(err error) (*peer, string, error) {
		s.leave(p)
		return nil, "", err
	}
	pc.OnTrack(func(tr *webrtc.TrackRemote, rc *webrtc.RTPReceiver) { s.onTrack(p, tr, rc) })
	pc.OnConnectionStateChange(func(st webrtc.PeerConnectionState) {
		if st == webrtc.PeerConnectionStateFailed || st == webrtc.PeerConnectionStateClosed {
			s.goLeave(p) // leave waits for pion callbacks; never inline
		}
	})
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: offer}); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrBadSDP, err))
	}
	preferOpus(pc)
	// Attach slot tracks to the client's audio m-lines that can receive
	// (recvonly or sendrecv), in offer order, up to K.
	for _, t := range pc.GetTransceivers() {
		if len(p.slots) == s.cfg.Slots {
			break
		}
		if t.Kind() != webrtc.RTPCodecTypeAudio || t.Sender() != nil {
			continue
		}
		if d := info.dirs[t.Mid()]; d != "recvonly" && d != "sendrecv" {
			continue
		}
		st := &slotTrack{id: fmt.Sprintf("slot%d", len(p.slots)), stream: "egbe-voice-" + p.id,
			hdr: rtp.Header{Version: 2}, pt: negotiatedOpusPT(t)}
		// A sender from s.api, not pc.AddTrack: AddTrack could pick a
		// transceiver the client only sends on. Such senders bypass the
		// PeerConnection's interceptors, which keeps the per-packet send
		// path short; sendReports writes their RTCP SRs.
		snd, err := s.api.NewRTPSender(st, t.Receiver().Transport())
		if err != nil {
			return fail(fmt.Errorf("%w: sender: %w", ErrNegotiation, err))
		}
		if err := t.SetSender(snd, st); err != nil {
			return fail(fmt.Errorf("%w: set sender: %w", ErrNegotiation, err))
		}
		p.slots = append(p.slots, st)
		p.goTracked(func() { s.rtcpLoop(p, st, snd) })
	}
	p.assigned = make([]*peer, len(p.slots))
	answer, err := pc.CreateAnswer(nil)
	if err != nil {
		return fail(fmt.Errorf("%w: answer: %w", ErrNegotiation, err))
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(answer); err != nil {
		return fail(fmt.Errorf("%w: local description: %w", ErrNegotiation, err))
	}
	select {
	case <-gathered:
	case <-ctx.Done():
		return fail(fmt.Errorf("%w: gathering: %w", ErrNegotiation, ctx.Err()))
	}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fail(ErrClosed)
	}
	m := s.memberLocked(sessionID)
	old := m.peer
	if old != nil {
		s.removeLocked(old)
	}
	m.peer, p.m = p, m
	s.peers[p.id] = p
	if s.rooms[p.room] == nil {
		s.rooms[p.room] = make(map[*peer]bool)
	}
	s.rooms[p.room][p] = true
	s.m.peers.Inc()
	evs := s.recomputeLocked(p.room)
	s.mu.Unlock()
	s.notify(evs)
	if old != nil {
		s.leave(old)
	}
	s.log.Info("voice peer joined", "session", sessionID, "peer", p.id, "room", p.room, "slots", len(p.slots))
	return p, pc.LocalDescription().SDP, nil
}

// removeLocked takes p out of the maps; its room is recomputed.
func (s *SFU) removeLocked(p *peer) bool {
	if s.peers[p.id] != p {
		return false
	}
	delete(s.peers, p.id)
	delete(s.flagged, p)
	if p.m != nil && p.m.peer == p {
		p.m.peer = nil
	}
	if r := s.rooms[p.room]; r != nil {
		delete(r, p)
		if len(r) == 0 {
			delete(s.rooms, p.room)
		}
	}
	p.subs.Store(nil)
	s.m.peers.Dec()
	s.markDirtyLocked(p.room)
	return true
}

// goLeave runs leave on a goroutine owned by s (Close waits for it).
func (s *SFU) goLeave(p *peer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return // Close leaves every peer itself
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.leave(p)
	}()
}

// leave removes p, closes its PeerConnection and waits for its loops.
func (s *SFU) leave(p *peer) {
	s.mu.Lock()
	removed := s.removeLocked(p)
	var evs []pendingEvent
	if removed {
		evs = s.recomputeLocked(p.room)
	}
	s.refreshFlaggedLocked()
	s.mu.Unlock()
	s.notify(evs)
	if removed {
		s.maybeRelease(p.room)
	}
	p.closeOnce.Do(func() {
		close(p.done)
		_ = p.pc.Close()
		p.wgMu.Lock()
		p.left = true
		p.wgMu.Unlock()
		p.wg.Wait()
		if removed {
			s.log.Info("voice peer left", "session", p.sessionID, "peer", p.id)
		}
	})
}

func (s *SFU) onTrack(p *peer, tr *webrtc.TrackRemote, rc *webrtc.RTPReceiver) {
	if tr.Kind() != webrtc.RTPCodecTypeAudio || !strings.EqualFold(tr.Codec().MimeType, webrtc.MimeTypeOpus) ||
		!p.hasMic.CompareAndSwap(false, true) {
		s.m.dropped[dropUnknownSSRC].Inc()
		return
	}
	var levelID uint8
	for _, h := range rc.GetParameters().HeaderExtensions {
		if h.URI == sdp.AudioLevelURI {
			levelID = uint8(h.ID)
		}
	}
	s.markDirty(p.room)
	if !p.goTracked(func() { s.micRTCPLoop(p, rc) }) {
		return
	}
	p.wgMu.Lock()
	if p.left {
		p.wgMu.Unlock()
		return
	}
	p.wg.Add(1)
	p.wgMu.Unlock()
	defer p.wg.Done()
	s.readLoop(p, tr, levelID, uint8(tr.PayloadType()))
}

// readLoop receives the speaker's microphone and forwards each packet to
// the listener slots currently holding this speaker. It allocates nothing
// per packet: one packet buffer per speaker, reused.
func (s *SFU) readLoop(p *peer, tr *webrtc.TrackRemote, levelID, pt uint8) {
	ssrc := uint32(tr.SSRC())
	p.micSSRC.Store(ssrc)
	pk := new(packet)
	for {
		n, _, err := tr.Read(pk.b[:])
		if err != nil {
			return
		}
		s.m.received.Inc()
		if !parseRTP(pk.b[:n], levelID, &pk.info) || pk.info.pt != pt {
			s.m.dropped[dropMalformed].Inc()
			continue
		}
		if pk.info.ssrc != ssrc {
			s.m.dropped[dropUnknownSSRC].Inc()
			continue
		}
		pk.n = n
		pk.at = s.now().UnixNano()
		p.observeMic(pk.info.seq, pk.info.ts, pk.at)
		s.observe(p, &pk.info, pk.at)
		s.fanout(p, pk)
	}
}

// observe updates the speaker's smoothed loudness and speaking state from
// one packet. A speaking flip marks the room dirty (rare, hysteresis).
func (s *SFU) observe(p *peer, in *rtpInfo, at int64) {
	x := int32(0)
	switch {
	case in.audioLevel >= 0:
		x = 127 - int32(in.audioLevel)
	case in.payEnd-in.payOff > 2: // no extension: a non-DTX frame counts as voice
		x = 127 - 30
	}
	l := (p.loud.Load()*3 + x) / 4
	p.loud.Store(l)
	if int(x) >= s.cfg.SpeakingOff {
		p.lastVoice.Store(at)
	}
	sp := p.speaking.Load()
	if (!sp && int(l) >= s.cfg.SpeakingOn) || (sp && int(l) < s.cfg.SpeakingOff) {
		p.speaking.Store(!sp)
		s.markDirty(p.room)
	}
}

// fanout forwards pk to every listener slot holding p, on the speaker's
// read goroutine: no hand-off to per-listener goroutines. The ICE port is
// corked for the fan-out, so its packets leave in one sendmmsg per 64.
// Nothing here waits on a listener: pion's SRTP write path down to the
// port only encrypts and queues (UDP never pushes back per peer).
func (s *SFU) fanout(p *peer, pk *packet) {
	if p.policy.mode == auth.VoiceOff {
		s.m.dropped[dropVoiceOff].Inc()
		return
	}
	subs := p.subs.Load()
	if subs == nil || len(*subs) == 0 {
		s.m.dropped[dropNoListener].Inc()
		return
	}
	if s.port != nil {
		s.port.Cork()
	}
	sent := 0
	for _, sb := range *subs {
		if reason := s.forward(sb.l.slots[sb.slot], p, pk); reason == "" {
			sent++
		} else {
			s.m.dropped[reason].Inc()
		}
	}
	if s.port != nil {
		s.port.Uncork()
	}
	if sent > 0 {
		s.m.forwarded.Add(float64(sent))
	}
}

// forward rewrites pk onto slot st and writes it; it returns the drop
// reason, or "" when sent.
func (s *SFU) forward(st *slotTrack, src *peer, pk *packet) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cur.Load() != src {
		return dropStale
	}
	b := st.bind.Load()
	if b == nil {
		return dropUnbound
	}
	seq, ts, switched, ok := st.rw.rewrite(src, pk.info.seq, pk.info.ts, pk.at)
	if !ok {
		return dropReordered
	}
	hdr := &st.hdr
	hdr.Marker = pk.info.marker || switched
	hdr.PayloadType = b.pt
	hdr.SequenceNumber = seq
	hdr.Timestamp = ts
	hdr.SSRC = b.ssrc
	payload := pk.payload()
	n, err := b.w.WriteRTP(hdr, payload)
	if err != nil {
		return dropWriteError
	}
	if n == 0 {
		// pion binds a slot at negotiation and drops its writes,
		// without an error, until DTLS has set up SRTP.
		return dropUnbound
	}
	st.sent.Add(1)
	st.octets.Add(uint32(len(payload)))
	st.lastTS.Store(ts)
	st.lastAt.Store(pk.at)
	return ""
}

// voiceEvent returns the listener's VoiceEvent if its slots or their
// active speakers changed since the last one. Guarded by SFU.mu.
func (l *peer) voiceEvent() *codec.VoiceEvent {
	slots := make([]uint32, 0, len(l.assigned))
	var active []uint32
	for _, sp := range l.assigned {
		if sp == nil {
			slots = append(slots, 0)
			continue
		}
		slots = append(slots, sp.entityID)
		if sp.speaking.Load() {
			active = append(active, sp.entityID)
		}
	}
	if slices.Equal(slots, l.lastSlots) && slices.Equal(active, l.lastActive) {
		return nil
	}
	l.lastSlots, l.lastActive = slots, active
	return &codec.VoiceEvent{ActiveSpeakerEntityIds: active, SlotEntityIds: slots}
}
