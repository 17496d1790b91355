package shard

import (
	"fmt"
	"slices"
	"sync"
)

// Route is where an instance lives.
type Route struct {
	InstanceID string
	ShardID    string
	Addr       string
	Healthy    bool // the link to the shard is up
	Capacity   int  // sessions the shard takes (0 = unbounded)
	Sessions   int  // sessions the shard reported holding
}

// Directory maps instance -> shard route. Safe for concurrent use.
type Directory struct {
	mu     sync.RWMutex
	shards map[string]*shardEntry // guarded by mu
	routes map[string]string      // instance -> shard; guarded by mu
	static map[string]bool        // instances from config (registration never moves them); guarded by mu
}

type shardEntry struct {
	addr     string
	healthy  bool
	capacity int
	sessions int
}

// NewDirectory builds a directory from config maps.
func NewDirectory(shards, instances map[string]string) *Directory {
	d := &Directory{shards: map[string]*shardEntry{}, routes: map[string]string{}, static: map[string]bool{}}
	for id, addr := range shards {
		d.shards[id] = &shardEntry{addr: addr}
	}
	for inst, sh := range instances {
		d.routes[inst] = sh
		d.static[inst] = true
	}
	return d
}

// RouteFor resolves an instance; an unknown one is ErrUnknownInstance.
func (d *Directory) RouteFor(instance string) (Route, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	sh, ok := d.routes[instance]
	if !ok {
		return Route{}, fmt.Errorf("%w: %q", ErrUnknownInstance, instance)
	}
	e := d.shards[sh]
	if e == nil {
		return Route{}, fmt.Errorf("%w: %q", ErrUnknownShard, sh)
	}
	return Route{InstanceID: instance, ShardID: sh, Addr: e.addr, Healthy: e.healthy, Capacity: e.capacity, Sessions: e.sessions}, nil
}

// Register records what a shard announced on its link: the instances it
// holds (config routes win over registration) and its capacity.
func (d *Directory) Register(shardID string, instances []string, capacity, sessions int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.shards[shardID]
	if e == nil {
		return
	}
	e.capacity, e.sessions = capacity, sessions
	for _, in := range instances {
		if !d.static[in] {
			d.routes[in] = shardID
		}
	}
}

// SetLoad records the sessions a shard reports holding (heartbeats).
func (d *Directory) SetLoad(shardID string, sessions int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.shards[shardID]; e != nil {
		e.sessions = sessions
	}
}

// SetHealth records a shard link's health.
func (d *Directory) SetHealth(shardID string, healthy bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.shards[shardID]; e != nil {
		e.healthy = healthy
	}
}

// Routes lists every route, sorted by instance.
func (d *Directory) Routes() []Route {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]Route, 0, len(d.routes))
	for inst, sh := range d.routes {
		r := Route{InstanceID: inst, ShardID: sh}
		if e := d.shards[sh]; e != nil {
			r.Addr, r.Healthy, r.Capacity, r.Sessions = e.addr, e.healthy, e.capacity, e.sessions
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Route) int {
		if a.InstanceID < b.InstanceID {
			return -1
		}
		if a.InstanceID > b.InstanceID {
			return 1
		}
		return 0
	})
	return out
}
