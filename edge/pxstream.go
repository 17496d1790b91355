package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/oshun/egbe-edge/admission"
	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/signalling"
	"github.com/oshun/egbe-edge/signalling/matchmaker"
	"github.com/oshun/egbe-edge/signalling/streamer"
	"github.com/oshun/egbe-edge/state/redisstate"
)

// devStreamerPOP is where dev-mode streamers register when they name no POP,
// so the matchmaker (which only knows the topology's POPs) can lease them.
const devStreamerPOP = "us-east-1"

// devStreamerTokenTTL outlives any dev session.
const devStreamerTokenTTL = 30 * 24 * time.Hour

// pxstream is the Pixel Streaming plane: the Epic broker and the matchmaker.
type pxstream struct {
	srv *signalling.Server
	mm  *matchmaker.Matchmaker
}

// buildPxstream wires the broker, the live-fleet matchmaker and (dev) the
// synthetic streamers.
func (e *Edge) buildPxstream() error {
	topo := matchmaker.DefaultTopology()
	if e.cfg.PxstreamTopology != "" {
		t, err := matchmaker.LoadTopology(e.cfg.PxstreamTopology)
		if err != nil {
			return fmt.Errorf("%w: --pxstream-topology: %w", ErrConfig, err)
		}
		topo = t
	}
	fleet := &matchmaker.RegistryFleet{}
	mcfg := matchmaker.Default()
	mcfg.RequireAccessToken = e.cfg.Mode == ModeProd
	mcfg.FallbackURL = e.cfg.FallbackURL
	mdeps := matchmaker.Deps{
		Fleet: fleet, Signer: e.signer, Topology: topo, Admitter: e.pxAdmitter,
		Logger: e.base, Registerer: e.reg, Now: e.cfg.clock(),
	}
	if e.minting() {
		// The match answer's ice_servers: the same credential the session's
		// signalling config will carry (same subject, same expiry).
		mdeps.ICEServers = e.sessionICEServers
	}
	if e.adm != nil {
		mdeps.Seats = e.adm.px // concert seats on the dashboard
	}
	mm, err := matchmaker.New(mcfg, mdeps)
	if err != nil {
		return err
	}

	scfg := signalling.Default()
	scfg.Auth = e.cfg.PxstreamAuth
	scfg.MaxPlayers = e.cfg.MaxPlayers
	if e.adm != nil {
		// One grace: the session's admission lease and the broker's
		// streamer lease let go together.
		scfg.LeaseGrace = e.adm.px.sessions.Grace()
	}
	if e.cfg.Mode == ModeDev {
		scfg.DefaultPOP = devStreamerPOP
	}
	if len(e.cfg.ICEServers) > 0 {
		opts, err := json.Marshal(map[string]any{"iceServers": e.cfg.ICEServers})
		if err != nil {
			return err
		}
		scfg.PeerConnectionOptions = opts
	}
	if e.minting() {
		// Every player, streamer and SFU gets its own TURN credential.
		scfg.PeerConnectionOptionsFor = func(p signalling.Peer) json.RawMessage {
			subject := p.Subject
			switch {
			case subject != "":
			case p.ID != "":
				subject = connSubject(p.ID)
			default:
				subject = connSubject(p.Role)
			}
			return e.sessionICEServers(subject, p.Expires, p.Host)
		}
	}
	hooks := mm.Hooks()
	if e.adm != nil {
		// Admission's concurrency lease follows the player subscribing and leaving.
		hooks.Next = e.adm.px
	}
	deps := signalling.Deps{Signer: e.signer, Logger: e.base, Registerer: e.reg, Leases: hooks, Now: e.cfg.clock()}
	if e.adm != nil {
		idle := e.adm.policy.Idle
		deps.Idle = func(start time.Time) signalling.IdleMachine {
			return idleMachine{admission.NewIdleTracker(idle, start)}
		}
		// UE workers' input reports feed the abuse classifier.
		deps.Input = e.adm.px.input
	}
	if conn := e.redis; conn != nil {
		// With Redis the registry is the fleet's, and players on this edge
		// can play streamers registered on any other; the fleet's
		// membership says which peer edges are alive.
		cl, err := signalling.NewCluster(e.edgeID, signalling.FleetState{Streamers: redisstate.NewStreamers(conn),
			Inbox: redisstate.NewInbox(conn, 0, nil), Members: e.members, Health: conn}, e.logFor("signalling-cluster"))
		if err != nil {
			return err
		}
		deps.Cluster = cl
	}
	srv, err := signalling.New(scfg, deps)
	if err != nil {
		return err
	}
	fleet.Reg = srv.Registry()
	if e.adm != nil {
		e.adm.px.sessions.SetEnder(brokerEnder{srv}) // budget and ban ends
	}

	e.mainMux.Handle(mcfg.SignallingPath, srv.PlayerHandler())
	mmh := mm.Handler()
	if e.adm != nil {
		mux := http.NewServeMux()
		mux.Handle(matchmaker.PathMatch, e.metered("match", mmh))
		mux.Handle(matchmaker.PathMatchV3, e.metered("match", mmh))
		mux.Handle("/", mmh)
		mmh = mux
	}
	e.mainMux.Handle("/api/v6/pxstream/", mmh)
	e.mainMux.Handle("/api/v3/pxstream/", mmh)
	e.extraServers = append(e.extraServers, extraServer{e.streamerLn, srv.StreamerHandler()}, extraServer{e.playerLn, srv.PlayerHandler()},
		extraServer{e.sfuLn, srv.SFUHandler()})
	e.runners = append(e.runners, srv.Run)
	e.closers = append(e.closers, func() error { srv.Close(); return nil })

	if n := e.cfg.DevStreamers; n > 0 && e.streamerLn != nil {
		url := "ws://" + e.streamerLn.Addr().String()
		for i := 0; i < n; i++ {
			sc := streamer.Default()
			sc.URL = url
			sc.ID = "DefaultStreamer"
			sc.POP = devStreamerPOP
			sc.Codecs = []string{"H264"}
			if scfg.Auth == signalling.AuthToken {
				// In token mode a streamer may only register the id its
				// token names, so each dev streamer gets its own.
				sc.ID = fmt.Sprintf("DevStreamer%d", i+1)
				tok, err := e.signer.IssueStreamer(auth.Streamer{StreamerID: sc.ID, POP: sc.POP, Codecs: sc.Codecs}, devStreamerTokenTTL)
				if err != nil {
					return err
				}
				sc.Token = tok
			}
			sc.IncludeLoopback = true
			if e.cfg.PxSFU > 0 {
				// Three simulcast layers for the in-process SFUs to choose from.
				sc.Simulcast, sc.Height = true, 128
			}
			sc.Logger = e.logFor("dev-streamer")
			e.runners = append(e.runners, func(ctx context.Context) error {
				if err := streamer.Run(ctx, sc); err != nil && ctx.Err() == nil {
					return fmt.Errorf("dev streamer: %w", err)
				}
				return nil
			})
		}
	}
	if err := e.buildPxSFU(scfg.Auth); err != nil {
		return err
	}
	e.px = &pxstream{srv: srv, mm: mm}
	return nil
}

// idleMachine adapts admission's idle policy state machine to the broker.
type idleMachine struct{ t *admission.IdleTracker }

func (m idleMachine) Input(now time.Time)     { m.t.Input(now) }
func (m idleMachine) DisconnectAt() time.Time { return m.t.Next() }
func (m idleMachine) Tick(now time.Time) signalling.IdleStep {
	switch m.t.Tick(now) {
	case admission.IdlePrompt:
		return signalling.IdlePrompt
	case admission.IdleDisconnect:
		return signalling.IdleDisconnect
	}
	return signalling.IdleNone
}

// extraServer is a listener served by one subsystem's handler.
type extraServer struct {
	ln net.Listener
	h  http.Handler
}
