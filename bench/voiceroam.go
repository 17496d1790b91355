package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/egbeclient"
)

// VoiceMember is a client whose voice follows its room across a fleet: it
// keeps a realtime session (resuming it on another edge when told to or
// when its edge dies) and one voice peer on the edge that holds its room.
//
// The protocol it follows (README "Voice in a fleet"): POST
// /v6/voice/session on the edge the realtime session is on; a 409
// voice_room_elsewhere names the room's edge (edge_url): resume the
// realtime session there, re-send the voice controls (squads, mutes: they
// are per edge), then join voice there.
type VoiceMember struct {
	ID       uint16 // written into every packet this member sends
	Token    string
	Instance string
	Squad    string

	api *webrtc.API

	mu        sync.Mutex
	base      string // HTTP base of the edge holding the realtime session
	rt        *egbeclient.Conn
	resume    string
	sessionID string
	shardID   string
	pc        *webrtc.PeerConnection
	mic       *webrtc.TrackLocalStaticRTP
	moves     int

	heard sync.Map // speaker id (uint16) -> *atomic.Int64 packets
	seq   atomic.Uint32
}

// NewVoiceMember returns a member that will connect with token.
func NewVoiceMember(id uint16, token, instance, squad string) (*VoiceMember, error) {
	api, err := voiceAPI()
	if err != nil {
		return nil, err
	}
	return &VoiceMember{ID: id, Token: token, Instance: instance, Squad: squad, api: api}, nil
}

// SessionID, ShardID and Base describe the current realtime session.
func (m *VoiceMember) SessionID() string { m.mu.Lock(); defer m.mu.Unlock(); return m.sessionID }
func (m *VoiceMember) ShardID() string   { m.mu.Lock(); defer m.mu.Unlock(); return m.shardID }
func (m *VoiceMember) Base() string      { m.mu.Lock(); defer m.mu.Unlock(); return m.base }

// Moves counts voice_room_elsewhere redirects followed.
func (m *VoiceMember) Moves() int { m.mu.Lock(); defer m.mu.Unlock(); return m.moves }

// Connect opens the realtime session on the edge at base: a fresh session
// the first time, a resume (same session id and shard) afterwards.
func (m *VoiceMember) Connect(ctx context.Context, base string) error {
	m.mu.Lock()
	old, resume := m.rt, m.resume
	m.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	rt, err := egbeclient.Dial(ctx, egbeclient.Options{Kind: "websocket", HTTPBase: base, Inbox: 64})
	if err != nil {
		return fmt.Errorf("realtime dial %s: %w", base, err)
	}
	sh, err := rt.Hello(ctx, &codec.ClientHello{AccessToken: m.Token, InstanceId: m.Instance, AuthorityKind: codec.AuthorityKind_UE_CLIENT,
		ProtocolVersion: codec.ProtocolVersion, Capabilities: []string{"voice"}, ResumeToken: resume})
	if err != nil {
		_ = rt.Close()
		return fmt.Errorf("realtime hello at %s: %w", base, err)
	}
	go func() { // drain: reliable envelopes would otherwise back up
		for {
			if _, err := rt.Recv(context.Background()); err != nil {
				return
			}
		}
	}()
	// Voice controls are per edge: send them again after every (re)connect.
	if err := rt.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Voice{Voice: &codec.VoiceControl{Op: &codec.VoiceControl_JoinSquad{JoinSquad: m.Squad}}}}, false); err != nil {
		_ = rt.Close()
		return fmt.Errorf("join squad: %w", err)
	}
	m.mu.Lock()
	m.base, m.rt, m.resume, m.sessionID, m.shardID = base, rt, sh.GetResumeToken(), sh.GetSessionId(), sh.GetShardId()
	m.mu.Unlock()
	return nil
}

// RealtimeDone is closed when the current realtime connection ends.
func (m *VoiceMember) RealtimeDone() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rt.Done()
}

// ErrRoomEdgeUnreachable: a redirect named an edge that could not be
// reached; the member is back on its previous edge.
var ErrRoomEdgeUnreachable = errors.New("bench: the voice room's edge is unreachable")

// VoiceError is a refused voice join.
type VoiceError struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	EdgeID  string `json:"edge_id"`
	EdgeURL string `json:"edge_url"`
}

func (e *VoiceError) Error() string {
	return fmt.Sprintf("voice join: HTTP %d %s: %s", e.Status, e.Code, e.Message)
}

// JoinVoice joins voice where the room lives, following at most one
// voice_room_elsewhere redirect (moving the realtime session there). When
// the room's edge cannot be reached (it has just died and the room table
// does not know yet), the session resumes where it was and the error says
// so; the caller retries.
func (m *VoiceMember) JoinVoice(ctx context.Context) error {
	err := m.joinHere(ctx)
	var ve *VoiceError
	if !errors.As(err, &ve) || ve.Code != "voice_room_elsewhere" || ve.EdgeURL == "" {
		return err
	}
	prev := m.Base()
	if err := m.Connect(ctx, ve.EdgeURL); err != nil {
		if rerr := m.Connect(ctx, prev); rerr != nil {
			return fmt.Errorf("move to the room's edge %s: %w; and back to %s: %w", ve.EdgeID, err, prev, rerr)
		}
		return fmt.Errorf("%w: move to the room's edge %s: %w", ErrRoomEdgeUnreachable, ve.EdgeID, err)
	}
	m.mu.Lock()
	m.moves++
	m.mu.Unlock()
	return m.joinHere(ctx)
}

// joinHere offers a new peer connection (mic + one slot) to the edge the
// realtime session is on.
func (m *VoiceMember) joinHere(ctx context.Context) error {
	m.mu.Lock()
	base, sid, oldPC := m.base, m.sessionID, m.pc
	m.pc = nil
	m.mu.Unlock()
	if oldPC != nil {
		_ = oldPC.Close()
	}
	pc, err := m.api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return err
	}
	mic, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "mic", fmt.Sprint("mic-", m.ID))
	if err != nil {
		_ = pc.Close()
		return err
	}
	if _, err := pc.AddTransceiverFromTrack(mic, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendrecv}); err != nil {
		_ = pc.Close()
		return err
	}
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) { m.readSlot(tr) })
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		_ = pc.Close()
		return err
	}
	g := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		_ = pc.Close()
		return err
	}
	<-g
	answer, _, err := postVoiceJoin(ctx, base, m.Token, sid, pc.LocalDescription().SDP)
	if err != nil {
		_ = pc.Close()
		return err
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		_ = pc.Close()
		return err
	}
	m.mu.Lock()
	m.pc, m.mic = pc, mic
	m.mu.Unlock()
	return nil
}

// postVoiceJoin offers sdp for the realtime session sessionID to the edge at
// base (POST /v6/voice/session) and returns the answer and the slots
// granted; a refusal is a *VoiceError.
func postVoiceJoin(ctx context.Context, base, token, sessionID, sdp string) (answer string, slots int, err error) {
	body, _ := json.Marshal(map[string]string{"session_id": sessionID, "sdp": sdp})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v6/voice/session", bytes.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("voice join at %s: %w", base, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusCreated {
		ve := &VoiceError{Status: resp.StatusCode}
		if err := json.Unmarshal(raw, ve); err != nil {
			ve.Message = string(raw)
		}
		return "", 0, ve
	}
	var jr struct {
		SDP   string `json:"sdp"`
		Slots int    `json:"slots"`
	}
	if err := json.Unmarshal(raw, &jr); err != nil {
		return "", 0, fmt.Errorf("voice join answer: %w", err)
	}
	return jr.SDP, jr.Slots, nil
}

func (m *VoiceMember) readSlot(tr *webrtc.TrackRemote) {
	buf := make([]byte, 1500)
	var h rtp.Header
	for {
		n, _, err := tr.Read(buf)
		if err != nil {
			return
		}
		hl, err := h.Unmarshal(buf[:n])
		if err != nil || n-hl < 2 {
			continue
		}
		id := binary.BigEndian.Uint16(buf[hl:])
		c, _ := m.heard.LoadOrStore(id, new(atomic.Int64))
		c.(*atomic.Int64).Add(1)
	}
}

// Heard is how many packets from speaker id reached this member.
func (m *VoiceMember) Heard(id uint16) int64 {
	c, ok := m.heard.Load(id)
	if !ok {
		return 0
	}
	return c.(*atomic.Int64).Load()
}

// Speak sends one loud Opus-sized frame (carrying m.ID) every 20 ms until
// ctx is done.
func (m *VoiceMember) Speak(ctx context.Context) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	payload := make([]byte, 60)
	binary.BigEndian.PutUint16(payload, m.ID)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		mic := m.mic
		m.mu.Unlock()
		if mic == nil {
			continue
		}
		s := m.seq.Add(1)
		_ = mic.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: uint16(s), Timestamp: s * 960}, Payload: payload})
	}
}

// Close ends the voice peer and the realtime session.
func (m *VoiceMember) Close() {
	m.mu.Lock()
	pc, rt := m.pc, m.rt
	m.pc, m.rt = nil, nil
	m.mu.Unlock()
	if pc != nil {
		_ = pc.Close()
	}
	if rt != nil {
		_ = rt.Close()
	}
}
