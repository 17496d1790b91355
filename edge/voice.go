package edge

import (
	"net"
	"os"
	"strings"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/sfu"
	"github.com/oshun/egbe-edge/shard"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/redisstate"
	"github.com/oshun/egbe-edge/transport"
)

// publicURL is the base URL clients reach this edge at: --public-url, or
// http:// and the HTTP listener's address (a wildcard host becomes the
// machine's host name).
func (e *Edge) publicURL() string {
	if e.cfg.PublicURL != "" {
		return strings.TrimSuffix(e.cfg.PublicURL, "/")
	}
	host, port, _ := net.SplitHostPort(e.httpLn.Addr().String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

// voiceBridge carries realtime-session events to the SFU. The gateway is
// built before the SFU (the SFU looks sessions up in it), so the bridge is
// handed to the gateway first and pointed at the SFU once it exists.
type voiceBridge struct{ s *sfu.SFU }

var _ shard.VoiceHooks = (*voiceBridge)(nil)

func (b *voiceBridge) OnPresence(sessionID string, x, y, z int32) {
	if b.s != nil {
		b.s.UpdatePosition(sessionID, x, y, z)
	}
}

func (b *voiceBridge) OnControl(sessionID string, c *codec.VoiceControl) error {
	if b.s == nil {
		return nil
	}
	return b.s.Control(sessionID, c)
}

func (b *voiceBridge) OnClose(sessionID string) {
	if b.s != nil {
		b.s.SessionClosed(sessionID)
	}
}

// voiceSessions lets the SFU look up live realtime sessions.
type voiceSessions struct{ gw *shard.Gateway }

func (v voiceSessions) VoiceSession(id string) (sfu.SessionInfo, bool) {
	s, ok := v.gw.Session(id)
	if !ok {
		return sfu.SessionInfo{}, false
	}
	return sfu.SessionInfo{Subject: s.Subject, InstanceID: s.InstanceID, EntityID: s.EntityID, Region: s.Access.Region}, true
}

// buildVoice builds the SFU on the shared ICE port and connects it to the
// realtime gateway both ways. In a fleet the voice rooms are pinned to
// edges in Redis (sfu/rooms.go); alone, every room lives here.
func (e *Edge) buildVoice(bridge *voiceBridge) error {
	cfg := sfu.Default()
	cfg.Slots = e.cfg.VoiceSlots
	var rooms state.VoiceRooms
	if e.members != nil {
		// Rooms are held by live members of the fleet (sharedstate.go).
		rooms = redisstate.NewVoiceRooms(e.members, state.DefaultVoiceRoomTimes.RoomTTL)
	}
	deps := sfu.Deps{
		Port: e.ice, Signer: e.signer, Sessions: voiceSessions{e.rt.gw}, Notifier: e.rt.gw,
		Logger: e.base, Registerer: e.reg, Rooms: rooms,
	}
	if e.minting() || len(e.cfg.ICEServers) > 0 {
		deps.ICEServers = e.sessionICEServers
	}
	s, err := sfu.New(cfg, deps)
	if err != nil {
		return err
	}
	bridge.s = s
	e.mainMux.Handle("/v6/voice/", transport.CrossOrigin(e.cfg.AllowedOrigins, s.Handler()))
	e.runners = append(e.runners, s.Run)
	e.closers = append(e.closers, s.Close)
	return nil
}
