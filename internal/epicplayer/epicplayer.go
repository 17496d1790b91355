// Package epicplayer is a Pixel Streaming player in Go (pion) that speaks
// Epic's player protocol as the UE5.5 frontend does towards an SFU
// (PIXEL_STREAMING_SFU.md section 3, steps 6 to 10): it subscribes, sends
// layerPreference before its answer, then dataChannelRequest, opens the
// two pre-negotiated channels peerDataChannels names and sends
// peerDataChannelsReady. It counts the video it receives and reads the
// frame size from H.264 SPS units, and sends UIInteraction input. The SFU
// tests and the egbe-bench pxsfu receivers use it; it is a real WebRTC
// peer, not a stand-in.
package epicplayer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/pion/webrtc/v4"

	"github.com/oshun/egbe-edge/internal/pxmux"
)

// Config shapes one player.
type Config struct {
	// URL of the signalling server's player port.
	URL string
	// StreamerID to subscribe to (an SFU's id).
	StreamerID string
	// Layer, when >= 0, is sent as layerPreference{spatialLayer} before the
	// answer (Epic's frontend sends its last quality option, 2).
	Layer int
	// NoAnswer leaves the offer unanswered (a player that never answers).
	NoAnswer bool
	// API builds the peer connection; nil is pion's defaults.
	API *webrtc.API
	// OnPacket, when set, is called for each video RTP packet with its
	// arrival time (on the track's reader goroutine).
	OnPacket func(payload []byte, at time.Time)
}

// Player is one connected player.
type Player struct {
	cfg  Config
	ws   *websocket.Conn
	wmu  sync.Mutex
	pc   *webrtc.PeerConnection
	done chan struct{}
	wg   sync.WaitGroup

	offered   chan struct{} // closed at the SFU's offer
	offerOnce sync.Once
	mu        sync.Mutex
	sfu       bool                // guarded by mu: the offer said sfu:true
	mode      string              // guarded by mu: its scalabilityMode
	send      *webrtc.DataChannel // guarded by mu
	responses []string            // guarded by mu
	errs      []error             // guarded by mu

	packets atomic.Int64
	frames  atomic.Int64 // SPS units seen (every synthetic frame has one)
	width   atomic.Int32 // from the last SPS
	height  atomic.Int32
	chOpen  atomic.Bool
}

// Dial connects, subscribes, and answers the offer on its own.
func Dial(ctx context.Context, cfg Config) (*Player, error) {
	api := cfg.API
	if api == nil {
		api = webrtc.NewAPI()
	}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.DialContext(ctx, cfg.URL, nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		ws.Close()
		return nil, err
	}
	p := &Player{cfg: cfg, ws: ws, pc: pc, done: make(chan struct{}), offered: make(chan struct{})}
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		if tr.Kind() == webrtc.RTPCodecTypeVideo {
			p.readVideo(tr)
			return
		}
		buf := make([]byte, 1500)
		for {
			if _, _, err := tr.Read(buf); err != nil {
				return
			}
		}
	})
	p.wg.Add(1)
	go func() { defer p.wg.Done(); p.readLoop() }()
	if err := p.write(map[string]any{"type": "subscribe", "streamerId": cfg.StreamerID}); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *Player) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return p.ws.WriteMessage(websocket.TextMessage, b)
}

func (p *Player) fail(err error) {
	p.mu.Lock()
	p.errs = append(p.errs, err)
	p.mu.Unlock()
}

type inbound struct {
	Type            string `json:"type"`
	SDP             string `json:"sdp"`
	SFU             bool   `json:"sfu"`
	ScalabilityMode string `json:"scalabilityMode"`
	SendStreamID    uint16 `json:"sendStreamId"`
	RecvStreamID    uint16 `json:"recvStreamId"`
}

func (p *Player) readLoop() {
	defer close(p.done)
	for {
		_, b, err := p.ws.ReadMessage()
		if err != nil {
			return
		}
		var m inbound
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		switch m.Type {
		case "offer":
			p.onOffer(&m)
		case "peerDataChannels":
			p.onChannels(m.SendStreamID, m.RecvStreamID)
		}
	}
}

// onOffer answers as Epic's frontend: layerPreference, answer, then
// dataChannelRequest (with sfu:true).
func (p *Player) onOffer(m *inbound) {
	p.mu.Lock()
	p.sfu, p.mode = m.SFU, m.ScalabilityMode
	p.mu.Unlock()
	p.offerOnce.Do(func() { close(p.offered) })
	if p.cfg.NoAnswer {
		return
	}
	if err := p.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: m.SDP}); err != nil {
		p.fail(fmt.Errorf("offer: %w", err))
		return
	}
	answer, err := p.pc.CreateAnswer(nil)
	if err != nil {
		p.fail(fmt.Errorf("answer: %w", err))
		return
	}
	gathered := webrtc.GatheringCompletePromise(p.pc)
	if err := p.pc.SetLocalDescription(answer); err != nil {
		p.fail(fmt.Errorf("answer: %w", err))
		return
	}
	<-gathered
	if p.cfg.Layer >= 0 {
		_ = p.write(map[string]any{"type": "layerPreference", "spatialLayer": p.cfg.Layer, "temporalLayer": 0, "playerId": ""})
	}
	_ = p.write(map[string]any{"type": "answer", "sdp": p.pc.LocalDescription().SDP, "minBitrateBps": 0, "maxBitrateBps": 0})
	if m.SFU {
		_ = p.write(map[string]string{"type": "dataChannelRequest"})
	}
}

// onChannels opens the two pre-negotiated channels (one if the ids are
// equal) and sends peerDataChannelsReady when the receiving one opens.
func (p *Player) onChannels(sendID, recvID uint16) {
	yes := true
	send, err := p.pc.CreateDataChannel("send-datachannel", &webrtc.DataChannelInit{Ordered: &yes, Negotiated: &yes, ID: &sendID})
	if err != nil {
		p.fail(err)
		return
	}
	recv := send
	if recvID != sendID {
		if recv, err = p.pc.CreateDataChannel("recv-datachannel", &webrtc.DataChannelInit{Ordered: &yes, Negotiated: &yes, ID: &recvID}); err != nil {
			p.fail(err)
			return
		}
		recv.OnOpen(func() {
			p.chOpen.Store(true)
			_ = p.write(map[string]string{"type": "peerDataChannelsReady"})
		})
	} else {
		send.OnOpen(func() { p.chOpen.Store(true) })
	}
	recv.OnMessage(func(m webrtc.DataChannelMessage) {
		if r, err := pxmux.DecodeResponse(m.Data); err == nil {
			p.mu.Lock()
			p.responses = append(p.responses, r)
			p.mu.Unlock()
		}
	})
	p.mu.Lock()
	p.send = send
	p.mu.Unlock()
}

// readVideo counts packets and reads the frame size from each SPS.
func (p *Player) readVideo(tr *webrtc.TrackRemote) {
	buf := make([]byte, 1500)
	for {
		n, _, err := tr.Read(buf)
		if err != nil {
			return
		}
		at := time.Now()
		if n < 12 {
			continue
		}
		p.packets.Add(1)
		off := 12 + 4*int(buf[0]&0x0f)
		if buf[0]&0x10 != 0 && n >= off+4 {
			off += 4 + 4*(int(buf[off+2])<<8|int(buf[off+3]))
		}
		if off >= n {
			continue
		}
		payload := buf[off:n]
		if p.cfg.OnPacket != nil {
			p.cfg.OnPacket(payload, at)
		}
		if sps := findSPS(payload); sps != nil {
			if w, h, ok := spsSize(sps); ok {
				p.width.Store(int32(w))
				p.height.Store(int32(h))
				p.frames.Add(1)
			}
		}
	}
}

// SetLayer sends a layerPreference (as the frontend's quality setting).
func (p *Player) SetLayer(spatial int) error {
	return p.write(map[string]any{"type": "layerPreference", "spatialLayer": spatial, "temporalLayer": 0, "playerId": ""})
}

// SendInput sends text as a UIInteraction on the data channel.
func (p *Player) SendInput(text string) error {
	p.mu.Lock()
	send := p.send
	p.mu.Unlock()
	if send == nil || send.ReadyState() != webrtc.DataChannelStateOpen {
		return errors.New("epicplayer: data channel not open")
	}
	return send.Send(pxmux.EncodeString(pxmux.UIInteraction, text))
}

// Responses are the Response messages received so far.
func (p *Player) Responses() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.responses...)
}

// HasResponse reports whether a response containing s arrived.
func (p *Player) HasResponse(s string) bool {
	for _, r := range p.Responses() {
		if strings.Contains(r, s) {
			return true
		}
	}
	return false
}

// Offered reports whether the offer arrived, with its sfu flag and
// scalabilityMode.
func (p *Player) Offered() (ok, sfu bool, mode string) {
	select {
	case <-p.offered:
	default:
		return false, false, ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return true, p.sfu, p.mode
}

// Packets is the video packets received; Frames the SPS units (frames of
// the synthetic pattern); Size the frame size of the last SPS.
func (p *Player) Packets() int64 { return p.packets.Load() }
func (p *Player) Frames() int64  { return p.frames.Load() }
func (p *Player) Size() (w, h int) {
	return int(p.width.Load()), int(p.height.Load())
}

// ChannelsOpen reports whether its data channels opened.
func (p *Player) ChannelsOpen() bool { return p.chOpen.Load() }

// Errs are negotiation errors so far.
func (p *Player) Errs() []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]error(nil), p.errs...)
}

// Connected reports whether the peer connection is up.
func (p *Player) Connected() bool {
	return p.pc.ConnectionState() == webrtc.PeerConnectionStateConnected
}

// Done is closed when the signalling socket ends.
func (p *Player) Done() <-chan struct{} { return p.done }

// Close ends the peer connection and the socket.
func (p *Player) Close() {
	_ = p.pc.Close()
	p.wmu.Lock()
	_ = p.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	p.wmu.Unlock()
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
	}
	_ = p.ws.Close()
	p.wg.Wait()
}
