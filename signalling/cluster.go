package signalling

// Cluster makes a Server one edge of a fleet sharing one Redis: the
// registry moves to Redis (redisstore.go) and players on this edge signal
// with streamers on other edges through per-edge inbox streams (relay.go).
// README.md, "Fleet", explains the design.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Cluster defaults (NewRedisCluster). Every one is a field tests shorten.
const (
	// DefaultClusterTTL is how long a streamer registration and an edge's
	// liveness key outlive the last heartbeat of their edge.
	DefaultClusterTTL = 15 * time.Second
	// maxEdgeIDBytes bounds an edge id (it is part of Redis keys and logs).
	maxEdgeIDBytes = 128
	// inboxMaxLen bounds an inbox stream (approximate trimming).
	inboxMaxLen = 100_000
	// relayBatch is the most entries one pipeline carries.
	relayBatch = 64
)

// Cluster is a Server's membership of a fleet on Redis. Build one per
// Server with NewRedisCluster and pass it as Deps.Cluster; the Server owns
// its goroutines from New to Close. The Redis client stays the caller's.
type Cluster struct {
	rdb  redis.UniversalClient // immutable
	edge string                // immutable
	log  *slog.Logger          // immutable

	// Timings: immutable after attach (tests set them before New).
	ttl       time.Duration // registration and liveness TTL
	beat      time.Duration // heartbeat period (ttl/3)
	block     time.Duration // XREAD BLOCK
	opTimeout time.Duration // one synchronous Redis call
	probe     time.Duration // re-check period while Redis is down

	srv   *Server     // immutable after attach
	store *redisStore // immutable after attach
	errs  *prometheus.CounterVec

	attached atomic.Bool
	remote   atomic.Pointer[map[string]struct{}] // other edges' streamer ids (relay.go)
	down     atomic.Bool                         // the last Redis call failed for want of Redis
	crashed  atomic.Bool                         // tests: stop writing at once, as kill -9 would
	kick     chan struct{}
	ctx      context.Context // cancelled by stop
	cancel   context.CancelFunc
	stopOnce sync.Once
	wg       sync.WaitGroup // every cluster goroutine

	listMu sync.Mutex   // held across one fleet read (listStreamers)
	list   []fleetEntry // guarded by listMu
	listAt time.Time    // guarded by listMu

	rmu      sync.Mutex
	links    map[*player]*link    // guarded by rmu: local players bound to remote streamers
	linkByID map[string]*link     // guarded by rmu: the same by player id
	proxies  map[string]*proxy    // guarded by rmu: remote players here, by edge+"\x00"+player id
	proxyOf  map[*player]*proxy   // guarded by rmu
	missing  map[string]time.Time // guarded by rmu: peer edge -> first seen without liveness key
	gen      uint64               // guarded by rmu: link generations
}

// NewRedisCluster returns the fleet membership of the edge edgeID (unique
// in the fleet, stable across restarts is not required) on rdb, which may
// be a plain, Sentinel (failover) or Cluster client: every multi-key script
// touches keys of one hash tag. logger nil discards.
func NewRedisCluster(rdb redis.UniversalClient, edgeID string, logger *slog.Logger) (*Cluster, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: cluster needs a Redis client", ErrBadConfig)
	}
	if edgeID == "" || len(edgeID) > maxEdgeIDBytes || strings.ContainsAny(edgeID, " \t\r\n{}\x00") {
		return nil, fmt.Errorf("%w: edge id %q: want 1-%d bytes, no spaces or braces", ErrBadConfig, edgeID, maxEdgeIDBytes)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{
		rdb: rdb, edge: edgeID, log: logger.With("component", "signalling-cluster", "edge", edgeID),
		opTimeout: time.Second, probe: 250 * time.Millisecond, block: time.Second,
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

func edgeKey(edge string) string  { return pxTag + "edge:" + edge }
func inboxKey(edge string) string { return "{px-in:" + edge + "}" }

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
		Help: "Redis calls of the signalling fleet that failed for want of Redis, by operation.",
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
	c.store = newRedisStore(c, s.cfg.LeaseGrace)
	s.reg.st = c.store
	s.nextPlayer = c.playerBase()
	c.ctx, c.cancel = context.WithCancel(context.Background())
	last := c.inboxStart()
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

// crash makes c stop talking to Redis at once, leaving its registrations
// to expire (tests: an edge killed with -9).
func (c *Cluster) crash() { c.crashed.Store(true); c.stop() }

// kickSync wakes the sync loop; it never blocks (called under Server.mu).
func (c *Cluster) kickSync() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// ---- Redis calls: fast failure while down ----

// usable fails fast while Redis is known to be down; the sync loop probes
// and clears it.
func (c *Cluster) usable() error {
	if c.crashed.Load() {
		return fmt.Errorf("%w: edge stopped", ErrFleetUnavailable)
	}
	if c.down.Load() {
		return fmt.Errorf("%w: redis unreachable", ErrFleetUnavailable)
	}
	return nil
}

// failed classifies err: a reply error from Redis (a script bug) stays what
// it is; anything else means Redis cannot be reached.
func (c *Cluster) failed(err error) error {
	var re redis.Error
	if errors.As(err, &re) {
		return err
	}
	if !c.down.Swap(true) {
		c.log.Warn("redis unreachable; cross-edge signalling and fleet leases refused until it returns", "err", err)
		c.kickSync() // the sync loop probes until it is back
	}
	return fmt.Errorf("%w: %w", ErrFleetUnavailable, err)
}

func (c *Cluster) count(op string) { c.errs.WithLabelValues(op).Inc() }

// opContext bounds one synchronous call.
func (c *Cluster) opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.opTimeout)
}

// runScript runs one registry script (EVALSHA, loading it on NOSCRIPT).
func (c *Cluster) runScript(ctx context.Context, sc *redis.Script, keys []string, args ...any) ([]any, error) {
	if err := c.usable(); err != nil {
		c.count("script")
		return nil, err
	}
	res, err := sc.Run(ctx, c.rdb, keys, args...).Slice()
	if err != nil {
		c.count("script")
		return nil, c.failed(err)
	}
	return res, nil
}

// pipeScripts runs fn's EVALSHAs in one pipeline, loading the scripts and
// retrying once when Redis lost them (a restart).
func (c *Cluster) pipeScripts(ctx context.Context, fn func(redis.Pipeliner)) ([]redis.Cmder, error) {
	if err := c.usable(); err != nil {
		return nil, err
	}
	for try := 0; ; try++ {
		cmds, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error { fn(p); return nil })
		if err == nil {
			return cmds, nil
		}
		if try == 0 && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if lerr := c.loadScripts(ctx); lerr != nil {
				return nil, c.failed(lerr)
			}
			continue
		}
		c.count("pipeline")
		return nil, c.failed(err)
	}
}

func (c *Cluster) loadScripts(ctx context.Context) error {
	for _, sc := range allScripts {
		if err := sc.Load(ctx, c.rdb).Err(); err != nil {
			return err
		}
	}
	return nil
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
// refreshes this edge's liveness and registrations, re-registering all of
// them after Redis comes back, and checks the liveness of peer edges.
func (c *Cluster) syncLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.beat)
	defer t.Stop()
	full := true
	for {
		if c.crashed.Load() {
			return
		}
		if c.down.Load() {
			ctx, cancel := c.opContext()
			err := c.rdb.Ping(ctx).Err()
			cancel()
			if err == nil {
				c.down.Store(false)
				c.log.Info("redis reachable again; re-registering this edge's streamers")
				full = true
			}
		}
		if !c.down.Load() {
			if err := c.heartbeat(full); err != nil {
				c.count("heartbeat")
				c.log.Debug("heartbeat failed", "err", err)
			} else {
				full = false
			}
		}
		wait := c.beat
		if c.down.Load() {
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
			if c.down.Load() {
				full = true
			}
		}
		pt.Stop()
	}
}

// heartbeat syncs the registry; a full one also refreshes liveness and
// checks peers.
func (c *Cluster) heartbeat(full bool) error {
	ctx, cancel := context.WithTimeout(c.ctx, 2*c.opTimeout)
	defer cancel()
	if full {
		ttl := c.ttl
		_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, edgeKey(c.edge), "1", ttl)
			p.PExpire(ctx, inboxKey(c.edge), 10*ttl)
			return nil
		})
		if err != nil {
			return c.failed(err)
		}
	}
	if err := c.store.sync(ctx, full, c.srv.now()); err != nil {
		return err
	}
	if full {
		_, _ = c.store.fleetEntries(c.srv.now()) // refreshes the remote id view
		c.checkPeers(ctx)
	}
	return nil
}

// farewell, on a clean stop, unregisters what is left and the edge itself.
func (c *Cluster) farewell() {
	if c.crashed.Load() || c.down.Load() {
		return
	}
	ctx, cancel := c.opContext()
	defer cancel()
	if err := c.store.sync(ctx, false, c.srv.now()); err != nil {
		return
	}
	_ = c.rdb.Del(ctx, edgeKey(c.edge)).Err()
}

// ---- inbox ----

// inboxStart is the id after which this edge reads its inbox: the newest
// entry now (older ones were for a previous life of this edge id).
func (c *Cluster) inboxStart() string {
	ctx, cancel := c.opContext()
	defer cancel()
	if xs, err := c.rdb.XRevRangeN(ctx, inboxKey(c.edge), "+", "-", 1).Result(); err == nil {
		if len(xs) == 1 {
			return xs[0].ID
		}
		return "0-0"
	}
	return strconv.FormatInt(time.Now().UnixMilli(), 10) + "-0"
}

// inboxLoop reads this edge's inbox stream in order and dispatches each
// entry; Redis outages are retried with backoff.
func (c *Cluster) inboxLoop(last string) {
	defer c.wg.Done()
	key := inboxKey(c.edge)
	backoff := 50 * time.Millisecond
	for c.ctx.Err() == nil && !c.crashed.Load() {
		res, err := c.rdb.XRead(c.ctx, &redis.XReadArgs{Streams: []string{key, last}, Count: 256, Block: c.block}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if c.ctx.Err() != nil {
				return
			}
			c.count("inbox")
			_ = c.failed(err)
			if !c.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		for _, st := range res {
			for _, m := range st.Messages {
				last = m.ID
				if !c.crashed.Load() {
					c.dispatch(m.Values)
				}
			}
		}
	}
}

// Available reports whether the registry can answer for the whole fleet:
// nil in memory; ErrFleetUnavailable while the fleet's Redis is known to
// be unreachable (Snapshot is then empty, and LeaseIdle fails with it), so
// a caller can refuse with a typed "fleet unavailable" rather than "no
// capacity".
func (r *Registry) Available() error {
	if rs, ok := r.st.(*redisStore); ok {
		return rs.cl.usable()
	}
	return nil
}
