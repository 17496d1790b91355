package signalling

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Auth modes (Config.Auth).
const (
	// AuthNone is the drop-in mode for a plain Epic setup: no tokens, any
	// streamer may take any id, any player may subscribe to any streamer.
	AuthNone = "none"
	// AuthToken is production mode: players present the matchmaker's session
	// JWT and streamers a streamer token, both as ?token= on the URL.
	AuthToken = "token"
)

// Config is the signalling server's configuration.
type Config struct {
	// MaxPlayers caps the players subscribed to one streamer; 0 = unlimited.
	MaxPlayers int `json:"max_players"`
	// PeerConnectionOptions is sent verbatim in every config message (ICE
	// servers as {"iceServers":[{"urls":[...]}]}). Must be a JSON object;
	// empty means {}.
	PeerConnectionOptions json.RawMessage `json:"peer_connection_options"`
	// Auth is AuthNone or AuthToken.
	Auth string `json:"auth"`
	// ReadLimit is the largest text frame accepted, in bytes. A larger frame
	// closes that socket with 1009.
	ReadLimit int64 `json:"read_limit"`
	// SendQueue is how many messages may wait for one socket; a socket that
	// falls this far behind is closed (it never blocks anyone else).
	SendQueue int `json:"send_queue"`
	// SFUSendQueue is SendQueue for an SFU's socket, which carries the
	// signalling of all its players (hundreds joining or leaving at once).
	SFUSendQueue int `json:"sfu_send_queue"`
	// WriteTimeout bounds one frame write.
	WriteTimeout time.Duration `json:"write_timeout"`
	// CloseGrace is how long a socket we close may take to answer our close
	// frame before its TCP connection is dropped.
	CloseGrace time.Duration `json:"close_grace"`
	// LeaseGrace keeps a lease after its last player leaves, so Epic's
	// frontend (which reconnects after 2 s) finds its streamer again.
	LeaseGrace time.Duration `json:"lease_grace"`
	// DefaultPOP and DefaultCodecs register streamers that name neither in
	// their token nor in their URL.
	DefaultPOP    string   `json:"default_pop"`
	DefaultCodecs []string `json:"default_codecs"`
	// IdleTick is how often leased sessions' idle machines are ticked.
	IdleTick time.Duration `json:"idle_tick"`
	// PeerConnectionOptionsFor, when set, builds each connection's
	// peerConnectionOptions instead of PeerConnectionOptions (per-connection
	// TURN credentials). It must return a JSON object; anything else (or
	// nil) sends PeerConnectionOptions. It runs on the connection's HTTP
	// goroutine, before the upgrade.
	PeerConnectionOptionsFor func(Peer) json.RawMessage `json:"-"`
}

// Peer roles (Peer.Role).
const (
	RolePlayer   = "player"
	RoleStreamer = "streamer"
	RoleSFU      = "sfu"
)

// Peer is the connection a config message goes to.
type Peer struct {
	// Role is RolePlayer, RoleStreamer or RoleSFU.
	Role string
	// Subject is who the connection's token names: the player's user (the
	// session token's subject), the streamer's or the SFU's id. "" in
	// drop-in mode or when the token names no one.
	Subject string
	// ID is the broker's id for the connection where it has one before the
	// config is sent (Player<n> for players and SFUs); "" for streamers,
	// which are named by their first message.
	ID string
	// Expires is the token's expiry; zero in drop-in mode.
	Expires time.Time
	// Host is the Host the client reached the broker at.
	Host string
}

// configFor is the config message for one connection: the static one, or
// the hook's options when it gives a JSON object.
func (s *Server) configFor(p Peer) []byte {
	f := s.cfg.PeerConnectionOptionsFor
	if f == nil {
		return s.config
	}
	pco := bytes.TrimSpace(f(p))
	if len(pco) < 2 || pco[0] != '{' || !json.Valid(pco) {
		s.log.Warn("peer connection options hook gave no JSON object: sending the static options", "role", p.Role)
		return s.config
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, pco); err != nil {
		return s.config
	}
	return msgConfig(buf.Bytes())
}

// ProtocolVersion is sent in config.protocolVersion (Epic UE5.5).
const ProtocolVersion = "1.3.0"

// Default returns the drop-in configuration.
func Default() Config {
	return Config{
		MaxPlayers:            0,
		PeerConnectionOptions: json.RawMessage(`{}`),
		Auth:                  AuthNone,
		ReadLimit:             1 << 20,
		SendQueue:             64,
		SFUSendQueue:          8192,
		WriteTimeout:          10 * time.Second,
		CloseGrace:            2 * time.Second,
		LeaseGrace:            10 * time.Second,
		DefaultPOP:            "local",
		DefaultCodecs:         []string{"H264"},
		IdleTick:              time.Second,
	}
}

// Validate checks every field.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...)
	}
	switch {
	case c.MaxPlayers < 0:
		return bad("max_players %d < 0", c.MaxPlayers)
	case c.Auth != AuthNone && c.Auth != AuthToken:
		return bad("auth %q: want %q or %q", c.Auth, AuthNone, AuthToken)
	case c.ReadLimit < 64<<10 || c.ReadLimit > 16<<20:
		return bad("read_limit %d outside [64 KiB, 16 MiB]", c.ReadLimit)
	case c.SendQueue < 1 || c.SendQueue > 1<<16:
		return bad("send_queue %d outside [1, 65536]", c.SendQueue)
	case c.SFUSendQueue < c.SendQueue || c.SFUSendQueue > 1<<20:
		return bad("sfu_send_queue %d outside [send_queue, 1048576]", c.SFUSendQueue)
	case c.WriteTimeout <= 0 || c.CloseGrace <= 0 || c.LeaseGrace < 0:
		return bad("write_timeout and close_grace must be > 0, lease_grace >= 0")
	case c.DefaultPOP == "":
		return bad("default_pop empty")
	case c.IdleTick <= 0:
		return bad("idle_tick must be > 0")
	}
	if len(bytes.TrimSpace(c.PeerConnectionOptions)) > 0 {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(c.PeerConnectionOptions, &m); err != nil || m == nil {
			return bad("peer_connection_options must be a JSON object")
		}
	}
	for _, codec := range c.DefaultCodecs {
		if strings.TrimSpace(codec) == "" {
			return bad("default_codecs holds an empty codec")
		}
	}
	return nil
}
