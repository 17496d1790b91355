package signalling

// Cluster makes a Server one edge of a fleet sharing state (state/): the
// registry is the fleet's (state.Streamers), players on this edge signal
// with streamers on other edges through per-edge inboxes (state.Inbox,
// relay.go), and the fleet's membership (state.Members) says which peer
// edges are alive. README.md, "Fleet", explains the design. This package
// talks to no store itself: every Redis call is state's.

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oshun/egbe-edge/state"
)

// Cluster defaults (NewCluster). Every one is a field tests shorten.
const (
	// DefaultClusterTTL is how long a streamer registration outlives the
	// last heartbeat of its edge, and how long a peer edge must be missing
	// from the membership before its cross-edge sessions are closed.
	DefaultClusterTTL = 15 * time.Second
	// relayBatch is the most entries one inbox append carries.
	relayBatch = 64
)

// FleetState is what a clustered Server shares with the other edges of
// its fleet. The edge that owns them beats its own membership
// (redisstate.Members.Run: state.RunHeartbeat); the Cluster only asks it
// about peers.
type FleetState struct {
	Streamers state.Streamers    // the fleet's registry
	Inbox     state.Inbox        // cross-edge delivery
	Members   state.Members      // which edges are alive
	Health    state.Availability // nil: always available (memory)
}

// Cluster is a Server's membership of a fleet. Build one per Server with
// NewCluster and pass it as Deps.Cluster; the Server owns its goroutines
// from New to Close. The stores stay the caller's.
type Cluster struct {
	edge string       // immutable
	log  *slog.Logger // immutable
	fs   FleetState   // immutable

	// Timings: immutable after attach (tests set them before New).
	ttl   time.Duration // registration TTL and peer grace
	beat  time.Duration // heartbeat period (ttl/3)
	block time.Duration // inbox read wait
	probe time.Duration // retry period while the store is down

	srv  *Server // immutable after attach
	errs *prometheus.CounterVec

	attached atomic.Bool
	remote   atomic.Pointer[map[string]struct{}] // other edges' streamer ids (relay.go)
	crashed  atomic.Bool                         // tests: stop writing at once, as kill -9 would
	onCrash  func()                              // tests: what else a kill stops (the membership's beats)
	kick     chan struct{}
	ctx      context.Context // cancelled by stop
	cancel   context.CancelFunc
	stopOnce sync.Once
	wg       sync.WaitGroup // every cluster goroutine

	listMu sync.Mutex            // held across one fleet read (listStreamers)
	list   []state.FleetStreamer // guarded by listMu
	listAt time.Time             // guarded by listMu

	rmu      sync.Mutex
	links    map[*player]*link    // guarded by rmu: local players bound to remote streamers
	linkByID map[string]*link     // guarded by rmu: the same by player id
	proxies  map[string]*proxy    // guarded by rmu: remote players here, by edge+"\x00"+player id
	proxyOf  map[*player]*proxy   // guarded by rmu
	missing  map[string]time.Time // guarded by rmu: peer edge -> first seen not alive
	gen      uint64               // guarded by rmu: link generations
}

// NewCluster returns the fleet membership of the edge edgeID (unique in
// the fleet; stable across restarts is not required) on the stores of f.
// logger nil discards.
func NewCluster(edgeID string, f FleetState, logger *slog.Logger) (*Cluster, error) {
	if f.Streamers == nil || f.Inbox == nil || f.Members == nil {
		return nil, fmt.Errorf("%w: a cluster needs the fleet's streamers, inbox and members", ErrBadConfig)
	}
	if err := state.CheckEdgeID(edgeID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{
		edge: edgeID, fs: f, log: logger.With("component", "signalling-cluster", "edge", edgeID),
		probe: 250 * time.Millisecond, block: time.Second,
		kick:     make(chan struct{}, 1),
		links:    make(map[*player]*link),
		linkByID: make(map[string]*link),
		proxies:  make(map[string]*proxy),
		proxyOf:  make(map[*player]*proxy),
		missing:  make(map[string]time.Time),
	}
	c.setTTL(DefaultClusterTTL)
	return c, nil
}

// setTTL sets the registration TTL and the heartbeat (a third of it).
func (c *Cluster) setTTL(ttl time.Duration) {
	c.ttl, c.beat = ttl, ttl/3
}

// EdgeID is this edge's id in the fleet.
func (c *Cluster) EdgeID() string { return c.edge }

// playerBase seeds the Server's player counter so ids stay Player<n> and
// are unique in the fleet: 20 bits of the edge id's hash above 32 bits of
// counter (below 2^53, so a streamer that sends the id back as a JSON
// number keeps it exact).
func (c *Cluster) playerBase() uint64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(c.edge))
	return uint64(h.Sum32()&0xFFFFF) << 32
}

// attach binds c to s (New calls it last) and starts c's goroutines.
func (c *Cluster) attach(s *Server, reg prometheus.Registerer) error {
	if !c.attached.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: a Cluster serves one Server", ErrBadConfig)
	}
	c.errs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "egbe_pxstream_redis_errors_total",
		Help: "Calls of the signalling fleet to its shared store (Redis) that failed for want of it, by operation.",
	}, []string{"op"})
	links := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "egbe_pxstream_cross_edge_players",
		Help: "Players signalling across edges: local players linked to a streamer elsewhere, plus remote players proxied here.",
	}, func() float64 {
		c.rmu.Lock()
		defer c.rmu.Unlock()
		return float64(len(c.links) + len(c.proxyOf))
	})
	for _, col := range []prometheus.Collector{c.errs, links} {
		if err := reg.Register(col); err != nil {
			return fmt.Errorf("signalling: register metrics: %w", err)
		}
	}
	c.srv = s
	r := s.reg
	r.st, r.edge, r.ttl = c.fs.Streamers, c.edge, c.ttl
	r.usable, r.kick, r.failed, r.seen = c.usable, c.kickSync, c.count, c.noteFleet
	s.nextPlayer = c.playerBase()
	c.ctx, c.cancel = context.WithCancel(context.Background())
	ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
	last, err := c.fs.Inbox.End(ctx, c.edge)
	cancel()
	if err != nil {
		last = "" // the first read that reaches the store starts at its end
	}
	c.wg.Add(2)
	go c.syncLoop()
	go c.inboxLoop(last)
	return nil
}

// stop ends c's goroutines after flushing what they hold (the Server is
// closed by then). Idempotent.
func (c *Cluster) stop() {
	c.stopOnce.Do(func() {
		if c.cancel != nil {
			c.cancel()
		}
		// Links and proxies see ctx done and flush what they hold, once.
		c.wg.Wait()
	})
}

// crash makes c stop talking to the store at once, leaving its
// registrations to expire (tests: an edge killed with -9).
func (c *Cluster) crash() {
	c.crashed.Store(true)
	if c.onCrash != nil {
		c.onCrash()
	}
	c.stop()
}

// kickSync wakes the sync loop; it never blocks (called under Server.mu).
func (c *Cluster) kickSync() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// usable fails fast while the store is known to be down (state's
// availability tracker, shared with every other subsystem).
func (c *Cluster) usable() error {
	if c.crashed.Load() {
		return fmt.Errorf("%w: edge stopped", ErrFleetUnavailable)
	}
	if c.fs.Health != nil {
		if err := c.fs.Health.Available(); err != nil {
			return fmt.Errorf("%w: %w", ErrFleetUnavailable, err)
		}
	}
	return nil
}

func (c *Cluster) count(op string) { c.errs.WithLabelValues(op).Inc() }

// opContext bounds one synchronous call.
func (c *Cluster) opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

// sleep waits d or until c stops; false when stopping.
func (c *Cluster) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// ---- heartbeat and registry sync ----

// syncLoop pushes registry changes as they happen, and every beat
// re-registers all of this edge's streamers (which refreshes their TTL and
// restores a store that came back empty) and checks the peer edges. While
// the store is down it retries every probe period: a call let through by
// the availability tracker is then the probe that finds it back.
func (c *Cluster) syncLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.beat)
	defer t.Stop()
	full, lost := true, false
	for {
		if c.crashed.Load() {
			return
		}
		switch err := c.heartbeat(full); {
		case err != nil:
			c.count("heartbeat")
			if !lost {
				c.log.Warn("fleet store unreachable: cross-edge signalling and fleet leases refused until it returns", "err", err)
			}
			lost, full = true, true
		case lost:
			c.log.Info("fleet store reachable again; this edge's streamers re-registered")
			lost, full = false, false
		default:
			full = false
		}
		wait := c.beat
		if lost {
			wait = c.probe
		}
		pt := time.NewTimer(wait)
		select {
		case <-c.ctx.Done():
			pt.Stop()
			c.farewell()
			return
		case <-c.kick:
		case <-t.C:
			full = true
		case <-pt.C:
		}
		pt.Stop()
	}
}

// heartbeat syncs the registry; a full one also refreshes the view of
// other edges' streamers and checks the peers.
func (c *Cluster) heartbeat(full bool) error {
	ctx, cancel := context.WithTimeout(c.ctx, 2*opTimeout)
	defer cancel()
	if err := c.srv.reg.sync(ctx, full, c.srv.now()); err != nil {
		return err
	}
	if full {
		_, _ = c.fleetEntries() // refreshes the remote id view
		c.checkPeers(ctx)
	}
	return nil
}

// farewell, on a clean stop, unregisters what is left.
func (c *Cluster) farewell() {
	if c.crashed.Load() || c.usable() != nil {
		return
	}
	ctx, cancel := c.opContext()
	defer cancel()
	_ = c.srv.reg.sync(ctx, false, c.srv.now())
}

// ---- inbox ----

// inboxLoop reads this edge's inbox in order and dispatches each entry;
// outages are retried with backoff.
func (c *Cluster) inboxLoop(cursor string) {
	defer c.wg.Done()
	backoff := 50 * time.Millisecond
	for c.ctx.Err() == nil && !c.crashed.Load() {
		msgs, next, err := c.fs.Inbox.Read(c.ctx, c.edge, cursor, 256, c.block)
		if err != nil {
			if c.ctx.Err() != nil {
				return
			}
			c.count("inbox")
			if !c.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		cursor = next
		for _, m := range msgs {
			if c.crashed.Load() {
				break
			}
			e, err := decodeEntry(m)
			if err != nil {
				c.srv.met.drop(dropBadRelayEntry)
				c.log.Warn("inbox entry dropped", "err", err)
				continue
			}
			c.dispatch(e)
		}
	}
}
