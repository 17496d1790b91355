package shard

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/oshun/egbe-edge/codec"
)

// sharedSnap is one instance tick as every session of the instance on this
// edge sees it: decoded once from the link (codec.DecodeShardFrame), with
// its spatial index built once (codec.Index), then shared read-only by the
// writers of every session of the instance. Reference counted: the feed
// holds the newest, each session mailbox that was offered it holds one,
// and a writer projecting from it holds its mailbox's. The last release
// returns it to the feed's free list, so a steady link allocates nothing.
type sharedSnap struct {
	feed  *snapFeed    // immutable
	refs  atomic.Int32 // the snapshot goes back to the free list at 0
	world codec.World  // written by the link reader before the first offer; read-only after
	index codec.Index  // likewise
	// ver is the content version: it moves only when the entities differ
	// from the previous tick's, so a session settled at ver needs nothing
	// while the world stands still.
	ver uint64
}

func (sn *sharedSnap) retain() { sn.refs.Add(1) }

func (sn *sharedSnap) release() {
	if sn.refs.Add(-1) == 0 {
		sn.feed.put(sn)
	}
}

// snapFeed is one instance's stream of shared snapshots on one link.
type snapFeed struct {
	newest *sharedSnap // owned by the link's control reader
	ver    uint64      // owned by the link's control reader: the last version given out

	mu   sync.Mutex
	free []*sharedSnap // guarded by mu
}

func (f *snapFeed) get() *sharedSnap {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.free); n > 0 {
		sn := f.free[n-1]
		f.free = f.free[:n-1]
		return sn
	}
	return &sharedSnap{feed: f}
}

func (f *snapFeed) put(sn *sharedSnap) {
	f.mu.Lock()
	f.free = append(f.free, sn)
	f.mu.Unlock()
}

// publish turns the snapshot just decoded into scratch into the feed's
// newest shared snapshot (swapping arrays with a free one, so scratch can
// be decoded into again) and returns it, holding the feed's reference.
func (f *snapFeed) publish(scratch *codec.World) *sharedSnap {
	sn := f.get()
	sn.world, *scratch = *scratch, sn.world
	*scratch = codec.World{Entities: scratch.Entities[:0]}
	// Versions only grow, across reconnections too: a session never sees
	// an old version again.
	if prev := f.newest; prev == nil || !slices.Equal(prev.world.Entities, sn.world.Entities) {
		f.ver++
	}
	sn.ver = f.ver
	sn.index.Build(&sn.world)
	sn.refs.Store(1)
	if f.newest != nil {
		f.newest.release()
	}
	f.newest = sn
	return sn
}

// drop releases the feed's newest snapshot (the link went down).
func (f *snapFeed) drop() {
	if f.newest != nil {
		f.newest.release()
		f.newest = nil
	}
}
