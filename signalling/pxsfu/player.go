package pxsfu

import (
	"errors"
	"io"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"

	"github.com/oshun/egbe-edge/internal/pxmux"
)

// avStream is the msid stream id of a player's tracks (one stream for
// audio and video, as Epic's SFU; never "probator", which Epic's frontend
// ignores: this SFU sends no probe track).
const avStream = "pixelstreaming_av_stream_id"

// Player data-channel stream ids on the player's own association: the
// player sends on 0 and receives on 1 (two one-way channels, as Epic's
// frontend expects when the ids differ).
const (
	playerSendID uint16 = 0
	playerRecvID uint16 = 1
)

// maxQueued bounds a player's messages held until the streamer's
// per-player channel exists (non-multiplexed).
const maxQueued = 64

// bweWarmup ignores a player's bandwidth estimate this long after its
// offer: a receiver's first estimates start low and ramp up.
const bweWarmup = 4 * time.Second

// player is one player's peer connection.
type player struct {
	s         *SFU
	up        *upstream // immutable: the streamer it was offered
	id        string    // immutable
	pc        *webrtc.PeerConnection
	video     *videoOut           // nil: no upstream video (never)
	audio     *audioOut           // nil: no upstream audio
	dcIn      *webrtc.DataChannel // the player sends on it (nil: no data channels)
	dcOut     *webrtc.DataChannel // the player receives on it
	offeredAt time.Time           // immutable

	answered   atomic.Bool
	channelsUp atomic.Bool   // its dataChannelRequest was answered
	counted    atomic.Bool   // in egbe_pxsfu_players
	pref       atomic.Int32  // layerPreference's spatial layer; -1: none (the highest)
	est        atomic.Uint64 // bandwidth estimate from REMB, bits/s (0: none)
	estAt      atomic.Int64  // unix ns of est

	// Layer choice state, owned by the ticker (chooseLayers).
	lowCount     int
	limitedSince time.Time
	probeUntil   time.Time
	probeLayer   int
	backoff      time.Duration

	dmu    sync.Mutex
	upSend *webrtc.DataChannel         // guarded by dmu: the streamer sends on it (non-multiplexed)
	upRecv *webrtc.DataChannel         // guarded by dmu: the streamer receives on it
	upIDs  []uint16                    // guarded by dmu
	queued []webrtc.DataChannelMessage // guarded by dmu: before upRecv exists
	closed bool                        // guarded by dmu

	wgMu      sync.Mutex
	closing   bool           // guarded by wgMu
	wg        sync.WaitGroup // RTCP and data-channel readers
	closeOnce sync.Once
}

// onPlayerConnected offers a new player the stream; one that arrives
// before the streamer is offered once its answer is sent.
func (s *SFU) onPlayerConnected(id string) {
	if id == "" {
		s.met.refuse(refuseUnknownPlayer)
		return
	}
	s.mu.Lock()
	old := s.players[id]
	delete(s.players, id)
	up := s.up
	if up == nil {
		if !slices.Contains(s.waiting, id) {
			s.waiting = append(s.waiting, id)
		}
		s.mu.Unlock()
		if old != nil {
			s.closePlayer(old, nil)
		}
		s.log.Debug("player waits for a streamer", "player", id, "err", ErrNoStreamer)
		return
	}
	full := s.cfg.MaxPlayers > 0 && len(s.players) >= s.cfg.MaxPlayers
	delete(s.gone, id)
	s.mu.Unlock()
	if old != nil {
		s.closePlayer(old, up)
	}
	if full {
		s.met.refuse(refuseFull)
		s.log.Warn("player not offered", "player", id, "err", ErrFull)
		return
	}
	p, offer, err := s.newPlayer(up, id)
	if err != nil {
		s.met.refuse(refuseNegotiation)
		s.log.Warn("player peer connection", "player", id, "err", err)
		return
	}
	s.mu.Lock()
	if s.up != up {
		s.mu.Unlock()
		s.closePlayer(p, nil)
		return
	}
	s.players[id] = p
	s.rebuildLocked(up)
	p.counted.Store(true)
	s.met.players.Inc()
	s.mu.Unlock()
	s.met.playersJoined.Inc()
	s.sendMsg(map[string]any{"type": "offer", "playerId": id, "sdp": offer, "sfu": true, "scalabilityMode": up.scalability})
	if p.video != nil {
		up.wantKeyframe(up.video[p.video.target.Load()], keyJoin)
	}
}

// newPlayer builds a player's peer connection and its offer.
func (s *SFU) newPlayer(up *upstream, id string) (*player, string, error) {
	pc, err := up.playerAPI.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return nil, "", err
	}
	p := &player{s: s, up: up, id: id, pc: pc, offeredAt: time.Now(), backoff: 1}
	p.pref.Store(-1)
	fail := func(err error) (*player, string, error) {
		s.closePlayer(p, nil)
		return nil, "", err
	}
	var senders []*webrtc.RTPSender
	if up.info.video != nil {
		t := &outTrack{kind: webrtc.RTPCodecTypeVideo, id: "video", stream: avStream}
		tr, err := pc.AddTransceiverFromTrack(t, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly})
		if err != nil {
			return fail(err)
		}
		p.video = newVideoOut(p, t, up.pickLayer(p, time.Now()))
		senders = append(senders, tr.Sender())
	}
	if up.info.audio != nil {
		t := &outTrack{kind: webrtc.RTPCodecTypeAudio, id: "audio", stream: avStream}
		tr, err := pc.AddTransceiverFromTrack(t, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly})
		if err != nil {
			return fail(err)
		}
		p.audio = &audioOut{track: t}
		senders = append(senders, tr.Sender())
	}
	if up.info.data {
		yes := true
		in, out := playerSendID, playerRecvID
		if p.dcIn, err = pc.CreateDataChannel("send-datachannel", &webrtc.DataChannelInit{Ordered: &yes, Negotiated: &yes, ID: &in}); err != nil {
			return fail(err)
		}
		if p.dcOut, err = pc.CreateDataChannel("recv-datachannel", &webrtc.DataChannelInit{Ordered: &yes, Negotiated: &yes, ID: &out}); err != nil {
			return fail(err)
		}
		p.dcIn.OnOpen(func() { p.readChannel(p.dcIn, true) })
		p.dcOut.OnOpen(func() { p.readChannel(p.dcOut, false) })
	}
	pc.OnConnectionStateChange(func(st webrtc.PeerConnectionState) {
		if st == webrtc.PeerConnectionStateFailed {
			s.goDropPlayer(p, "failed")
		}
	})
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		return fail(err)
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		return fail(err)
	}
	select {
	case <-gathered:
	case <-time.After(5 * time.Second):
		return fail(ErrAnswerTimeout)
	}
	for i, snd := range senders {
		video := i == 0 && p.video != nil
		p.goTracked(func() { p.rtcpLoop(snd, video) })
	}
	return p, pc.LocalDescription().SDP, nil
}

// goDropPlayer drops p on a goroutine of the SFU (pion callbacks must
// not wait for the peer connection's close).
func (s *SFU) goDropPlayer(p *player, reason string) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.mu.Lock()
		cur := s.players[p.id] == p
		s.mu.Unlock()
		if cur {
			s.dropPlayer(p.id, reason)
		}
	}()
}

// dropPlayer forgets a player (playerDisconnected, or its connection
// failed) and closes its peer connection.
func (s *SFU) dropPlayer(id, reason string) {
	s.mu.Lock()
	if i := slices.Index(s.waiting, id); i >= 0 {
		s.waiting = slices.Delete(s.waiting, i, i+1)
	}
	delete(s.gone, id)
	p := s.players[id]
	if p == nil {
		s.mu.Unlock()
		return // not ours, or gone already: nothing to do (Epic's SFU throws here)
	}
	delete(s.players, id)
	up := s.up
	if up == p.up {
		s.rebuildLocked(up)
	} else {
		up = nil
	}
	s.mu.Unlock()
	s.log.Debug("player dropped", "player", id, "reason", reason)
	// Off the signalling reader: hundreds of players may leave at once,
	// and a peer connection's close takes a while.
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.closePlayer(p, up) }()
}

// closePlayer closes p's peer connection and, with its streamer up, its
// data streams there (multiplexed: relay status 0).
func (s *SFU) closePlayer(p *player, up *upstream) {
	p.closeOnce.Do(func() {
		_ = p.pc.Close()
		p.wgMu.Lock()
		p.closing = true
		p.wgMu.Unlock()
		p.wg.Wait()
		p.dmu.Lock()
		p.closed = true
		send, recv, ids := p.upSend, p.upRecv, p.upIDs
		p.upSend, p.upRecv, p.upIDs, p.queued = nil, nil, nil, nil
		p.dmu.Unlock()
		if up != nil {
			if up.multiplex && p.channelsUp.Load() {
				up.sendMux(pxmux.Status(p.id, false))
			}
			for _, dc := range []*webrtc.DataChannel{send, recv} {
				if dc != nil {
					_ = dc.Close()
				}
			}
			up.freeIDs(ids...)
		}
		if p.counted.Load() {
			s.met.players.Dec()
		}
	})
}

// onAnswer applies a player's answer.
func (s *SFU) onAnswer(id, sdp string) {
	p := s.player(id)
	if p == nil {
		return
	}
	if !p.answered.CompareAndSwap(false, true) {
		return // a repeated answer
	}
	if err := p.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: sdp}); err != nil {
		s.met.refuse(refuseBadAnswer)
		s.log.Warn("player answer refused", "player", id, "err", err)
		s.dropPlayer(id, "bad answer")
	}
}

// player returns the player id names, counting a refusal if there is none.
func (s *SFU) player(id string) *player {
	s.mu.Lock()
	p := s.players[id]
	s.mu.Unlock()
	if p == nil {
		s.met.refuse(refuseUnknownPlayer)
		s.log.Debug("message for a player the SFU does not have", "player", id, "err", ErrUnknownPlayer)
	}
	return p
}

// onLayerPreference sets a player's preferred spatial layer (the closest
// existing one if out of range); its bandwidth estimate may still hold it
// lower. The temporal layer is not used: SVC streams pass whole.
func (s *SFU) onLayerPreference(id string, spatial int) {
	p := s.player(id)
	if p == nil || p.video == nil {
		return
	}
	top := len(p.up.video) - 1
	p.pref.Store(int32(max(0, min(spatial, top))))
	s.mu.Lock()
	if s.players[id] != p {
		s.mu.Unlock()
		return
	}
	p.lowCount, p.limitedSince, p.probeUntil = 0, time.Time{}, time.Time{}
	t := p.up.pickLayer(p, time.Now())
	changed := int32(t) != p.video.target.Load()
	if changed {
		p.video.target.Store(int32(t))
		s.rebuildLocked(p.up)
	}
	s.mu.Unlock()
	if changed {
		p.up.wantKeyframe(p.up.video[t], keySwitch)
	}
}

// onDataChannelRequest answers with the player's two stream ids; the
// multiplexed streamer hears relay status 1.
func (s *SFU) onDataChannelRequest(id string) {
	p := s.player(id)
	if p == nil {
		return
	}
	if p.dcIn == nil {
		s.log.Debug("dataChannelRequest without data channels (the streamer offered none)", "player", id)
		return
	}
	p.channelsUp.Store(true)
	s.sendMsg(map[string]any{"type": "peerDataChannels", "playerId": id, "sendStreamId": playerSendID, "recvStreamId": playerRecvID})
	if p.up.multiplex {
		p.up.sendMux(pxmux.Status(id, true))
	}
}

// onPeerDataChannelsReady opens the player's two streams on the streamer's
// association and tells the streamer (non-multiplexed only).
func (s *SFU) onPeerDataChannelsReady(id string) {
	p := s.player(id)
	if p == nil || p.dcIn == nil || p.up.multiplex {
		return
	}
	p.dmu.Lock()
	done := p.upSend != nil || p.closed
	p.dmu.Unlock()
	if done {
		return
	}
	up := p.up
	a, d := up.allocID(), up.allocID()
	yes := true
	send, err := up.pc.CreateDataChannel("send-datachannel", &webrtc.DataChannelInit{Ordered: &yes, Negotiated: &yes, ID: &a})
	if err != nil {
		up.freeIDs(a, d)
		s.log.Warn("streamer data channel", "player", id, "err", err)
		return
	}
	recv, err := up.pc.CreateDataChannel("recv-datachannel", &webrtc.DataChannelInit{Ordered: &yes, Negotiated: &yes, ID: &d})
	if err != nil {
		_ = send.Close()
		up.freeIDs(a, d)
		s.log.Warn("streamer data channel", "player", id, "err", err)
		return
	}
	send.OnMessage(func(msg webrtc.DataChannelMessage) { p.toPlayer(msg.Data, msg.IsString) })
	p.dmu.Lock()
	if p.closed {
		p.dmu.Unlock()
		_ = send.Close()
		_ = recv.Close()
		up.freeIDs(a, d)
		return
	}
	p.upSend, p.upRecv, p.upIDs = send, recv, []uint16{a, d}
	queued := p.queued
	p.queued = nil
	p.dmu.Unlock()
	s.sendMsg(map[string]any{"type": "streamerDataChannels", "playerId": id, "sendStreamId": a, "recvStreamId": d})
	for _, m := range queued {
		p.sendUp(recv, m)
	}
}

// goTracked runs f on a goroutine closePlayer waits for.
func (p *player) goTracked(f func()) {
	p.wgMu.Lock()
	defer p.wgMu.Unlock()
	if p.closing {
		return
	}
	p.wg.Add(1)
	go func() { defer p.wg.Done(); f() }()
}

// maxChannelMessage bounds a player's data-channel message (Epic's input
// messages are a few bytes; a text box entry a few KiB).
const maxChannelMessage = 64 << 10

// readChannel reads a detached channel of the player: the one it sends on
// (in) is relayed to the streamer; the other only drained.
func (p *player) readChannel(dc *webrtc.DataChannel, in bool) {
	raw, err := dc.Detach()
	if err != nil {
		return
	}
	p.goTracked(func() {
		buf := make([]byte, 512)
		for {
			n, isString, err := raw.ReadDataChannel(buf)
			if errors.Is(err, io.ErrShortBuffer) && len(buf) < maxChannelMessage {
				// The message waits: read it again with room for it.
				buf = make([]byte, min(2*len(buf), maxChannelMessage))
				continue
			}
			if err != nil {
				return // closed, or a message over maxChannelMessage
			}
			if in {
				p.fromPlayer(webrtc.DataChannelMessage{IsString: isString, Data: buf[:n]})
			}
		}
	})
}

// fromPlayer relays a player's data-channel message to the streamer,
// framed with its id when multiplexed.
func (p *player) fromPlayer(msg webrtc.DataChannelMessage) {
	if p.up.multiplex {
		p.up.sendMux(pxmux.Frame(p.id, msg.Data))
		p.s.met.dataMessages.WithLabelValues("to_streamer").Inc()
		return
	}
	p.dmu.Lock()
	recv := p.upRecv
	if recv == nil {
		if len(p.queued) < maxQueued && !p.closed {
			p.queued = append(p.queued, webrtc.DataChannelMessage{IsString: msg.IsString, Data: append([]byte(nil), msg.Data...)})
		}
		p.dmu.Unlock()
		return
	}
	p.dmu.Unlock()
	p.sendUp(recv, msg)
}

func (p *player) sendUp(dc *webrtc.DataChannel, msg webrtc.DataChannelMessage) {
	var err error
	if msg.IsString {
		err = dc.SendText(string(msg.Data))
	} else {
		err = dc.Send(msg.Data)
	}
	if err == nil {
		p.s.met.dataMessages.WithLabelValues("to_streamer").Inc()
	}
}

// toPlayer delivers a streamer's message to the player.
func (p *player) toPlayer(b []byte, isString bool) {
	dc := p.dcOut
	if dc == nil || dc.ReadyState() != webrtc.DataChannelStateOpen {
		return
	}
	var err error
	if isString {
		err = dc.SendText(string(b))
	} else {
		err = dc.Send(b)
	}
	if err == nil {
		p.s.met.dataMessages.WithLabelValues("to_player").Inc()
	}
}

// rtcpLoop reads the player's RTCP for one sender: PLI/FIR ask the
// streamer for a key frame (rate-limited), REMB is its bandwidth estimate.
func (p *player) rtcpLoop(snd *webrtc.RTPSender, video bool) {
	buf := make([]byte, maxPacket)
	for {
		n, _, err := snd.Read(buf)
		if err != nil {
			return
		}
		pkts, err := rtcp.Unmarshal(buf[:n])
		if err != nil {
			continue
		}
		for _, pk := range pkts {
			switch t := pk.(type) {
			case *rtcp.PictureLossIndication, *rtcp.FullIntraRequest:
				if video {
					l := p.video.target.Load()
					if c := p.video.cur.Load(); c >= 0 {
						l = c
					}
					p.up.wantKeyframe(p.up.video[l], keyPLI)
				}
			case *rtcp.ReceiverEstimatedMaximumBitrate:
				p.est.Store(uint64(t.Bitrate))
				p.estAt.Store(time.Now().UnixNano())
			}
		}
	}
}

// expireOffers drops players that did not answer in time (ticker).
func (s *SFU) expireOffers(now time.Time) {
	var late []*player
	s.mu.Lock()
	for id, p := range s.players {
		if !p.answered.Load() && now.Sub(p.offeredAt) > s.cfg.AnswerTimeout {
			late = append(late, p)
			delete(s.players, id)
			s.gone[id] = true
		}
	}
	up := s.up
	if len(late) > 0 && up != nil {
		s.rebuildLocked(up)
	}
	s.mu.Unlock()
	for _, p := range late {
		s.met.refuse(refuseAnswerTimeout)
		s.log.Warn("player dropped", "player", p.id, "err", ErrAnswerTimeout)
		s.closePlayer(p, up)
	}
}

// kickRebuild: a player finished a layer switch; its old layer's list
// still holds it until the next rebuild (the ticker's, within one tick).
func (s *SFU) kickRebuild(u *upstream) { u.dirty.Store(true) }

// rebuildLocked replaces every track's subscriber list: a layer's players
// are those receiving it or switching to it. Caller holds s.mu.
func (s *SFU) rebuildLocked(up *upstream) {
	up.dirty.Store(false)
	for _, l := range up.video {
		var subs []*videoOut
		for _, p := range s.players {
			if p.up != up || p.video == nil {
				continue
			}
			if p.video.cur.Load() == l.idx || p.video.target.Load() == l.idx {
				subs = append(subs, p.video)
			}
		}
		l.subs.Store(&subs)
	}
	var as []*audioOut
	for _, p := range s.players {
		if p.up == up && p.audio != nil {
			as = append(as, p.audio)
		}
	}
	up.audio.Store(&as)
}

// chooseLayers measures the layers' bitrates and moves players whose
// preference or estimate changed (ticker, every period).
func (s *SFU) chooseLayers(up *upstream, now time.Time, period time.Duration) {
	for _, l := range up.video {
		b := l.bytes.Load()
		r := (b - l.prev) * 8 * uint64(time.Second) / uint64(period)
		l.prev = b
		if old := l.rate.Load(); old != 0 {
			r = (3*old + r) / 4
		}
		l.rate.Store(r)
		s.met.upstreamBitrate.WithLabelValues(strconv.Itoa(int(l.idx))).Set(float64(r))
	}
	var asks []int
	s.mu.Lock()
	changed := up.dirty.Load()
	for _, p := range s.players {
		if p.up != up || p.video == nil {
			continue
		}
		if t := up.pickLayer(p, now); int32(t) != p.video.target.Load() {
			p.video.target.Store(int32(t))
			changed = true
			asks = append(asks, t)
		}
	}
	if changed {
		s.rebuildLocked(up)
	}
	s.mu.Unlock()
	for _, t := range asks {
		up.wantKeyframe(up.video[t], keySwitch)
	}
}

// pickLayer chooses the layer p should receive: its preference (else the
// highest), lowered while its bandwidth estimate does not cover that
// layer's bitrate (with hysteresis: a layer above the current one needs
// 110 % of its rate, the current one or below 80 %, and a downswitch two
// samples in a row). Held down, it is tried one layer up after
// ProbeAfter (doubling up to 8x while probes fail): without probe padding
// a receiver's estimate does not grow past what it receives. Layers that
// stopped are skipped. Caller holds s.mu (the ticker's state), or owns p.
func (u *upstream) pickLayer(p *player, now time.Time) int {
	top := len(u.video) - 1
	pref := int(p.pref.Load())
	if pref < 0 || pref > top {
		pref = top
	}
	want := pref
	cur := -1
	if p.video != nil {
		cur = int(p.video.cur.Load())
	}
	est := p.est.Load()
	if est > 0 && now.Sub(p.offeredAt) >= bweWarmup && now.UnixNano()-p.estAt.Load() < int64(10*time.Second) {
		fit := 0
		for i := pref; i >= 0; i-- {
			r := u.video[i].rate.Load()
			need := r * 8 / 10
			if i > cur {
				need = r * 11 / 10
			}
			if r == 0 || est >= need {
				fit = i
				break
			}
		}
		if cur >= 0 && fit < cur {
			if p.lowCount++; p.lowCount < 2 {
				fit = cur
			} else {
				p.lowCount = 0
			}
		} else {
			p.lowCount = 0
		}
		want = fit
		switch {
		case want >= pref:
			p.limitedSince = time.Time{}
			if now.After(p.probeUntil) {
				p.backoff = 1
			}
		case now.Before(p.probeUntil):
			want = max(want, p.probeLayer)
		case u.s.cfg.ProbeAfter == 0:
		case p.limitedSince.IsZero():
			p.limitedSince = now
		case now.Sub(p.limitedSince) >= u.s.cfg.ProbeAfter*p.backoff:
			want++
			p.probeLayer, p.probeUntil, p.limitedSince = want, now.Add(3*time.Second), now
			p.backoff = min(2*p.backoff, 8)
		}
	}
	return u.liveLayer(want, now)
}

// liveLayer is want if it is sending, else the nearest lower layer that
// is, else the nearest higher one (a layer never seen counts as live
// until some layer is).
func (u *upstream) liveLayer(want int, now time.Time) int {
	ns := now.UnixNano()
	live := func(i int) bool { t := u.video[i].lastPkt.Load(); return t != 0 && ns-t < int64(2*time.Second) }
	any := false
	for i := range u.video {
		any = any || live(i)
	}
	if !any || live(want) {
		return want
	}
	for i := want - 1; i >= 0; i-- {
		if live(i) {
			return i
		}
	}
	for i := want + 1; i < len(u.video); i++ {
		if live(i) {
			return i
		}
	}
	return want
}
