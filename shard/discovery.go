package shard

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// The fleet's shard directory (DESIGN.md section 8). With Deps.Shards set,
// every link that is up announces its shard (address, the instances routed
// to it, capacity, load) every announce interval with a TTL of three
// intervals, and the gateway lists the directory on the same beat: a shard
// this edge has no link to gets one (to the announced address) and its
// instances are routed to it. So an edge configured with no shard at all
// serves every instance of the fleet, and a shard no edge can reach any
// more lapses from the directory within three intervals.
//
// Config wins: a shard id this edge was configured with keeps its
// configured address and routes, whatever the fleet announces for it. A
// discovered shard's announced instances only fill routes this edge does
// not have; its own LinkShardHello (once its link is up) is authoritative,
// as for a configured shard. A discovered link that is down follows the
// address the fleet announces, so a shard that restarts elsewhere is
// relinked without restarting the edge.

// DefaultAnnounceInterval is how often links announce their shards and the
// directory is listed.
const DefaultAnnounceInterval = 2 * time.Second

// announceTTLIntervals: a record lives this many announce intervals, so
// one slow or lost announcement never drops a live shard.
const announceTTLIntervals = 3

// discovery holds the shared directory's timing.
type discovery struct {
	every time.Duration // 0: DefaultAnnounceInterval (tests shorten it before Run)
}

func (d discovery) interval() time.Duration {
	if d.every <= 0 {
		return DefaultAnnounceInterval
	}
	return d.every
}

// link returns the link to shard, or nil.
func (g *Gateway) link(shard string) *link {
	g.linksMu.Lock()
	defer g.linksMu.Unlock()
	return g.links[shard]
}

// linkList snapshots the links (configured and discovered).
func (g *Gateway) linkList() []*link {
	g.linksMu.Lock()
	defer g.linksMu.Unlock()
	out := make([]*link, 0, len(g.links))
	for _, l := range g.links {
		out = append(out, l)
	}
	return out
}

// runDiscovery announces and discovers until ctx is done. It owns the
// goroutines of the links it creates and returns after they have ended.
func (g *Gateway) runDiscovery(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	every := g.disc.interval()
	t := time.NewTicker(every)
	defer t.Stop()
	var announceErr, listErr bool // log on transitions only, not every beat
	noted := map[string]string{}  // shard -> the condition already logged for it
	for {
		opCtx, cancel := context.WithTimeout(ctx, every)
		err := g.announceLinks(opCtx, every*announceTTLIntervals)
		g.logTransition(&announceErr, err, "shard announce")
		err = g.discover(opCtx, ctx, &wg, noted)
		g.logTransition(&listErr, err, "shard discovery")
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (g *Gateway) logTransition(failing *bool, err error, what string) {
	switch {
	case err != nil && !*failing:
		g.log.Warn(what+" failed", "err", err)
	case err == nil && *failing:
		g.log.Info(what + " recovered")
	}
	*failing = err != nil
}

// announceLinks announces every shard whose link is up. An unavailable
// store ends the round; a record the store refuses does not stop the
// others.
func (g *Gateway) announceLinks(ctx context.Context, ttl time.Duration) error {
	var errs []error
	for _, l := range g.linkList() {
		if !l.up() {
			continue
		}
		rec, ok := g.dir.record(l.id)
		if !ok {
			continue
		}
		rec.Addr, rec.EdgeID = l.address(), g.cfg.EdgeID
		if err := g.d.Shards.Announce(ctx, rec, ttl); err != nil {
			if errors.Is(err, state.ErrUnavailable) || ctx.Err() != nil {
				return err
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// maxDiscoveredLinks bounds the links discovery creates (they are never
// removed): as many as the directory lists.
const maxDiscoveredLinks = state.MaxShardRecords

const notedLimit = "limit" // never a host:port

// discover lists the directory and links to every shard this edge has no
// link to. opCtx bounds the listing; new links run on runCtx, tracked by
// wg. noted keeps warnings to one per condition (an address, or
// notedLimit) and shard.
func (g *Gateway) discover(opCtx, runCtx context.Context, wg *sync.WaitGroup, noted map[string]string) error {
	recs, err := g.d.Shards.List(opCtx)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if _, configured := g.cfg.Shards[rec.ID]; configured {
			continue // config wins
		}
		l, created := g.adopt(rec)
		switch {
		case l == nil:
			if noted[rec.ID] != notedLimit {
				noted[rec.ID] = notedLimit
				g.log.Warn("shard discovered but not linked: too many discovered shards", "shard", rec.ID, "max", maxDiscoveredLinks)
			}
			continue
		case created:
			g.log.Info("shard discovered", "shard", rec.ID, "addr", rec.Addr, "instances", len(rec.Instances), "announced_by", rec.EdgeID)
			wg.Add(1)
			go func() { defer wg.Done(); l.run(runCtx) }()
		case l.address() != rec.Addr:
			// Only edges with a live link announce, so an announced
			// address answered lately: a discovered link that is down
			// follows it (the shard moved); one that is up keeps its own.
			old := l.address()
			switch {
			case l.moveTo(rec.Addr):
				delete(noted, rec.ID)
				g.log.Info("discovered shard moved: relinking", "shard", rec.ID, "from", old, "to", rec.Addr, "announced_by", rec.EdgeID)
			case noted[rec.ID] != rec.Addr:
				noted[rec.ID] = rec.Addr
				g.log.Warn("discovered shard announced at another address; keeping the live link", "shard", rec.ID, "linked", old, "announced", rec.Addr)
			}
		}
		g.dir.fillRoutes(rec.ID, rec.Instances)
	}
	return nil
}

// adopt returns the link to rec's shard, creating it (created = true; the
// caller runs it) when this edge has none. nil: the discovered-link bound
// is reached.
func (g *Gateway) adopt(rec state.ShardRecord) (l *link, created bool) {
	g.linksMu.Lock()
	defer g.linksMu.Unlock()
	if l := g.links[rec.ID]; l != nil {
		return l, false
	}
	if len(g.links)-len(g.cfg.Shards) >= maxDiscoveredLinks {
		return nil, false
	}
	g.dir.addShard(rec.ID, rec.Addr)
	l = newLink(g, rec.ID, rec.Addr)
	g.links[rec.ID] = l
	g.m.linkUp.WithLabelValues(rec.ID).Set(0)
	return l, true
}

// record is what this edge knows of a shard for the fleet directory: the
// instances routed to it, its capacity and its last reported load.
func (d *Directory) record(shardID string) (state.ShardRecord, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	e := d.shards[shardID]
	if e == nil {
		return state.ShardRecord{}, false
	}
	rec := state.ShardRecord{ID: shardID, Addr: e.addr, Capacity: e.capacity, Sessions: e.sessions}
	for inst, sh := range d.routes {
		if sh == shardID {
			rec.Instances = append(rec.Instances, inst)
		}
	}
	slices.Sort(rec.Instances)
	return rec, true
}

// addShard adds a discovered shard (unhealthy until its link is up).
func (d *Directory) addShard(shardID, addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shards[shardID] == nil {
		d.shards[shardID] = &shardEntry{addr: addr}
	}
}

// setAddr records a discovered shard's new address.
func (d *Directory) setAddr(shardID, addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e := d.shards[shardID]; e != nil {
		e.addr = addr
	}
}

// fillRoutes routes the announced instances of a discovered shard that
// have no route yet: config and the shards' own hellos decide, discovery
// only fills gaps.
func (d *Directory) fillRoutes(shardID string, instances []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shards[shardID] == nil {
		return
	}
	for _, in := range instances {
		if _, ok := d.routes[in]; !ok {
			d.routes[in] = shardID
		}
	}
}
