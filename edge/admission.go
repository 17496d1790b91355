package edge

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/admission"
	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/shard"
	"github.com/oshun/egbe-edge/signalling/matchmaker"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/web"
)

// admissionPlane holds admission's pieces and the state behind them.
type admissionPlane struct {
	policy    *admission.Policy
	room      *admission.Room
	handshake *admission.HandshakeAdmitter
	px        *pxAdmission
	handlers  *admission.Handlers
}

// buildAdmission builds state (memory, or Redis with --redis-url), the
// admitters and the waiting room. It runs before the realtime and Pixel
// Streaming planes, which consume it through their admitter seams.
func (e *Edge) buildAdmission() error {
	policy := admission.DefaultPolicy()
	if e.cfg.PolicyFile != "" {
		p, err := admission.LoadPolicy(e.cfg.PolicyFile)
		if err != nil {
			return fmt.Errorf("%w: --policy: %w", ErrConfig, err)
		}
		policy = p
	}
	var (
		leases  state.Leases
		budgets state.Budgets
		queue   state.Queue
	)
	if e.cfg.RedisURL != "" {
		rdb, err := state.OpenRedis(e.cfg.RedisURL)
		if err != nil {
			return fmt.Errorf("%w: --redis-url: %w", ErrConfig, err)
		}
		e.closers = append(e.closers, rdb.Close)
		e.rdb = rdb
		e.board = state.NewRedisFleetBoard(rdb)
		e.runners = append(e.runners, e.publishFleet)
		leases = state.NewRedisLeases(rdb)
		budgets = state.NewRedisBudgets(rdb)
		// Only dev may create a fresh waiting room in an empty Redis: in prod
		// an empty Redis is lost state and the room fails closed until an
		// operator re-arms it.
		q, qerr := state.NewRedisQueue(e.lifetime, rdb, e.cfg.Mode == ModeDev)
		if qerr != nil {
			e.log.Warn("waiting-room state unavailable; the room stays closed until Redis answers and an operator re-arms it", "err", qerr)
		}
		queue = q
	} else {
		leases, budgets, queue = state.NewMemoryLeases(), state.NewMemoryBudgets(), state.NewMemoryQueue()
	}
	fleet := &fleetView{e: e}
	m, err := admission.NewMetrics(e.reg)
	if err != nil {
		return err
	}
	audit := admission.NewAuditor(os.Stderr, nil)
	room, err := admission.NewRoom(policy, admission.RoomDeps{
		Queue: queue, Signer: e.signer, Utilisation: fleet, Audit: audit, Metrics: m, Logger: e.base,
	})
	if err != nil {
		return err
	}
	resolver := admission.NewResolver(policy, fleet, nil, m)
	a := &admissionPlane{
		policy:    policy,
		room:      room,
		handshake: admission.NewHandshakeAdmitter(policy, leases, room, nil, m),
		px:        newPxAdmission(admission.NewAdmitter(policy, leases, budgets, audit, nil, m), policy),
		handlers:  &admission.Handlers{Policy: policy, Resolver: resolver, Room: room, Signer: e.signer},
	}
	keeper := admission.NewLeaseKeeper(a.handshake) // one refresher for every realtime session's leases
	e.admitter = &realtimeAdmission{keep: keeper}
	e.runners = append(e.runners, keeper.Run)
	e.pxAdmitter = a.px
	e.runners = append(e.runners, a.px.run)
	e.adm = a
	return nil
}

// mountAdmission mounts launch, waitlist and waiting-room routes; the room's
// guard stands in front of new launches.
func (e *Edge) mountAdmission() {
	routes := http.NewServeMux()
	e.adm.handlers.Register(routes)
	e.mainMux.Handle("POST /api/v3/lilith/launch", e.adm.room.Guard(routes))
	e.mainMux.Handle("/api/v3/lilith/waitlist", routes)
	e.mainMux.Handle("/api/v3/lilith/waitlist/", routes)
	e.mainMux.Handle("/api/v1/queue/", routes)
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

// pxAdmission adapts Pixel Streaming admission to the matchmaker's seam
// and keeps each granted lease alive while its match is live.
type pxAdmission struct {
	a   *admission.Admitter
	ttl time.Duration

	mu     sync.Mutex
	leases map[string]pxLease // guarded by mu: by Pixel Streaming session id
}

type pxLease struct {
	lease *admission.Lease
	until time.Time // the match's expiry; refreshed past it only while streaming
	live  bool      // a player is subscribed
}

func newPxAdmission(a *admission.Admitter, p *admission.Policy) *pxAdmission {
	return &pxAdmission{a: a, ttl: time.Duration(p.Pxstream.LeaseTTLMs) * time.Millisecond, leases: map[string]pxLease{}}
}

var _ matchmaker.Admitter = (*pxAdmission)(nil)

func (p *pxAdmission) Admit(ctx context.Context, r matchmaker.Request) (matchmaker.Decision, error) {
	subject := r.Subject
	if subject == "" {
		// Anonymous dev requests still count against the network cap.
		subject = "anon:" + r.SessionID
	}
	d, err := p.a.Admit(ctx, admission.PxRequest{SessionID: r.SessionID, Subject: subject, TenantID: r.TenantID,
		ClientIP: r.RemoteAddr, Paid: r.Entitlement == "paid", EligiblePopUtilBP: r.EligiblePOPUtilBP})
	if d.Action != "" && d.Action != admission.PxAdmit {
		return matchmaker.Decision{Refusal: &matchmaker.Refusal{Reason: matchmaker.Reason(d.Action), Status: d.HTTPStatus, Message: "pixel streaming admission: " + string(d.Action)}}, nil
	}
	if err != nil {
		return matchmaker.Decision{}, err
	}
	p.mu.Lock()
	// Until the match's session token lapses, the lease is held for the
	// player to connect; after that only while a player streams.
	p.leases[r.SessionID] = pxLease{lease: d.Lease, until: time.Now().Add(auth.PxSessionDefaultTTL)}
	p.mu.Unlock()
	return matchmaker.Decision{Release: func() { p.release(r.SessionID) }}, nil
}

// OnPlayerSubscribed, OnPlayerLeft and CheckOffer follow the broker so a
// streaming session's admission lease lives exactly as long as it streams.
func (p *pxAdmission) OnPlayerSubscribed(sessionID, _ string)  { p.setLive(sessionID, true) }
func (p *pxAdmission) OnPlayerLeft(sessionID string)           { p.setLive(sessionID, false) }
func (p *pxAdmission) CheckOffer(string, string, string) error { return nil }

func (p *pxAdmission) setLive(sid string, live bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l, ok := p.leases[sid]; ok {
		l.live = live
		if !live {
			// A reconnecting frontend has the broker's lease grace to come back.
			l.until = time.Now().Add(30 * time.Second)
		}
		p.leases[sid] = l
	}
}

func (p *pxAdmission) release(sid string) {
	p.mu.Lock()
	l, ok := p.leases[sid]
	delete(p.leases, sid)
	p.mu.Unlock()
	if ok && l.lease != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = l.lease.Release(ctx)
		cancel()
	}
}

// run refreshes live leases and releases the rest.
func (p *pxAdmission) run(ctx context.Context) error {
	t := time.NewTicker(max(p.ttl/3, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			p.mu.Lock()
			var refresh []*admission.Lease
			var expired []string
			for sid, l := range p.leases {
				if l.live || now.Before(l.until) {
					refresh = append(refresh, l.lease)
				} else {
					expired = append(expired, sid)
				}
			}
			p.mu.Unlock()
			for _, l := range refresh {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_ = l.Refresh(rctx)
				cancel()
			}
			for _, sid := range expired {
				p.release(sid)
			}
		}
	}
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

func (f *fleetView) PopCandidates(_ context.Context, clientRegion string) ([]admission.PopCandidate, error) {
	if f.e.px == nil {
		return nil, nil
	}
	byID := f.pops()
	var out []admission.PopCandidate
	for _, pop := range f.e.px.mm.Topology().POPs {
		rtt, known := pop.RTTMs[clientRegion]
		if !known {
			continue
		}
		row := byID[pop.ID]
		out = append(out, admission.PopCandidate{PopID: pop.ID, RTTMs: float64(rtt), AvailableWorkers: row.Streamers["idle"],
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
