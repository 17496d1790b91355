package state

import (
	"context"
	"sync"
)

// RevocationNotices is what a Revocations store may add: a notice of each
// revocation as it happens, so the edge holding the session live ends it
// at once rather than at its next periodic check (which stays as the
// backstop for a notice lost while Redis was unreachable).
type RevocationNotices interface {
	// Watch calls fn with each session id revoked from now on, until ctx is
	// done. fn must not block.
	Watch(ctx context.Context, fn func(sessionID string)) error
}

var _ RevocationNotices = (*MemoryRevocations)(nil)

// MaxNoticeID bounds a session id taken from a notice.
const MaxNoticeID = 256

// memoryWatchers is MemoryRevocations's subscriber list.
type memoryWatchers struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(string) // guarded by mu
}

func (w *memoryWatchers) add(fn func(string)) (remove func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fns == nil {
		w.fns = map[int]func(string){}
	}
	id := w.next
	w.next++
	w.fns[id] = fn
	return func() { w.mu.Lock(); delete(w.fns, id); w.mu.Unlock() }
}

func (w *memoryWatchers) notify(sessionID string) {
	w.mu.Lock()
	fns := make([]func(string), 0, len(w.fns))
	for _, fn := range w.fns {
		fns = append(fns, fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(sessionID)
	}
}

// Watch implements RevocationNotices.
func (m *MemoryRevocations) Watch(ctx context.Context, fn func(string)) error {
	remove := m.watchers.add(fn)
	<-ctx.Done()
	remove()
	return nil
}
