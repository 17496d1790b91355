package edge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/netip"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/turnrelay"
)

// turnCredentialTTL is the lifetime of a TURN credential minted for a
// connection whose session lifetime is not known. A relay ends with its
// credential, so it must outlast a long stream.
const turnCredentialTTL = 6 * time.Hour

// turnPlane is the embedded TURN server (nil when --turn is off) and the
// issuer minting credentials for it and for the --turn-url servers (nil
// when neither is configured).
type turnPlane struct {
	srv    *turnrelay.Server
	issuer *turnrelay.Issuer
}

// buildTURN starts the embedded TURN server, which serves from here until
// the edge's closers run (after the drain: relayed clients keep their path
// while they are told to move), and builds the credential issuer.
func (e *Edge) buildTURN() error {
	e.turn = &turnPlane{}
	if e.cfg.TURN == "" && len(e.cfg.TURNURLs) == 0 {
		return nil
	}
	secret := []byte(e.cfg.TURNSecret)
	if len(secret) == 0 {
		secret = auth.RandomSecret()
		e.log.Warn("EGBE_TURN_SECRET is not set: TURN credentials use a random secret, so no other edge and no --turn-url server accepts them (dev only)")
	}
	port, host := 0, ""
	if len(e.cfg.PublicIPs) > 0 {
		host = e.cfg.PublicIPs[0]
	}
	if e.cfg.TURN != "" {
		tc := turnrelay.Default()
		tc.Listen = e.cfg.TURN
		tc.RelayPorts, _ = turnrelay.ParsePortRange(e.cfg.TURNRelayPorts) // checked by Validate
		tc.Secret = secret
		tc.AllowLoopbackPeers = e.cfg.Mode == ModeDev
		tc.AllowPeers = e.cfg.TURNAllowPeers
		if host != "" {
			tc.RelayIP = host
		}
		srv, err := turnrelay.New(tc, turnrelay.Deps{Logger: e.base, Registerer: e.reg})
		if err != nil {
			return err
		}
		e.turn.srv = srv
		e.closers = append(e.closers, srv.Close)
		e.drainers = append(e.drainers, func(context.Context) error { srv.Drain(); return nil })
		port = srv.Port()
		e.log.Info("TURN listening", "udp", srv.UDPAddr().String(), "tcp", srv.TCPAddr().String(),
			"relay_ip", srv.RelayIP().String(), "relay_ports", tc.RelayPorts.String(), "loopback_peers", tc.AllowLoopbackPeers)
		if host == "" {
			if ip, _ := netip.ParseAddr(hostOf(e.cfg.TURN)); !ip.IsValid() || ip.IsUnspecified() {
				e.log.Warn("TURN relays announce " + srv.RelayIP().String() + ", which only this machine reaches: set --public-ip")
			}
		}
	}
	iss, err := turnrelay.NewIssuer(turnrelay.IssuerConfig{Secret: secret, Port: port, Host: host, External: e.cfg.TURNURLs,
		TTL: turnCredentialTTL, Now: e.cfg.clock()})
	if err != nil {
		return err
	}
	e.turn.issuer = iss
	return nil
}

// iceServersUntil is what one WebRTC connection is handed: the
// configured static servers, then the embedded TURN server and the
// --turn-url servers with a credential minted for subject that expires at
// expiry. host is the name the client reached the edge at (for the
// embedded server's URL when there is no --public-ip).
func (e *Edge) iceServersUntil(subject string, expiry time.Time, host string) turnrelay.Options {
	out := turnrelay.Options{ICEServers: []turnrelay.ICEServer{}}
	for _, s := range e.cfg.ICEServers {
		out.ICEServers = append(out.ICEServers, turnrelay.ICEServer{URLs: s.URLs, Username: s.Username, Credential: s.Credential})
	}
	if e.minting() {
		out.ICEServers = append(out.ICEServers, e.turn.issuer.MintUntil(subject, expiry, hostOf(host)).ICEServers...)
	}
	return out
}

// minting reports whether the edge mints TURN credentials (the embedded
// server or --turn-url is configured).
func (e *Edge) minting() bool { return e.turn != nil && e.turn.issuer != nil }

// sessionExpiry is when a session's TURN credential expires. A token
// (match session, access, streamer) bounds when its connection may start,
// not how long it lasts: a Pixel Streaming session token lapses after
// 120 s, and an allocation ends with its credential, so a credential
// expiring with the token would cut a relayed stream after two minutes.
// The session may start until the token's expiry (now, without a token)
// and then lasts up to turnCredentialTTL. Two connections of one session
// (the match answer and the signalling config) so get the same
// credential.
func (e *Edge) sessionExpiry(tokenExpiry time.Time) time.Time {
	start := e.cfg.clock()()
	if tokenExpiry.After(start) {
		start = tokenExpiry
	}
	return start.Add(turnCredentialTTL)
}

// sessionICEServers is the JSON {"iceServers":[...]} one session's WebRTC
// connection is handed (sessionExpiry says for how long).
func (e *Edge) sessionICEServers(subject string, tokenExpiry time.Time, host string) json.RawMessage {
	b, err := json.Marshal(e.iceServersUntil(subject, e.sessionExpiry(tokenExpiry), host))
	if err != nil {
		return nil
	}
	return b
}

// connSubject names a TURN credential's user when no token names one: a
// random per-connection id, unique across a fleet sharing a coturn,
// prefixed by what the edge calls the connection (Player3, streamer) so
// TURN's logs tie an allocation to it.
func connSubject(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// hostOf is the host of "host:port" or a bare host.
func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}
