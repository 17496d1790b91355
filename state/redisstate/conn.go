package redisstate

// The edge's one handle on the shared Redis. Every Redis store of this
// package takes a *Conn, so every command of the process passes the same
// availability tracker (a go-redis hook, so no store can forget it) and
// every Lua script is loaded in one place (scripts.go).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/state"
)

// DefaultProbeEvery is how often, while Redis is known to be down, one call
// is let through to find out whether it is back; every other call fails at
// once.
const DefaultProbeEvery = 250 * time.Millisecond

// errRedisDown is what a call gets while Redis is known to be down: no
// dial, no timeout, at once.
var errRedisDown = fmt.Errorf("%w: redis unreachable (failing fast until it answers)", state.ErrUnavailable)

// Conn is the process's connection to the shared Redis: the client, the
// availability tracker every store consults, and the script runner. Build
// one with Open (or New around a client) and hand it to every
// Redis store; Close it last.
//
// The tracker is a circuit breaker shared by every subsystem: the first
// call that fails for want of Redis (a network error, a timeout, a
// CLUSTERDOWN) marks Redis down, and from then on every call of every
// store fails at once with ErrUnavailable — live sessions never wait on
// dial timeouts — except one call per probe period, which goes through as
// the probe; the first that succeeds marks Redis up for everyone. No
// goroutine is involved: the calls the edge makes anyway (readiness checks
// every second, heartbeats) are the probes.
type Conn struct {
	c     redis.UniversalClient // immutable after New
	log   *slog.Logger          // immutable after New
	now   func() time.Time      // immutable after New
	probe time.Duration         // immutable after New

	down      atomic.Bool
	lastTrial atomic.Int64 // UnixNano of the last call let through while down
	logMu     sync.Mutex   // orders the up/down log lines
}

var _ state.Availability = (*Conn)(nil)

// Options are New's optional settings.
type Options struct {
	// Logger receives the up and down transitions; nil discards.
	Logger *slog.Logger
	// Now is the tracker's clock (probe periods); nil is time.Now.
	Now func() time.Time
	// ProbeEvery is the probe period while down; 0 is DefaultProbeEvery.
	ProbeEvery time.Duration
}

// Open returns the handle for rawURL (see ParseURL for the forms
// accepted); it does not dial (the first command does). Errors wrap
// ErrBadURL and never contain a password.
func Open(rawURL string, o Options) (*Conn, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	var c redis.UniversalClient
	switch u.Topology {
	case TopologyCluster:
		c = redis.NewClusterClient(u.Cluster)
	case TopologySentinel:
		c = redis.NewFailoverClient(u.Failover)
	default:
		c = redis.NewClient(u.Single)
	}
	return New(c, o), nil
}

// New wraps c (a plain, Sentinel or Cluster client) and takes it
// over: Close closes it. Every command sent through c from now on passes
// the tracker.
func New(c redis.UniversalClient, o Options) *Conn {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ProbeEvery <= 0 {
		o.ProbeEvery = DefaultProbeEvery
	}
	r := &Conn{c: c, log: o.Logger.With("component", "state"), now: o.Now, probe: o.ProbeEvery}
	c.AddHook(trackerHook{r})
	return r
}

// Client is the wrapped go-redis client, for tests and tools that inspect
// the data (the stores never need it from outside).
func (r *Conn) Client() redis.UniversalClient { return r.c }

// Close closes the client.
func (r *Conn) Close() error { return r.c.Close() }

// Available implements Availability: ErrUnavailable while Redis is known
// to be down.
func (r *Conn) Available() error {
	if r.down.Load() {
		return errRedisDown
	}
	return nil
}

// Check asks Redis now (PING; every master of a Cluster), whatever the
// tracker says, and feeds the answer to the tracker: /readyz's check.
func (r *Conn) Check(ctx context.Context) error {
	ctx = context.WithValue(ctx, probeKey{}, true)
	var err error
	if cc, ok := r.c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() })
		r.observe(ctx, err)
	} else {
		err = r.c.Ping(ctx).Err() // the hook observes it
	}
	if err != nil {
		return fmt.Errorf("%w: %w", state.ErrUnavailable, err)
	}
	return nil
}

// probeKey marks a context whose calls bypass the fail-fast (Check).
type probeKey struct{}

// admit decides whether a call may go to Redis: always while up; while
// down, Check's calls and one call per probe period.
func (r *Conn) admit(ctx context.Context) error {
	if !r.down.Load() || ctx.Value(probeKey{}) != nil {
		return nil
	}
	now := r.now().UnixNano()
	last := r.lastTrial.Load()
	if now-last >= int64(r.probe) && r.lastTrial.CompareAndSwap(last, now) {
		return nil
	}
	return errRedisDown
}

// observe feeds one call's outcome to the tracker.
func (r *Conn) observe(ctx context.Context, err error) {
	switch {
	case unreachable(ctx, err):
		r.lastTrial.Store(r.now().UnixNano())
		if !r.down.Swap(true) {
			r.logMu.Lock()
			r.log.Warn("redis unreachable: every shared-state call fails fast until it answers", "err", err)
			r.logMu.Unlock()
		}
	case err == nil || isReply(err):
		if r.down.Swap(false) {
			r.logMu.Lock()
			r.log.Info("redis reachable again")
			r.logMu.Unlock()
		}
	}
}

// isReply reports an answer from Redis (redis.Nil, an error reply): Redis
// is reachable, whatever the answer.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// unreachable reports an error that means Redis cannot be used: anything
// but an answer from Redis, a closed client, or the caller giving up.
func unreachable(ctx context.Context, err error) bool {
	switch {
	case err == nil, errors.Is(err, redis.ErrClosed), errors.Is(err, errRedisDown):
		return false
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return false // the caller went away; that says nothing of Redis
	case isReply(err):
		// Replies that mean the data cannot be reached right now.
		msg := err.Error()
		for _, p := range []string{"CLUSTERDOWN", "LOADING", "MASTERDOWN", "TRYAGAIN"} {
			if strings.Contains(msg, p) {
				return true
			}
		}
		return false
	}
	return true // a network error, a timeout, a pool timeout
}

// trackerHook runs every command of the client through the tracker.
type trackerHook struct{ r *Conn }

// admittedKey marks the context of an admitted call: the commands go-redis
// runs inside it (a new connection's HELLO, CLIENT SETINFO) pass too.
type admittedKey struct{}

func (h trackerHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h trackerHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Err() != nil || ctx.Value(admittedKey{}) != nil {
			return next(ctx, cmd) // fails at once, or is part of an admitted call
		}
		if err := h.r.admit(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		err := next(context.WithValue(ctx, admittedKey{}, true), cmd)
		h.r.observe(ctx, err)
		return err
	}
}

func (h trackerHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Err() != nil || ctx.Value(admittedKey{}) != nil {
			return next(ctx, cmds)
		}
		if err := h.r.admit(ctx); err != nil {
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		err := next(context.WithValue(ctx, admittedKey{}, true), cmds)
		if err == nil {
			for _, c := range cmds {
				if e := c.Err(); e != nil && !isReply(e) {
					err = e
					break
				}
			}
		}
		h.r.observe(ctx, err)
		return err
	}
}
