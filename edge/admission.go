package edge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/oshun/egbe-edge/admission"
	"github.com/oshun/egbe-edge/internal/opsboard"
	"github.com/oshun/egbe-edge/shard"
	"github.com/oshun/egbe-edge/signalling"
	"github.com/oshun/egbe-edge/signalling/matchmaker"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/redisstate"
	"github.com/oshun/egbe-edge/web"
)

// admissionPlane holds admission's pieces and the state behind them.
type admissionPlane struct {
	policy    *admission.Policy
	room      *admission.Room
	handshake *admission.HandshakeAdmitter
	px        *pxAdmission
	handlers  *admission.Handlers
	meter     *admission.Meter
	surge     *admission.Surge
}

// buildAdmission builds state (memory, or Redis with --redis-url), the
// admitters, the waiting room and its surge controller. It runs before the
// realtime and Pixel Streaming planes, which consume it through their
// admitter seams.
func (e *Edge) buildAdmission() error {
	policy := admission.DefaultPolicy()
	if e.cfg.PolicyFile != "" {
		p, err := admission.LoadPolicy(e.cfg.PolicyFile)
		if err != nil {
			return fmt.Errorf("%w: --policy: %w", ErrConfig, err)
		}
		policy = p
	}
	var events *admission.Events
	if e.cfg.PxstreamEvents != "" {
		ev, err := admission.LoadEvents(e.cfg.PxstreamEvents)
		if err != nil {
			return fmt.Errorf("%w: --pxstream-events: %w", ErrConfig, err)
		}
		events = ev
	}
	now := e.cfg.clock()
	var (
		board   opsboard.Board // nil: a lone edge
		leases  state.Leases
		budgets state.Budgets
		queue   state.Queue
		tallies state.Tallies
		kv      state.KV
		seats   state.Seats
	)
	if conn := e.redis; conn != nil {
		board = e.board
		leases = redisstate.NewLeases(conn)
		budgets = redisstate.NewBudgets(conn)
		tallies = redisstate.NewTallies(conn)
		kv = redisstate.NewKV(conn, redisstate.KVAdmission)
		seats = redisstate.NewSeats(conn)
		// Only dev may create a fresh waiting room in an empty Redis: in prod
		// an empty Redis is lost state and the room fails closed until an
		// operator re-arms it.
		q, qerr := redisstate.NewQueue(e.lifetime, conn, e.cfg.Mode == ModeDev)
		if qerr != nil {
			e.log.Warn("waiting-room state unavailable; the room stays closed until Redis answers and an operator re-arms it", "err", qerr)
		}
		queue = q
	} else {
		leases, budgets, queue = state.NewMemoryLeases(), state.NewMemoryBudgets(), state.NewMemoryQueue()
		tallies, kv, seats = state.NewMemoryTallies(), state.NewMemoryKV(now), state.NewMemorySeats()
	}
	e.ops = opsboard.New(e.edgeID, e.reg, board, now)
	if board != nil {
		e.runners = append(e.runners, e.ops.Run) // publishes this edge's figures for the fleet view
	}
	fleet := admission.NewFleetView(e.streamingFleet, now)
	m, err := admission.NewMetrics(e.reg)
	if err != nil {
		return err
	}
	auditW, err := e.auditWriter()
	if err != nil {
		return err
	}
	audit := admission.NewAuditor(auditW, now)
	meter, err := admission.NewMeter(tallies, now, e.reg)
	if err != nil {
		return err
	}
	clamp := &admission.HealthClamp{}
	deps := admission.RoomDeps{Queue: queue, Signer: e.signer, Utilisation: fleet, Health: clamp, Audit: audit,
		Now: now, Metrics: m, Logger: e.base, FallbackURL: e.cfg.FallbackURL}
	if events != nil {
		deps.Prewarm = events // booked attendees inside their window ride the pre-warm lane
	}
	room, err := admission.NewRoom(policy, deps)
	if err != nil {
		return err
	}
	surge, err := admission.NewSurge(policy, admission.SurgeDeps{Room: room, Meter: meter, Clamp: clamp, KV: kv, Leases: leases,
		Holder: e.edgeID, Sessions: e.fleetSessions, Audit: audit, Now: now, Metrics: m, Logger: e.base})
	if err != nil {
		return err
	}
	e.runners = append(e.runners, func(ctx context.Context) error { return surge.Run(ctx, e.cfg.test.surgeEvery) })
	watch := admission.NewAbuseWatch(policy, tallies, kv, audit, now, m)
	ttl := time.Duration(policy.Pxstream.LeaseTTLMs) * time.Millisecond
	every := max(ttl/3, time.Second)
	if e.cfg.test.chargeEvery > 0 {
		every = e.cfg.test.chargeEvery
	}
	pxa := admission.NewAdmitter(policy, leases, budgets, seats, watch, audit, now, m)
	// One reconnect grace for the session's lease and the broker's
	// streamer lease: signalling's LeaseGrace (buildPxstream gives the
	// broker this same value).
	sessions, err := admission.NewPxSessions(admission.PxSessionsConfig{Edge: e.edgeID, Every: every, Grace: signalling.Default().LeaseGrace},
		admission.PxSessionsDeps{Admitter: pxa, Watch: watch, Meter: meter, KV: kv, Now: now, Logger: e.logFor("pxstream-admission")})
	if err != nil {
		return err
	}
	px := &pxAdmission{a: pxa, seats: seats, room: room, events: events, m: m, sessions: sessions, now: now}
	resolver := admission.NewResolver(policy, fleet, now, m)
	a := &admissionPlane{
		policy:    policy,
		room:      room,
		handshake: admission.NewHandshakeAdmitter(policy, leases, room, now, m),
		px:        px,
		handlers:  &admission.Handlers{Policy: policy, Resolver: resolver, Room: room, Signer: e.signer, Surge: surge},
		meter:     meter,
		surge:     surge,
	}
	keeper := admission.NewLeaseKeeper(a.handshake) // one refresher for every realtime session's leases
	e.admitter = &realtimeAdmission{keep: keeper}
	e.runners = append(e.runners, keeper.Run)
	e.pxAdmitter = a.px
	e.runners = append(e.runners, sessions.Run)
	e.adm = a
	return nil
}

// auditWriter opens --audit-log for appending (stderr without one).
func (e *Edge) auditWriter() (io.Writer, error) {
	if e.cfg.AuditLog == "" {
		return os.Stderr, nil
	}
	f, err := os.OpenFile(e.cfg.AuditLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("%w: --audit-log: %w", ErrConfig, err)
	}
	e.closers = append(e.closers, f.Close)
	return f, nil
}

// mountAdmission mounts launch, waitlist and waiting-room routes; the room's
// guard stands in front of new launches. The admission routes are metered
// (latency, status) for the surge controller.
func (e *Edge) mountAdmission() {
	routes := http.NewServeMux()
	e.adm.handlers.Register(routes)
	e.mainMux.Handle("POST /api/v3/lilith/launch", e.metered("launch", e.adm.room.Guard(routes)))
	e.mainMux.Handle("/api/v3/lilith/waitlist", routes)
	e.mainMux.Handle("/api/v3/lilith/waitlist/", routes)
	e.mainMux.Handle("/api/v1/queue/", e.metered("queue", routes))
	// The waiting-room page: position, live wait estimate, and the Tier-2
	// fallback as a no-penalty exit.
	e.mainMux.Handle("/queue/", http.StripPrefix("/queue/", http.FileServerFS(web.Queue())))
}

// realtimeAdmission adapts the handshake admitter to the shard gateway's
// seam; the edge's one LeaseKeeper keeps the session's leases alive while
// it lives.
type realtimeAdmission struct {
	keep *admission.LeaseKeeper
}

var _ shard.Admitter = (*realtimeAdmission)(nil)

func (a *realtimeAdmission) Admit(ctx context.Context, r shard.AdmitRequest) (func(), error) {
	return a.keep.Admit(ctx, admission.HandshakeRequest{
		SessionID: newHolderID(), Access: r.Access, ClientIP: addrIP(r.RemoteAddr),
		ResumeValid: r.Resume, AdmissionTicket: r.Hello.GetAdmissionTicket(),
	})
}

// streamingFleet is the matchmaker's topology and load as admission reads
// them (admission.FleetView); false until the Pixel Streaming plane is
// built, or without one.
func (e *Edge) streamingFleet() (admission.FleetSnapshot, bool) {
	if e.px == nil {
		return admission.FleetSnapshot{}, false
	}
	topo := e.px.mm.Topology()
	rows := map[string]matchmaker.DashboardPOP{}
	for _, row := range e.px.mm.Dashboard().POPs {
		rows[row.ID] = row
	}
	snap := admission.FleetSnapshot{FreeTierMaxUtilBP: topo.FreeTierMaxUtilBP, POPs: make([]admission.FleetPOP, len(topo.POPs))}
	for i, pop := range topo.POPs {
		row := rows[pop.ID]
		snap.POPs[i] = admission.FleetPOP{ID: pop.ID, RTTMs: pop.RTTMs, MaxSessions: pop.MaxSessions,
			PaidHeadroomSessions: pop.PaidHeadroomSessions, Priority: pop.Priority, Codecs: pop.Codecs,
			Sessions: row.Sessions, IdleStreamers: row.Streamers["idle"], UtilisationBP: row.UtilisationBP}
	}
	return snap, true
}

func newHolderID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "h_" + hex.EncodeToString(b[:])
}

func addrIP(a net.Addr) netip.Addr {
	if a == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
