package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/shard"
	"github.com/oshun/egbe-edge/shard/shardsim"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/redisstate"
	"github.com/oshun/egbe-edge/transport"
)

// shardConn adapts a transport.Conn to what the shard gateway consumes.
type shardConn struct{ transport.Conn }

var _ shard.ClientConn = shardConn{}

func (c shardConn) Transport() string { return string(c.Kind()) }
func (c shardConn) JSON() bool        { return c.Encoding() == transport.EncodingJSON }

func (c shardConn) Read(ctx context.Context) ([]byte, bool, error) {
	m, err := c.Conn.Read(ctx)
	if errors.Is(err, transport.ErrMessageTooLarge) {
		// The gateway speaks codec's vocabulary: an oversized message is a
		// frame_too_large refusal.
		err = fmt.Errorf("%w: %w", codec.ErrFrameTooLarge, err)
	}
	return m.Data, m.Lane == transport.Unreliable, err
}

// portOf returns the numeric port of a listener address ("" -> 0).
func portOf(addr string) int {
	if addr == "" {
		return 0
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

// realtime is the edge's realtime plane: transports feeding the shard
// gateway, and (dev) an in-process reference shard.
type realtime struct {
	gw  *shard.Gateway
	ws  *transport.WebSocket
	rtc *transport.WebRTC
	wt  *transport.WebTransport
	sim *shardsim.Server // dev only
}

// buildRealtime wires transports -> gateway and mounts the realtime
// endpoints on the main mux.
func (e *Edge) buildRealtime(ctx context.Context) error {
	scfg := shard.DefaultConfig()
	scfg.DrainWindow = time.Duration(e.cfg.DrainWindow)
	scfg.EdgeID = e.edgeID
	scfg.LinkToken = e.cfg.LinkToken
	for name, addr := range e.cfg.Shards {
		scfg.Shards[name] = addr
	}
	for inst, sh := range e.cfg.Instances {
		scfg.Instances[inst] = sh
	}
	rt := &realtime{}
	if e.cfg.DevShard {
		sim, err := shardsim.Start(ctx, shardsim.Config{
			Listen: "127.0.0.1:0", ShardID: DevShardName, Instances: e.cfg.DevInstances,
			Agents: e.cfg.DevShardAgents, Logger: e.logFor("dev-shard"), LinkToken: e.cfg.LinkToken,
		})
		if err != nil {
			return fmt.Errorf("dev shard: %w", err)
		}
		e.closers = append(e.closers, sim.Close)
		rt.sim = sim
		scfg.Shards[DevShardName] = sim.Addr()
		for _, inst := range e.cfg.DevInstances {
			if _, taken := scfg.Instances[inst]; !taken {
				scfg.Instances[inst] = DevShardName
			}
		}
		e.log.Info("dev shard serving", "instances", e.cfg.DevInstances, "agents", e.cfg.DevShardAgents, "link", sim.Addr())
	}

	tcfg := transport.Default()
	tcfg.WebSocket.AllowedOrigins = e.cfg.AllowedOrigins
	tcfg.Negotiate.HTTPPort = portOf(e.Addrs().HTTP)
	tcfg.Negotiate.HTTPSPort = portOf(e.Addrs().HTTPS)
	tcfg.Negotiate.WebTransport = e.h3Conn != nil
	if e.cfg.TLSCert == "" {
		// Only a self-signed certificate needs pinning by hash.
		tcfg.Negotiate.CertificateHashes = [][32]byte{e.certHash}
	}
	if e.minting() || len(e.cfg.ICEServers) > 0 {
		// The client configures its RTCPeerConnections (data channels,
		// voice) from the negotiate answer, before its offers.
		tcfg.Negotiate.ICEServers = e.realtimeICEServers
		tcfg.WebRTC.ICEServers = e.realtimeICEServers
	}
	neg, err := transport.NewNegotiate(tcfg.Negotiate)
	if err != nil {
		return err
	}
	chain := make([]string, 0, len(transport.FallbackOrder))
	for _, k := range transport.FallbackOrder {
		if k != transport.KindWebTransport || tcfg.Negotiate.WebTransport {
			chain = append(chain, string(k))
		}
	}

	var pins shard.PinStore // nil: the gateway's in-memory pins
	// nil: the gateway's in-memory revocations (one edge).
	var revs state.Revocations
	// nil: no fleet to share shards with; links come from --shard only.
	var shards state.ShardDirectory
	if e.redis != nil {
		// Shared pins let a client whose edge died resume on any other edge.
		pins = shard.NewStatePins(redisstate.NewKV(e.redis, redisstate.KVPins), scfg.PinTTL, e.cfg.clock())
		// A revocation made on any edge holds on every edge. On the pins'
		// client, a resume reads its pin and its revocation in one
		// pipeline (state.GetRevoked): no extra round trip.
		revs = redisstate.NewRevocations(e.redis, e.cfg.clock())
		// The shared directory lets an edge with no --shard serve every
		// instance of the fleet (shard/discovery.go).
		shards = redisstate.NewShardDirectory(e.redis)
	}
	gw, err := shard.NewGateway(scfg, shard.Deps{
		Signer:        e.signer,
		Now:           e.cfg.clock(), // the signer's clock: pins and tokens expire together
		Pins:          pins,
		Revocations:   revs,
		Shards:        shards,
		Admit:         e.admitter,
		Voice:         e.voiceHooks,
		FallbackChain: func() []string { return chain },
		Logger:        e.base, // the gateway tags its own component
		Registerer:    e.reg,
	})
	if err != nil {
		return err
	}
	rt.gw = gw
	serve := func(ctx context.Context, c transport.Conn) { gw.Serve(ctx, shardConn{c}) }

	tm := transport.NewMetrics(e.reg)
	tlog := e.base // transports tag their own component
	if rt.ws, err = transport.NewWebSocket(tcfg.WebSocket, serve, tlog, tm); err != nil {
		return err
	}
	if rt.rtc, err = transport.NewWebRTC(tcfg.WebRTC, e.ice, serve, tlog, tm); err != nil {
		return err
	}
	if rt.wt, err = transport.NewWebTransport(tcfg.WebTransport, serve, tlog, tm); err != nil {
		return err
	}
	origins := e.cfg.AllowedOrigins
	e.mainMux.Handle("GET "+transport.PathNegotiate, transport.CrossOrigin(origins, neg))
	// A cross-origin negotiate with the access token is preflighted.
	e.mainMux.Handle("OPTIONS "+transport.PathNegotiate, transport.CrossOrigin(origins, http.NotFoundHandler()))
	e.mainMux.Handle(transport.PathWebSocket, rt.ws)
	e.mainMux.Handle("POST "+transport.PathWebRTC, transport.CrossOrigin(origins, rt.rtc))
	e.mainMux.Handle("OPTIONS "+transport.PathWebRTC, transport.CrossOrigin(origins, http.NotFoundHandler()))

	e.runners = append(e.runners, gw.Run)
	if e.h3Conn != nil {
		e.runners = append(e.runners, func(ctx context.Context) error {
			err := rt.wt.Serve(ctx, e.h3Conn, e.tlsConf.Clone(), e.withAltSvc(e.mainMux))
			if errors.Is(err, transport.ErrShuttingDown) {
				// A signal during start-up: the drain shut WebTransport down
				// before it served; there was nothing to serve.
				return nil
			}
			return err
		})
	}
	// Drain order: sessions get Drain while transports still carry it,
	// then the transports close what is left.
	e.drainers = append(e.drainers, gw.Drain, rt.ws.Shutdown, rt.rtc.Shutdown, rt.wt.Shutdown)
	e.readyChecks = append(e.readyChecks, gw.Ready)
	e.rt = rt
	return nil
}

// realtimeICEServers is the ICE servers of a realtime client (negotiate
// answer, WebRTC answer): TURN credentials for the subject of the bearer
// access token the request carries, lasting the session (sessionExpiry).
// A request without a valid token gets none: the TURN server is no relay
// for anyone who asks.
func (e *Edge) realtimeICEServers(r *http.Request) json.RawMessage {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil
	}
	a, err := e.signer.VerifyAccess(strings.TrimSpace(tok))
	if err != nil {
		return nil
	}
	subject := a.Subject
	if subject == "" {
		subject = connSubject("realtime")
	}
	return e.sessionICEServers(subject, a.ExpiresAt, r.Host)
}
