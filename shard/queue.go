package shard

import (
	"context"
	"sync"

	"github.com/oshun/egbe-edge/codec"
)

// outKind says how the writer encodes an outItem.
type outKind uint8

const (
	outEnv  outKind = iota // env, encoded by the writer (binary or JSON)
	outRaw                 // raw: a binary ServerEnvelope, shared read-only
	outPong                // a Pong from a and b, encoded without allocating
	outAck                 // an ActionAck for a, likewise
	outPre                 // raw: already encoded for this session (binary or JSON)
)

// outItem is one reliable message waiting for a session's writer.
type outItem struct {
	kind outKind
	env  *codec.ServerEnvelope
	raw  []byte // outRaw; env holds the same message for JSON clients
	a, b uint64
}

// ctrlQueue is a session's bounded FIFO of reliable messages: a ring that
// starts empty and grows (doubling) only while messages pile up, up to max.
// Any goroutine pushes; only the writer pops.
type ctrlQueue struct {
	mu   sync.Mutex
	buf  []outItem     // guarded by mu: ring, len(buf) is its capacity
	head int           // guarded by mu
	n    int           // guarded by mu
	max  int           // immutable
	room chan struct{} // guarded by mu: closed when a pop makes room (nil: nobody waits)
}

// tryPush queues it unless the queue is full.
func (q *ctrlQueue) tryPush(it outItem) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pushLocked(it)
}

func (q *ctrlQueue) pushLocked(it outItem) bool {
	if q.n == q.max {
		return false
	}
	if q.n == len(q.buf) {
		nb := make([]outItem, max(4, min(2*len(q.buf), q.max)))
		for i := range q.n {
			nb[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = nb, 0
	}
	q.buf[(q.head+q.n)%len(q.buf)] = it
	q.n++
	return true
}

// push queues it, waiting while the queue is full (a reader's own
// backpressure) until ctx is done.
func (q *ctrlQueue) push(ctx context.Context, it outItem) bool {
	for {
		q.mu.Lock()
		if q.pushLocked(it) {
			q.mu.Unlock()
			return true
		}
		if q.room == nil {
			q.room = make(chan struct{})
		}
		room := q.room
		q.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return false
		}
	}
}

// pop takes the oldest item.
func (q *ctrlQueue) pop() (outItem, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return outItem{}, false
	}
	it := q.buf[q.head]
	q.buf[q.head] = outItem{}
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
	return it, true
}
