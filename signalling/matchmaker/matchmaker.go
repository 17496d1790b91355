package matchmaker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/prometheus/client_golang/prometheus"
)

// FirstFrameBudgetMs is the reference's expectedFirstFrameBudgetMs.
const FirstFrameBudgetMs = 8000

// Score weights (reference select_pxstream_pop).
const (
	weightRTT       = 100
	weightUtilBP    = 3
	weightQueued    = 25
	weightWorkers   = 4
	maxWorkerCredit = 500
	weightPriority  = 75
)

// Config configures the matchmaker.
type Config struct {
	// SessionTTL is the JWT and lease lifetime (clamped to 30-900 s).
	SessionTTL time.Duration `json:"session_ttl"`
	// FallbackURL is sent with every answer and refusal.
	FallbackURL string `json:"fallback_url"`
	// SignallingPath is the player signalling path on the request's host.
	SignallingPath string `json:"signalling_path"`
	// PublicSignallingURL, when set, replaces ws(s)://<Host><SignallingPath>
	// (behind a proxy that rewrites Host).
	PublicSignallingURL string `json:"public_signalling_url"`
	// TrustForwardedProto makes X-Forwarded-Proto: https select wss.
	TrustForwardedProto bool `json:"trust_forwarded_proto"`
	// RequireAccessToken refuses requests without a bearer access token.
	RequireAccessToken bool `json:"require_access_token"`
	// MaxRequestBytes bounds the JSON body.
	MaxRequestBytes int64 `json:"max_request_bytes"`
	// LeaseMemory is how long a lease's codec is remembered after the lease
	// deadline for OfferCheck (renegotiation, late offers).
	LeaseMemory time.Duration `json:"lease_memory"`
	// LoadCacheTTL reuses one registry snapshot's per-POP counts for
	// scoring for this long (0 = snapshot on every match). Leases stay
	// atomic in the registry; the matchmaker adjusts the cached counts for
	// its own leases and drops the cache when a lease loses a race.
	LoadCacheTTL time.Duration `json:"load_cache_ttl"`
}

// Default is the dev configuration.
func Default() Config {
	return Config{
		SessionTTL:          auth.PxSessionDefaultTTL,
		FallbackURL:         "/lilith/fallback",
		SignallingPath:      "/v6/pxstream/signalling",
		TrustForwardedProto: false,
		MaxRequestBytes:     16 << 10,
		LeaseMemory:         15 * time.Minute,
		LoadCacheTTL:        100 * time.Millisecond,
	}
}

// Validate checks the config.
func (c Config) Validate() error {
	switch {
	case c.SessionTTL < 0:
		return fmt.Errorf("%w: negative session ttl", ErrConfig)
	case c.FallbackURL == "":
		return fmt.Errorf("%w: fallback url required", ErrConfig)
	case !strings.HasPrefix(c.SignallingPath, "/") && c.PublicSignallingURL == "":
		return fmt.Errorf("%w: signalling path %q must start with /", ErrConfig, c.SignallingPath)
	case c.PublicSignallingURL != "" && !strings.HasPrefix(c.PublicSignallingURL, "ws://") && !strings.HasPrefix(c.PublicSignallingURL, "wss://"):
		return fmt.Errorf("%w: public signalling url %q must be ws:// or wss://", ErrConfig, c.PublicSignallingURL)
	case c.MaxRequestBytes <= 0:
		return fmt.Errorf("%w: max request bytes must be positive", ErrConfig)
	case c.LeaseMemory < 0 || c.LoadCacheTTL < 0:
		return fmt.Errorf("%w: negative lease memory or load cache ttl", ErrConfig)
	case c.LoadCacheTTL > 5*time.Second:
		return fmt.Errorf("%w: load cache ttl %v above 5s", ErrConfig, c.LoadCacheTTL)
	}
	return nil
}

// Deps are the matchmaker's collaborators.
type Deps struct {
	Fleet    Fleet        // required
	Signer   *auth.Signer // required
	Topology *Topology    // nil = DefaultTopology()
	Admitter Admitter     // nil = admit all
	Logger   *slog.Logger // nil = slog.Default()
	Now      func() time.Time
	// Registerer receives the egbe_pxstream_pop_* metrics (nil = none).
	Registerer prometheus.Registerer
	// ICEServers, when set, gives the match answer's ice_servers
	// ({"iceServers":[...]}, TURN credentials) for the session's subject
	// (its session id when the request names no one), the session token's
	// expiry and the Host the request reached.
	ICEServers func(subject string, tokenExpiry time.Time, host string) json.RawMessage
	// Seats, when set, adds concert seats to the dashboard.
	Seats SeatBoard
}

// Matchmaker selects POPs and leases streamers.
type Matchmaker struct {
	cfg      Config           // immutable after New
	topo     *Topology        // immutable after New
	fleet    Fleet            // immutable after New
	signer   *auth.Signer     // immutable after New
	admitter Admitter         // immutable after New
	log      *slog.Logger     // immutable after New
	now      func() time.Time // immutable after New
	metrics  *metrics         // immutable after New
	popIndex map[string]int   // immutable after New: POP id -> topo.POPs index
	seats    SeatBoard        // immutable after New; nil: no concerts

	// ice is Deps.ICEServers (immutable after New; nil = none).
	ice func(subject string, tokenExpiry time.Time, host string) json.RawMessage

	mu     sync.Mutex
	leases map[string]leaseRec // guarded by mu: session id -> lease
	order  []leaseKey          // guarded by mu: FIFO of leases by forget time

	cacheMu sync.Mutex
	cache   []load    // guarded by cacheMu; nil = none
	cacheAt time.Time // guarded by cacheMu
}

type leaseRec struct {
	codec, pop, streamer string
	forget               time.Time
	seat                 bool // a concert seat: no streamer leased
}

type leaseKey struct {
	session string
	forget  time.Time
}

// New builds a matchmaker.
func New(cfg Config, deps Deps) (*Matchmaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Fleet == nil || deps.Signer == nil {
		return nil, fmt.Errorf("%w: fleet and signer required", ErrConfig)
	}
	topo := deps.Topology
	if topo == nil {
		topo = DefaultTopology()
	}
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	m := &Matchmaker{
		cfg: cfg, topo: topo, fleet: deps.Fleet, signer: deps.Signer, admitter: deps.Admitter,
		log: deps.Logger, now: deps.Now, leases: make(map[string]leaseRec), ice: deps.ICEServers, seats: deps.Seats,
		popIndex: make(map[string]int, len(topo.POPs)),
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	m.log = m.log.With("component", "pxstream-matchmaker")
	if m.now == nil {
		m.now = time.Now
	}
	for i, p := range topo.POPs {
		m.popIndex[p.ID] = i
	}
	m.metrics = newMetrics(m)
	if deps.Registerer != nil {
		if err := m.metrics.register(deps.Registerer); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Topology is the topology in use.
func (m *Matchmaker) Topology() *Topology { return m.topo }

// Match is a successful match.
type Match struct {
	SessionID     string
	POP           string
	StreamerID    string
	Codec         string
	Token         string
	ExpiresAt     time.Time
	QueuePosition int
	RTTMs         int
	Score         int64
	// Seat is set for a concert match: StreamerID is the SFU's id.
	Seat *Seat
}

// codec indices for the fixed per-POP counters.
const (
	codecH264 = iota
	codecAV1
	codecVP8
	codecVP9
	numCodecs
)

var codecNames = [numCodecs]string{"H264", "AV1", "VP8", "VP9"}

func codecIndex(c string) int {
	for i, n := range codecNames {
		if c == n {
			return i
		}
	}
	for i, n := range codecNames {
		if strings.EqualFold(c, n) {
			return i
		}
	}
	return -1
}

func normCodec(c string) (string, bool) {
	i := codecIndex(c)
	if i < 0 {
		return "", false
	}
	return codecNames[i], true
}

// load is one POP's live load, counted from the registry.
type load struct {
	registered  int
	sessions    int // leased + streaming
	idle        int
	idleByCodec [numCodecs]int
	leased      int
	streaming   int
	other       int
}

func (l *load) utilBP(maxSessions int) int {
	return l.sessions * 10_000 / maxSessions
}

// scoringLoads returns per-POP loads for scoring, from the cache when it is
// fresh (Config.LoadCacheTTL). The result is the caller's.
func (m *Matchmaker) scoringLoads(now time.Time) []load {
	if m.cfg.LoadCacheTTL <= 0 {
		return m.loads()
	}
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	if m.cache == nil || now.Sub(m.cacheAt) >= m.cfg.LoadCacheTTL || now.Before(m.cacheAt) {
		m.cache, m.cacheAt = m.loads(), now
	}
	return slices.Clone(m.cache)
}

// noteLease counts our own lease into the cached loads; lost drops the
// cache (someone else took the streamer we counted as idle).
func (m *Matchmaker) noteLease(pop, codec string, lost bool) {
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	if m.cache == nil {
		return
	}
	if lost {
		m.cache = nil
		return
	}
	l := &m.cache[m.popIndex[pop]]
	l.sessions++
	l.leased++
	l.idle--
	// A multi-codec streamer left every codec's idle count; without codec
	// detail decrement the leased codec only and let the TTL correct it.
	if ci := codecIndex(codec); ci >= 0 && l.idleByCodec[ci] > 0 {
		l.idleByCodec[ci]--
	}
}

// loads counts the fleet per topology POP (index-aligned with topo.POPs).
// Streamers in POPs the topology does not know are ignored.
func (m *Matchmaker) loads() []load {
	ls := make([]load, len(m.topo.POPs))
	lastPOP, lastIdx := "", -1
	for _, s := range m.fleet.Streamers() {
		i := lastIdx
		if s.POP != lastPOP {
			var ok bool
			if i, ok = m.popIndex[s.POP]; !ok {
				i = -1
			}
			lastPOP, lastIdx = s.POP, i
		}
		if i < 0 {
			continue
		}
		l := &ls[i]
		l.registered++
		switch s.State {
		case StateIdle:
			l.idle++
			for _, c := range s.Codecs {
				if ci := codecIndex(c); ci >= 0 {
					l.idleByCodec[ci]++
				}
			}
		case StateLeased:
			l.sessions++
			l.leased++
		case StateStreaming:
			l.sessions++
			l.streaming++
		default:
			l.other++
		}
	}
	return ls
}

// Rejections (why a POP is not a candidate), reported with no_pop_available.
const (
	rejectHealth    = "not_accepting"
	rejectRTT       = "rtt_unknown"
	rejectLatency   = "latency_over_budget"
	rejectResidency = "residency"
	rejectCodec     = "codec_unsupported"
	rejectNoIdle    = "no_idle_streamer"
	rejectFull      = "no_session_slot"
	rejectHeadroom  = "paid_headroom"
	rejectBackoff   = "free_tier_backpressure"
	rejectReserved  = "event_reserved"
)

type candidate struct {
	pop      *POP
	codec    string
	rtt      int
	utilBP   int
	sessions int // leased + streaming
	queued   int
	avail    int
	prio     int
	home     bool
	score    int64
}

// score is the reference's blend; lower is better.
func score(rttMs, utilBP, queued, available, priority int) int64 {
	return int64(rttMs)*weightRTT + int64(utilBP)*weightUtilBP + int64(queued)*weightQueued -
		int64(min(available, maxWorkerCredit))*weightWorkers - int64(priority)*weightPriority
}

// better orders candidates: home before cross-border, then score, RTT,
// utilisation, POP id.
func better(a, b *candidate) int {
	if a.home != b.home {
		if a.home {
			return -1
		}
		return 1
	}
	return cmp.Or(
		cmp.Compare(a.score, b.score),
		cmp.Compare(a.rtt, b.rtt),
		cmp.Compare(a.utilBP, b.utilBP),
		strings.Compare(a.pop.ID, b.pop.ID),
	)
}

// residency reports whether a client in clientScope may use a POP in
// popScope, and whether that is "home" (preferred) or cross-border.
// EU stays in the EU; any other cross-border hop needs consent.
func residency(clientScope, popScope string, consent bool) (allowed, home bool) {
	switch {
	case popScope == clientScope, popScope == ScopeGlobal, clientScope == ScopeGlobal:
		return true, true
	case clientScope == ScopeEU:
		return false, false
	case consent:
		return true, false
	}
	return false, false
}

// candidates evaluates every POP for req (codecs normalised). rejected is
// index-aligned with topo.POPs: why each non-candidate POP was dropped.
// eligible holds the utilisation of every POP that passed the checks
// before the free-tier cuts. Scores exclude admission's priority boost
// (rank adds it).
func (m *Matchmaker) candidates(req *Request, scope string, ls []load) (cands []candidate, rejected []string, eligible []int) {
	cands = make([]candidate, 0, len(m.topo.POPs))
	rejected = make([]string, len(m.topo.POPs))
	eligible = make([]int, 0, len(m.topo.POPs))
	free := req.Entitlement != EntitlementPaid
	for i := range m.topo.POPs {
		p := &m.topo.POPs[i]
		l := &ls[i]
		if p.Health != HealthAccepting {
			rejected[i] = rejectHealth
			continue
		}
		allowed, home := residency(scope, p.Residency, req.CrossRegionConsent)
		if !allowed {
			rejected[i] = rejectResidency
			continue
		}
		rtt, ok := p.RTTMs[req.ClientRegion]
		if !ok {
			rejected[i] = rejectRTT
			continue
		}
		if rtt > m.topo.LatencyBudgetMs {
			rejected[i] = rejectLatency
			continue
		}
		codec, supported := "", false
		for _, c := range req.Codecs {
			if !slices.Contains(p.Codecs, c) {
				continue
			}
			supported = true
			if l.idleByCodec[codecIndex(c)] > 0 {
				codec = c
				break
			}
		}
		if !supported {
			rejected[i] = rejectCodec
			continue
		}
		util := l.utilBP(p.MaxSessions)
		eligible = append(eligible, util)
		switch {
		case codec == "":
			rejected[i] = rejectNoIdle
			continue
		case l.sessions >= p.MaxSessions:
			rejected[i] = rejectFull
			continue
		case free && l.sessions+1 > p.MaxSessions-p.PaidHeadroomSessions:
			rejected[i] = rejectHeadroom
			continue
		case free && util >= m.topo.FreeTierMaxUtilBP:
			rejected[i] = rejectBackoff
			continue
		}
		cands = append(cands, candidate{
			pop: p, codec: codec, rtt: rtt, utilBP: util, sessions: l.sessions,
			avail: l.idleByCodec[codecIndex(codec)], prio: p.Priority, home: home,
		})
	}
	return cands, rejected, eligible
}

// rank applies admission's decision: it drops the POPs whose free slots
// are held back for others, then adds the priority boost and the queued
// counts, scores and sorts what is left.
func (m *Matchmaker) rank(cands []candidate, d Decision, free bool, rejected []string) []candidate {
	out := cands[:0]
	var fresh []load
	if len(d.HeldBack) > 0 {
		// A reservation is a promise: judge it on the registry as it is
		// now, not on the scoring cache (which misses other edges' leases
		// for up to load_cache_ttl).
		fresh = m.loads()
	}
	for _, c := range cands {
		if held := d.HeldBack[c.pop.ID]; held > 0 {
			c.sessions = fresh[m.popIndex[c.pop.ID]].sessions
			slots := c.pop.MaxSessions - held
			if free {
				slots -= c.pop.PaidHeadroomSessions
			}
			if c.sessions+1 > slots {
				rejected[m.popIndex[c.pop.ID]] = rejectReserved
				continue
			}
		}
		c.prio += d.PriorityBoost[c.pop.ID]
		c.queued = d.Queued[c.pop.ID]
		c.score = score(c.rtt, c.utilBP, c.queued, c.avail, c.prio)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b candidate) int { return better(&a, &b) })
	return out
}

// validate checks and normalises a decoded request.
func (m *Matchmaker) validate(req *Request) (scope string, r *Refusal) {
	if req.ClientRegion == "" {
		return "", badField("client_region", "client_region is required")
	}
	scope, ok := m.topo.Regions[req.ClientRegion]
	if !ok {
		r := refuse(ReasonUnknownRegion, http.StatusBadRequest, "unknown client_region %q", req.ClientRegion)
		r.Field = "client_region"
		return "", r
	}
	if len(req.Codecs) == 0 || len(req.Codecs) > numCodecs {
		return "", badField("codecs", "codecs must list 1 to %d codecs", numCodecs)
	}
	for i, c := range req.Codecs {
		n, ok := normCodec(c)
		if !ok {
			r := refuse(ReasonUnsupportedCodec, http.StatusBadRequest, "codecs[%d]: unsupported codec %q", i, c)
			r.Field = "codecs"
			return "", r
		}
		req.Codecs[i] = n
	}
	switch req.Entitlement {
	case EntitlementFree, EntitlementPaid:
	case "":
		return "", badField("entitlement", "entitlement is required (free or paid)")
	default:
		return "", badField("entitlement", "entitlement %q is not free or paid", req.Entitlement)
	}
	return scope, nil
}

// Match runs admission, selects a POP, leases an idle streamer and mints
// the session JWT. A refusal is returned as *Refusal.
func (m *Matchmaker) Match(ctx context.Context, req Request) (Match, error) {
	scope, r := m.validate(&req)
	if r != nil {
		return Match{}, m.refused(r)
	}
	now := m.now()
	sid, err := newSessionID()
	if err != nil {
		return Match{}, m.refused(refuse(ReasonInternal, http.StatusInternalServerError, "session id: %v", err))
	}
	req.SessionID = sid
	cands, rejected, eligible := m.candidates(&req, scope, m.scoringLoads(now))
	req.EligiblePOPUtilBP = eligible
	var dec Decision
	if m.admitter != nil {
		d, err := m.admitter.Admit(ctx, req)
		if err != nil {
			var rf *Refusal
			if errors.As(err, &rf) {
				return Match{}, m.refused(rf)
			}
			m.log.Warn("admission failed", "session", sid, "err", err)
			return Match{}, m.refused(refuse(ReasonAdmissionUnavailable, http.StatusServiceUnavailable, "admission unavailable"))
		}
		if d.Refusal != nil {
			return Match{}, m.refused(d.Refusal)
		}
		dec = d
	}
	admitted := false
	defer func() {
		if !admitted && dec.Release != nil {
			dec.Release()
		}
	}()
	ttl := auth.ClampPxSessionTTL(m.cfg.SessionTTL)
	until := now.Add(ttl)
	if dec.Seat != nil {
		res, rf := m.matchSeat(&req, dec, cands, rejected, now, ttl)
		if rf != nil {
			return Match{}, m.refused(rf)
		}
		admitted = true
		return res, nil
	}
	cands = m.rank(cands, dec, req.Entitlement != EntitlementPaid, rejected)
	for i := range cands {
		c := &cands[i]
		streamer, err := m.fleet.LeaseIdle(c.pop.ID, c.codec, sid, until)
		if errors.Is(err, ErrNoIdleStreamer) {
			// Lost a race for the last idle streamer: next best POP.
			m.noteLease(c.pop.ID, c.codec, true)
			rejected[m.popIndex[c.pop.ID]] = rejectNoIdle
			continue
		}
		if err != nil {
			m.log.Warn("lease failed", "pop", c.pop.ID, "err", err)
			return Match{}, m.refused(refuse(ReasonFleetUnavailable, http.StatusServiceUnavailable, "streamer registry unavailable"))
		}
		tok, err := m.signer.IssuePxSession(auth.PxSession{
			SessionID: sid, Subject: req.Subject, POP: c.pop.ID, Codec: c.codec, StreamerID: streamer,
		}, ttl)
		if err != nil {
			m.fleet.Release(sid)
			m.log.Error("mint session token", "err", err)
			return Match{}, m.refused(refuse(ReasonInternal, http.StatusInternalServerError, "cannot mint session token"))
		}
		admitted = true
		m.noteLease(c.pop.ID, c.codec, false)
		m.remember(sid, leaseRec{codec: c.codec, pop: c.pop.ID, streamer: streamer, forget: until.Add(m.cfg.LeaseMemory)}, now)
		m.metrics.matched(c.pop.ID, c.codec)
		res := Match{
			SessionID: sid, POP: c.pop.ID, StreamerID: streamer, Codec: c.codec, Token: tok,
			ExpiresAt: until, QueuePosition: c.queued, RTTMs: c.rtt, Score: c.score,
		}
		if dec.Matched != nil {
			dec.Matched(res)
		}
		return res, nil
	}
	rf := refuse(ReasonNoPOPAvailable, http.StatusServiceUnavailable, "no POP can serve %s (%s) now", req.ClientRegion, req.Entitlement)
	rf.Rejected = make(map[string]string, len(rejected))
	for i, why := range rejected {
		if why != "" {
			rf.Rejected[m.topo.POPs[i].ID] = why
		}
	}
	rf.RetryAfter = 5 * time.Second
	return Match{}, m.refused(rf)
}

// matchSeat completes a concert match: admission took a seat on an SFU,
// so no streamer is leased. The concert's POP must still be one this
// client may use (health, residency, RTT within budget) and the player
// must accept the stream's codec; the worker-capacity checks (idle
// streamer, session slots, paid headroom, backpressure) do not apply, as
// a seat takes no GPU worker.
func (m *Matchmaker) matchSeat(req *Request, dec Decision, cands []candidate, rejected []string, now time.Time, ttl time.Duration) (Match, *Refusal) {
	seat := dec.Seat
	noPOP := func(why string) *Refusal {
		rf := refuse(ReasonNoPOPAvailable, http.StatusServiceUnavailable, "concert %s at %s cannot serve %s", seat.Event, seat.POP, req.ClientRegion)
		rf.Rejected = map[string]string{seat.POP: why}
		return rf
	}
	i, ok := m.popIndex[seat.POP]
	if !ok {
		return Match{}, noPOP(rejectHealth)
	}
	var c *candidate
	for j := range cands {
		if cands[j].pop.ID == seat.POP {
			c = &cands[j]
		}
	}
	if c == nil {
		switch why := rejected[i]; why {
		case rejectHealth, rejectResidency, rejectRTT, rejectLatency, rejectCodec:
			return Match{}, noPOP(why)
		}
		// Rejected for worker capacity only: rebuild what the score needs.
		p := &m.topo.POPs[i]
		_, home := residency(m.topo.Regions[req.ClientRegion], p.Residency, req.CrossRegionConsent)
		c = &candidate{pop: p, rtt: p.RTTMs[req.ClientRegion], home: home}
	}
	if !slices.Contains(req.Codecs, seat.Codec) || !slices.Contains(c.pop.Codecs, seat.Codec) {
		return Match{}, noPOP(rejectCodec)
	}
	sid := req.SessionID
	tok, err := m.signer.IssuePxSession(auth.PxSession{
		SessionID: sid, Subject: req.Subject, POP: seat.POP, Codec: seat.Codec, StreamerID: seat.SFU,
	}, ttl)
	if err != nil {
		m.log.Error("mint session token", "err", err)
		return Match{}, refuse(ReasonInternal, http.StatusInternalServerError, "cannot mint session token")
	}
	until := now.Add(ttl)
	m.remember(sid, leaseRec{codec: seat.Codec, pop: seat.POP, streamer: seat.SFU, forget: until.Add(m.cfg.LeaseMemory), seat: true}, now)
	m.metrics.matched(seat.POP, seat.Codec)
	res := Match{
		SessionID: sid, POP: seat.POP, StreamerID: seat.SFU, Codec: seat.Codec, Token: tok,
		ExpiresAt: until, QueuePosition: dec.Queued[seat.POP], RTTMs: c.rtt, Seat: seat,
	}
	if dec.Matched != nil {
		dec.Matched(res)
	}
	return res, nil
}

func (m *Matchmaker) refused(r *Refusal) *Refusal {
	m.metrics.refused(r.Reason)
	return r
}

// Release ends a session's lease early (the player gave up).
func (m *Matchmaker) Release(sessionID string) {
	m.mu.Lock()
	rec, ok := m.leases[sessionID]
	delete(m.leases, sessionID)
	m.mu.Unlock()
	if ok && rec.seat {
		return // a concert seat: no streamer is leased (admission frees the seat)
	}
	m.fleet.Release(sessionID)
	if !ok {
		return
	}
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	if m.cache == nil {
		return
	}
	l := &m.cache[m.popIndex[rec.pop]]
	if l.leased > 0 {
		l.leased--
		l.sessions--
		l.idle++
		if ci := codecIndex(rec.codec); ci >= 0 {
			l.idleByCodec[ci]++
		}
	}
}

func (m *Matchmaker) remember(sid string, rec leaseRec, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Prune: forget times are monotonic in match order (constant TTL), so
	// the FIFO head is always the oldest.
	n := 0
	for n < len(m.order) && !m.order[n].forget.After(now) {
		if l, ok := m.leases[m.order[n].session]; ok && !l.forget.After(now) {
			delete(m.leases, m.order[n].session)
		}
		n++
	}
	m.order = m.order[n:] // append reallocates; the dropped prefix is freed then
	m.leases[sid] = rec
	m.order = append(m.order, leaseKey{sid, rec.forget})
}

// leaseCodec returns the codec leased for sessionID.
func (m *Matchmaker) leaseCodec(sessionID string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.leases[sessionID]
	return l.codec, ok
}

func newSessionID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "pxs_" + hex.EncodeToString(b[:]), nil
}
