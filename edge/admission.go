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
	"sync"
	"time"

	"github.com/oshun/egbe-edge/admission"
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
		leases  state.Leases
		budgets state.Budgets
		queue   state.Queue
		tallies state.Tallies
		kv      state.KV
		seats   state.Seats
	)
	if conn := e.redis; conn != nil {
		e.runners = append(e.runners, e.publishFleet)
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
	fleet := &fleetView{e: e}
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

// fleetView reads the live Pixel Streaming fleet for admission: launch
// candidates per client region and utilisation per POP. The waiting room
// asks on every join and poll, so the matchmaker's dashboard (a registry
// snapshot; a Redis script in a fleet) is reused for fleetViewTTL.
type fleetView struct {
	e *Edge

	mu   sync.Mutex
	rows map[string]matchmaker.DashboardPOP // guarded by mu
	at   time.Time                          // guarded by mu: when rows were read
}

const fleetViewTTL = time.Second

func (f *fleetView) pops() map[string]matchmaker.DashboardPOP {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rows != nil && time.Since(f.at) < fleetViewTTL {
		return f.rows
	}
	rows := map[string]matchmaker.DashboardPOP{}
	for _, row := range f.e.px.mm.Dashboard().POPs {
		rows[row.ID] = row
	}
	f.rows, f.at = rows, time.Now()
	return rows
}

func (f *fleetView) PopCandidates(_ context.Context, clientRegion string, paid bool) ([]admission.PopCandidate, error) {
	if f.e.px == nil {
		return nil, nil
	}
	byID := f.pops()
	topo := f.e.px.mm.Topology()
	var out []admission.PopCandidate
	for _, pop := range topo.POPs {
		rtt, known := pop.RTTMs[clientRegion]
		if !known {
			continue
		}
		row := byID[pop.ID]
		// What the matchmaker would lease to this caller: a full POP has
		// nothing; a free caller gets nothing at or past the free tier's
		// backpressure or inside the paid headroom.
		avail := row.Streamers["idle"]
		switch {
		case row.Sessions >= pop.MaxSessions:
			avail = 0
		case !paid && (row.UtilisationBP >= topo.FreeTierMaxUtilBP || row.Sessions+1 > pop.MaxSessions-pop.PaidHeadroomSessions):
			avail = 0
		}
		out = append(out, admission.PopCandidate{PopID: pop.ID, RTTMs: float64(rtt), AvailableWorkers: avail,
			ProgrammingPriority: pop.Priority, Codecs: pop.Codecs})
	}
	return out, nil
}

func (f *fleetView) RegionUtilisationBP(popRegion string) (int, bool) {
	if f.e.px == nil {
		return 0, false
	}
	row, ok := f.pops()[popRegion]
	return row.UtilisationBP, ok
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
