package streamer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/pion/interceptor"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"github.com/oshun/egbe-edge/internal/pxmux"
)

// ProtocolVersion is sent in endpointId.protocolVersion.
const ProtocolVersion = "1.3.0"

// Config configures one synthetic streamer.
type Config struct {
	// URL of the signalling server's streamer port, e.g. ws://127.0.0.1:8888.
	URL string
	// ID is the requested streamer id (the server may suffix it).
	ID string
	// POP and Codecs are registered via ?pop=&codecs= when no Token is set.
	POP    string
	Codecs []string
	// Token is a streamer token (auth.IssueStreamer), sent as ?token=.
	Token string
	// Width, Height (multiples of 16) and FPS of the test pattern.
	Width, Height, FPS int
	// MinBackoff and MaxBackoff bound the reconnect delay (doubling, with
	// jitter, reset after a session that identified).
	MinBackoff, MaxBackoff time.Duration
	// PingInterval between ping messages (UE sends Unix seconds).
	PingInterval time.Duration
	// SendQueue bounds messages waiting for the socket.
	SendQueue int
	// IncludeLoopback adds 127.0.0.1 host candidates (tests on one host).
	IncludeLoopback bool
	// Logger; nil discards.
	Logger *slog.Logger
	// OnIdentified, when set, is called with the committed id after every
	// endpointIdConfirm.
	OnIdentified func(committedID string)
	// Simulcast sends an SFU (a playerConnected with sfu:true) three RID
	// encodings of the pattern, scaled down 4, 2 and 1 and listed lowest
	// first as UE does (rids simulcast3, simulcast2, simulcast1); direct
	// players get the full size only. Width and Height must then be
	// multiples of 64.
	Simulcast bool
	// SimulcastSSRC describes the simulcast layers to the SFU as an SSRC
	// group (a=ssrc-group:SIM, libwebrtc's legacy form) instead of RIDs.
	SimulcastSSRC bool
	// Multiplex offers an SFU multiplex:true: it relays every player's
	// data over the streamer's one data channel, framed with the player's
	// id (internal/pxmux). Without it the SFU asks for per-player channels
	// (streamerDataChannels).
	Multiplex bool
	// OnInput, when set, is called (on a WebRTC goroutine) with each
	// data-channel message from a player and that player's id: a direct
	// player's, or behind an SFU the id the SFU names it by. The streamer
	// answers each UIInteraction with a Response "echo <playerId> <text>"
	// on the same player's channel.
	OnInput func(playerID string, msg []byte)
}

// Default returns a config for a local dev streamer.
func Default() Config {
	return Config{
		URL:          "ws://127.0.0.1:8888",
		ID:           "SyntheticStreamer",
		Codecs:       []string{"H264"},
		Width:        256,
		Height:       144,
		FPS:          10,
		MinBackoff:   250 * time.Millisecond,
		MaxBackoff:   10 * time.Second,
		PingInterval: 30 * time.Second,
		SendQueue:    1024,
	}
}

// Validate checks the config.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	u, err := url.Parse(c.URL)
	switch {
	case err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "":
		return bad("url %q must be ws:// or wss://host[:port]", c.URL)
	case c.Width%16 != 0 || c.Height%16 != 0 || c.Width <= 0 || c.Height <= 0 || c.Width > 1920 || c.Height > 1088:
		return bad("size %dx%d: multiples of 16 up to 1920x1088", c.Width, c.Height)
	case c.FPS < 1 || c.FPS > 60:
		return bad("fps %d outside [1,60]", c.FPS)
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return bad("backoff %v..%v", c.MinBackoff, c.MaxBackoff)
	case c.PingInterval <= 0:
		return bad("ping interval must be positive")
	case c.SendQueue < 16:
		return bad("send queue %d < 16", c.SendQueue)
	case c.Simulcast && (c.Width%64 != 0 || c.Height%64 != 0):
		return bad("simulcast size %dx%d: multiples of 64 (the smallest layer is a quarter)", c.Width, c.Height)
	}
	return nil
}

// dialURL adds the registration query to the configured URL.
func (c Config) dialURL() string {
	u, _ := url.Parse(c.URL) // validated
	q := u.Query()
	if c.Token != "" {
		q.Set("token", c.Token)
	} else {
		if c.POP != "" {
			q.Set("pop", c.POP)
		}
		if len(c.Codecs) > 0 {
			q.Set("codecs", strings.Join(c.Codecs, ","))
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Run connects, serves players, and reconnects with backoff until ctx is
// done; then it closes every peer connection and returns nil.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "synthetic-streamer", "streamer", cfg.ID, "pop", cfg.POP)
	api, err := newAPI(cfg)
	if err != nil {
		return err
	}
	backoff := cfg.MinBackoff
	for {
		identified, err := runSession(ctx, cfg, api, log)
		if ctx.Err() != nil {
			return nil
		}
		if identified {
			backoff = cfg.MinBackoff
		}
		delay := backoff/2 + rand.N(backoff/2+1)
		log.Info("signalling connection lost; reconnecting", "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		backoff = min(backoff*2, cfg.MaxBackoff)
	}
}

// newAPI builds a pion API whose only video codec is the pattern's H.264,
// as a UE worker configured for H.264 offers.
func newAPI(cfg Config) (*webrtc.API, error) {
	var me webrtc.MediaEngine
	if err := me.RegisterCodec(webrtc.RTPCodecParameters{
		RTPCodecCapability: h264Capability,
		PayloadType:        96,
	}, webrtc.RTPCodecTypeVideo); err != nil {
		return nil, fmt.Errorf("streamer: register H264: %w", err)
	}
	var ir interceptor.Registry
	if err := webrtc.RegisterDefaultInterceptors(&me, &ir); err != nil {
		return nil, fmt.Errorf("streamer: interceptors: %w", err)
	}
	if cfg.Simulcast {
		// mid and rid header extensions: the receiver maps RID layers by them.
		if err := webrtc.ConfigureSimulcastExtensionHeaders(&me); err != nil {
			return nil, fmt.Errorf("streamer: simulcast extensions: %w", err)
		}
	}
	var se webrtc.SettingEngine
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetIncludeLoopbackCandidate(cfg.IncludeLoopback)
	return webrtc.NewAPI(webrtc.WithMediaEngine(&me), webrtc.WithInterceptorRegistry(&ir), webrtc.WithSettingEngine(se)), nil
}

var h264Capability = webrtc.RTPCodecCapability{
	MimeType:    webrtc.MimeTypeH264,
	ClockRate:   90000,
	SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=" + H264ProfileLevelID,
	RTCPFeedback: []webrtc.RTCPFeedback{
		{Type: "goog-remb"}, {Type: "ccm", Parameter: "fir"}, {Type: "nack"}, {Type: "nack", Parameter: "pli"},
	},
}

// session is one signalling connection and its peers.
type session struct {
	cfg  Config       // immutable
	api  *webrtc.API  // immutable
	log  *slog.Logger // immutable
	out  chan []byte  // to the writer; bounded
	dead chan struct{}
	once sync.Once
	err  error // set once before dead closes

	iceServers []webrtc.ICEServer // owned by the read loop
	peers      map[string]*peer   // owned by the read loop
	wg         sync.WaitGroup     // frame pumps
}

// runSession serves one connection; identified reports whether the server
// confirmed our id.
func runSession(ctx context.Context, cfg Config, api *webrtc.API, log *slog.Logger) (identified bool, err error) {
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, ReadBufferSize: 16 << 10, WriteBufferSize: 64 << 10}
	ws, resp, err := d.DialContext(ctx, cfg.dialURL(), nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return false, fmt.Errorf("dial: %w", err)
	}
	ws.SetReadLimit(1 << 20)
	s := &session{cfg: cfg, api: api, log: log, out: make(chan []byte, cfg.SendQueue), dead: make(chan struct{}), peers: make(map[string]*peer)}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.writeLoop(ctx, ws) }()
	go func() { defer wg.Done(); s.pingLoop(ctx) }()
	stop := context.AfterFunc(ctx, func() { _ = ws.Close() })

	var readErr error
	for {
		_, b, err := ws.ReadMessage()
		if err != nil {
			readErr = err
			break
		}
		if s.handle(b) {
			identified = true
			if cfg.OnIdentified != nil {
				var m struct {
					CommittedID string `json:"committedId"`
				}
				_ = json.Unmarshal(b, &m)
				cfg.OnIdentified(m.CommittedID)
			}
		}
	}
	cancel()
	stop()
	_ = ws.Close()
	wg.Wait()
	for id, p := range s.peers {
		p.close()
		delete(s.peers, id)
	}
	s.wg.Wait()
	if s.err != nil {
		return identified, s.err
	}
	var ce *websocket.CloseError
	if errors.As(readErr, &ce) && ce.Code == websocket.ClosePolicyViolation {
		return identified, fmt.Errorf("%w: %s", ErrRefused, ce.Text)
	}
	return identified, readErr
}

// fail records err and drops the connection.
func (s *session) fail(err error) {
	s.once.Do(func() { s.err = err; close(s.dead) })
}

// send queues one message; a full queue drops the connection (never blocks
// pion callbacks).
func (s *session) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("marshal", "err", err)
		return
	}
	select {
	case s.out <- b:
	default:
		s.fail(ErrSendQueueFull)
	}
}

func (s *session) writeLoop(ctx context.Context, ws *websocket.Conn) {
	defer ws.Close()
	for {
		select {
		case <-ctx.Done():
			_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
			return
		case <-s.dead:
			return
		case b := <-s.out:
			_ = ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := ws.WriteMessage(websocket.TextMessage, b); err != nil {
				s.fail(fmt.Errorf("write: %w", err))
				return
			}
		}
	}
}

func (s *session) pingLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.send(map[string]any{"type": "ping", "time": float64(now.UnixMilli()) / 1000})
		}
	}
}

// inbound is every field the streamer reads from server messages.
type inbound struct {
	Type                  string          `json:"type"`
	PlayerID              json.RawMessage `json:"playerId"`
	SDP                   string          `json:"sdp"`
	Candidate             json.RawMessage `json:"candidate"`
	PeerConnectionOptions json.RawMessage `json:"peerConnectionOptions"`
	CommittedID           string          `json:"committedId"`
	SFU                   bool            `json:"sfu"`
	SFUID                 json.RawMessage `json:"sfuId"`
	SendStreamID          *uint16         `json:"sendStreamId"`
	RecvStreamID          *uint16         `json:"recvStreamId"`
}

// playerKey is the string form of a playerId (string or number).
func playerKey(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return strings.TrimSpace(string(raw))
}

// handle processes one server message; it reports endpointIdConfirm.
func (s *session) handle(b []byte) (identified bool) {
	var m inbound
	if err := json.Unmarshal(b, &m); err != nil {
		s.log.Debug("bad message", "err", err)
		return false
	}
	switch m.Type {
	case "identify":
		s.send(map[string]any{"type": "endpointId", "id": s.cfg.ID, "protocolVersion": ProtocolVersion})
	case "config":
		var pco struct {
			ICEServers []webrtc.ICEServer `json:"iceServers"`
		}
		if len(m.PeerConnectionOptions) > 0 && json.Unmarshal(m.PeerConnectionOptions, &pco) == nil {
			s.iceServers = pco.ICEServers
		}
	case "endpointIdConfirm":
		s.log.Info("identified", "committed_id", m.CommittedID)
		return true
	case "playerConnected":
		s.playerConnected(m.PlayerID, m.SFU)
	case "streamerDataChannels":
		// An SFU's per-player channels (non-multiplexed): on the peer
		// connection of the SFU that sfuId names.
		if p := s.peers[playerKey(m.SFUID)]; p != nil && m.SendStreamID != nil && m.RecvStreamID != nil {
			p.playerChannels(playerKey(m.PlayerID), *m.SendStreamID, *m.RecvStreamID)
		}
	case "playerDisconnected":
		if p := s.peers[playerKey(m.PlayerID)]; p != nil {
			p.close()
			delete(s.peers, playerKey(m.PlayerID))
		}
	case "answer":
		if p := s.peers[playerKey(m.PlayerID)]; p != nil {
			p.answer(m.SDP)
		}
	case "iceCandidate":
		if p := s.peers[playerKey(m.PlayerID)]; p != nil {
			var c webrtc.ICECandidateInit
			if json.Unmarshal(m.Candidate, &c) == nil {
				p.remoteCandidate(c)
			}
		}
	case "pong", "layerPreference", "dataChannelRequest", "peerDataChannelsReady", "streamerIdChanged":
	default:
		s.log.Debug("ignored message", "type", m.Type)
	}
	return false
}

// peer is one player's peer connection (or an SFU's).
type peer struct {
	s        *session
	id       json.RawMessage // the playerId as the server sent it
	key      string          // its string form
	sfu      bool            // the peer is an SFU
	pc       *webrtc.PeerConnection
	stop     context.CancelFunc
	mu       sync.Mutex
	remote   bool                      // guarded by mu: answer applied
	pending  []webrtc.ICECandidateInit // guarded by mu: candidates before the answer
	chans    []*webrtc.DataChannel     // guarded by mu: an SFU's per-player channels
	closeOne sync.Once
}

func (s *session) playerConnected(rawID json.RawMessage, sfu bool) {
	key := playerKey(rawID)
	if key == "" {
		return
	}
	if old := s.peers[key]; old != nil {
		old.close()
		delete(s.peers, key)
	}
	p, err := s.newPeer(rawID, sfu)
	if err != nil {
		s.log.Warn("peer connection", "player", key, "err", err)
		s.send(map[string]any{"type": "disconnectPlayer", "playerId": rawID, "reason": "streamer could not create a peer connection"})
		return
	}
	s.peers[key] = p
}

// simulcastRIDs are UE's rids, lowest resolution first, with the scale
// of each.
var simulcastRIDs = []struct {
	rid   string
	scale int
}{{"simulcast3", 4}, {"simulcast2", 2}, {"simulcast1", 1}}

func (s *session) newPeer(rawID json.RawMessage, sfu bool) (*peer, error) {
	pc, err := s.api.NewPeerConnection(webrtc.Configuration{ICEServers: s.iceServers})
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	p := &peer{s: s, id: rawID, key: playerKey(rawID), sfu: sfu, pc: pc, stop: stop}
	fail := func(err error) (*peer, error) { p.close(); return nil, err }

	var layers []layerOut
	if sfu && s.cfg.Simulcast {
		var tr *webrtc.RTPTransceiver
		for _, l := range simulcastRIDs {
			track := &ridTrack{rid: l.rid}
			pattern, err := NewPatternH264(s.cfg.Width/l.scale, s.cfg.Height/l.scale)
			if err != nil {
				return fail(err)
			}
			if tr == nil {
				if tr, err = pc.AddTransceiverFromTrack(track, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly}); err != nil {
					return fail(err)
				}
			} else if err := tr.Sender().AddEncoding(track); err != nil {
				return fail(err)
			}
			track.tr = tr
			layers = append(layers, layerOut{track, pattern})
		}
	} else {
		track, err := webrtc.NewTrackLocalStaticSample(h264Capability, "pixelstreaming_video_track_label", "pixelstreaming_av_stream_id")
		if err != nil {
			return fail(err)
		}
		if _, err := pc.AddTransceiverFromTrack(track, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly}); err != nil {
			return fail(err)
		}
		pattern, err := NewPatternH264(s.cfg.Width, s.cfg.Height)
		if err != nil {
			return fail(err)
		}
		layers = append(layers, layerOut{sampleTrack{track}, pattern})
	}
	ordered := true
	dc, err := pc.CreateDataChannel("datachannel", &webrtc.DataChannelInit{Ordered: &ordered})
	if err != nil {
		return fail(err)
	}
	dc.OnMessage(func(m webrtc.DataChannelMessage) { p.onData(dc, m.Data) })
	pc.OnICECandidate(func(c *webrtc.ICECandidate) {
		if c == nil {
			return
		}
		s.send(map[string]any{"type": "iceCandidate", "playerId": rawID, "candidate": c.ToJSON()})
	})
	pc.OnConnectionStateChange(func(st webrtc.PeerConnectionState) {
		s.log.Debug("peer state", "player", playerKey(rawID), "state", st.String())
		if st == webrtc.PeerConnectionStateFailed {
			s.send(map[string]any{"type": "disconnectPlayer", "playerId": rawID, "reason": "webrtc connection failed"})
		}
	})
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		return fail(err)
	}
	// The offer is queued before SetLocalDescription starts gathering, so
	// every trickled candidate follows it on the socket.
	wire := offer.SDP
	if sfu && s.cfg.Simulcast && s.cfg.SimulcastSSRC {
		wire = ssrcSimulcast(wire)
	}
	msg := map[string]any{"type": "offer", "playerId": rawID, "sdp": wire}
	if sfu && s.cfg.Multiplex {
		msg["multiplex"] = true
	}
	s.send(msg)
	if err := pc.SetLocalDescription(offer); err != nil {
		return fail(err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		pump(ctx, layers, s.cfg.FPS)
	}()
	return p, nil
}

// ssrcSimulcast rewrites a RID simulcast offer into the SSRC-group form:
// the a=rid and a=simulcast lines go, and a=ssrc-group:SIM lists the
// encodings' SSRCs (not their RTX repair SSRCs) in RID order, lowest
// first. pion still sends every encoding on its SSRC.
func ssrcSimulcast(sdp string) string {
	lines := strings.Split(sdp, "\r\n")
	rtx := map[string]bool{}
	for _, l := range lines {
		if g, ok := strings.CutPrefix(l, "a=ssrc-group:FID "); ok {
			if f := strings.Fields(g); len(f) == 2 {
				rtx[f[1]] = true
			}
		}
	}
	var sim []string
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, "a=ssrc:"); ok {
			n, _, _ := strings.Cut(v, " ")
			if !rtx[n] && !slices.Contains(sim, n) {
				sim = append(sim, n)
			}
		}
	}
	out := make([]string, 0, len(lines)+1)
	added := false
	for _, l := range lines {
		if strings.HasPrefix(l, "a=rid:") || strings.HasPrefix(l, "a=simulcast:") {
			continue
		}
		if !added && strings.HasPrefix(l, "a=ssrc") && len(sim) > 1 {
			out = append(out, "a=ssrc-group:SIM "+strings.Join(sim, " "))
			added = true
		}
		out = append(out, l)
	}
	return strings.Join(out, "\r\n")
}

// layerOut is one encoding of the pattern and its track.
type layerOut struct {
	track   frameWriter
	pattern *PatternH264
}

// frameWriter sends one access unit.
type frameWriter interface{ WriteSample(sampleOut) error }

// sampleTrack is a pion sample track as a frameWriter.
type sampleTrack struct {
	t *webrtc.TrackLocalStaticSample
}

func (s sampleTrack) WriteSample(x sampleOut) error {
	return s.t.WriteSample(media.Sample{Data: x.Data, Duration: x.Duration})
}

// pump writes one pattern frame per tick to every layer until ctx is
// done. Frames written before the track is negotiated are dropped by
// pion; every frame is an IDR, so the first delivered frame decodes.
func pump(ctx context.Context, layers []layerOut, fps int) {
	interval := time.Second / time.Duration(fps)
	t := time.NewTicker(interval)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, l := range layers {
			if err := l.track.WriteSample(sampleOut{Data: l.pattern.Frame(n), Duration: interval}); err != nil {
				return
			}
		}
	}
}

// onData handles a message on the peer's own channel: a direct player's
// input, or (multiplexed) any player's behind the SFU, framed with its id.
func (p *peer) onData(dc *webrtc.DataChannel, b []byte) {
	if !p.sfu {
		p.input(p.key, b, func(r []byte) { _ = dc.Send(r) })
		return
	}
	if !p.s.cfg.Multiplex {
		return // non-multiplexed, player data comes on per-player channels
	}
	typ, id, rest, err := pxmux.Parse(b)
	if err != nil || typ != pxmux.Multiplexed {
		return // relay status (198), or not a frame
	}
	p.input(id, rest, func(r []byte) { _ = dc.Send(pxmux.Frame(id, r)) })
}

// playerChannels opens an SFU's two channels for one of its players
// (streamerDataChannels): the streamer sends on send, receives on recv.
func (p *peer) playerChannels(playerID string, send, recv uint16) {
	yes := true
	out, err := p.pc.CreateDataChannel("send-datachannel", &webrtc.DataChannelInit{Ordered: &yes, Negotiated: &yes, ID: &send})
	if err != nil {
		p.s.log.Warn("player channel", "player", playerID, "err", err)
		return
	}
	in, err := p.pc.CreateDataChannel("recv-datachannel", &webrtc.DataChannelInit{Ordered: &yes, Negotiated: &yes, ID: &recv})
	if err != nil {
		_ = out.Close()
		p.s.log.Warn("player channel", "player", playerID, "err", err)
		return
	}
	in.OnMessage(func(m webrtc.DataChannelMessage) {
		p.input(playerID, m.Data, func(r []byte) { _ = out.Send(r) })
	})
	p.mu.Lock()
	p.chans = append(p.chans, out, in)
	p.mu.Unlock()
}

// input reports a player's message and echoes a UIInteraction.
func (p *peer) input(playerID string, b []byte, reply func([]byte)) {
	if f := p.s.cfg.OnInput; f != nil {
		f(playerID, b)
	}
	if text, err := pxmux.DecodeString(pxmux.UIInteraction, b); err == nil {
		reply(pxmux.EncodeResponse("echo " + playerID + " " + text))
	}
}

func (p *peer) answer(sdp string) {
	if err := p.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: sdp}); err != nil {
		p.s.log.Warn("set answer", "player", playerKey(p.id), "err", err)
		return
	}
	p.mu.Lock()
	p.remote = true
	pending := p.pending
	p.pending = nil
	p.mu.Unlock()
	for _, c := range pending {
		p.add(c)
	}
}

func (p *peer) remoteCandidate(c webrtc.ICECandidateInit) {
	if c.Candidate == "" {
		return // end of candidates
	}
	p.mu.Lock()
	if !p.remote {
		p.pending = append(p.pending, c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.add(c)
}

func (p *peer) add(c webrtc.ICECandidateInit) {
	if err := p.pc.AddICECandidate(c); err != nil {
		p.s.log.Debug("remote candidate", "player", playerKey(p.id), "err", err)
	}
}

func (p *peer) close() {
	p.closeOne.Do(func() {
		p.stop()
		_ = p.pc.Close()
	})
}
