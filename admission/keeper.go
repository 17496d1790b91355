package admission

import (
	"context"
	"sync"
	"time"
)

// LeaseKeeper keeps the concurrency leases of live realtime sessions from
// lapsing: one goroutine per edge (Run) refreshes every held lease each
// third of the lease TTL, like the shard gateway's pin refresh, instead of
// a goroutine per session. A lease whose refresh fails is left to lapse
// (fail-safe for the caps); the next round tries again.
type LeaseKeeper struct {
	h     *HandshakeAdmitter // immutable
	every time.Duration      // immutable

	mu   sync.Mutex
	held map[*heldLease]struct{} // guarded by mu: the leases of live sessions
}

// heldLease is what a refresh needs of a session: its holder id and keys.
type heldLease struct {
	holder string
	keys   [2]string
}

// refreshTimeout bounds one lease refresh.
const refreshTimeout = 5 * time.Second

// NewLeaseKeeper returns a keeper for h's leases, refreshing every
// max(TTL/3, 1 s).
func NewLeaseKeeper(h *HandshakeAdmitter) *LeaseKeeper {
	return &LeaseKeeper{h: h, every: max(ms(h.p.LeaseTTLMs)/3, time.Second), held: map[*heldLease]struct{}{}}
}

// Admit is HandshakeAdmitter.Admit, with the granted leases kept alive
// until release (idempotent) drops them.
func (k *LeaseKeeper) Admit(ctx context.Context, req HandshakeRequest) (release func(), err error) {
	rel, err := k.h.Admit(ctx, req)
	if err != nil {
		return nil, err
	}
	lim := k.h.keys(req)
	hl := &heldLease{holder: req.SessionID, keys: [2]string{lim[0].Key, lim[1].Key}}
	k.mu.Lock()
	k.held[hl] = struct{}{}
	k.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			k.mu.Lock()
			delete(k.held, hl)
			k.mu.Unlock()
			if rel != nil {
				rel()
			}
		})
	}, nil
}

// Held is the number of leases being kept.
func (k *LeaseKeeper) Held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.held)
}

// Run refreshes the held leases until ctx is done.
func (k *LeaseKeeper) Run(ctx context.Context) error {
	t := time.NewTicker(k.every)
	defer t.Stop()
	var batch []*heldLease
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		k.mu.Lock()
		batch = batch[:0]
		for hl := range k.held {
			batch = append(batch, hl)
		}
		k.mu.Unlock()
		for _, hl := range batch {
			if ctx.Err() != nil {
				return nil
			}
			k.mu.Lock()
			_, live := k.held[hl]
			k.mu.Unlock()
			if !live {
				continue // released meanwhile
			}
			rctx, cancel := context.WithTimeout(ctx, refreshTimeout)
			// A failed refresh lets the lease lapse: fail-safe for the caps.
			_ = k.h.leases.Refresh(rctx, hl.holder, hl.keys[:], ms(k.h.p.LeaseTTLMs), k.h.now())
			cancel()
		}
		clear(batch)
	}
}
