package transport

import "sync"

// latestMax bounds a latest-wins queue's depth; the transports use 1 or 2.
const latestMax = 8

// latestKeep is the largest buffer a queue slot keeps once its message has
// left: an occasional big datagram must not pin its size to an idle
// session.
const latestKeep = 4 << 10

// latest is a small latest-wins queue of messages between two goroutines
// (a datagram receiver and Read, or WriteUnreliable and a datagram sender).
// A push into a full queue drops the oldest queued message, so whoever is
// behind always gets the freshest state next, never a backlog of stale
// state. Messages are copied into buffers the queue keeps, so a warm queue
// allocates nothing.
type latest struct {
	mu    sync.Mutex
	depth int               // immutable after newLatest: 1..latestMax
	slots [latestMax][]byte // guarded by mu: a ring
	head  int               // guarded by mu: index of the oldest message
	n     int               // guarded by mu: messages queued
}

func newLatest(depth int) *latest {
	return &latest{depth: max(1, min(depth, latestMax))}
}

// push copies msg in. It reports whether the oldest queued message was
// dropped to make room.
func (q *latest) push(msg []byte) (dropped bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == q.depth {
		q.head = (q.head + 1) % q.depth
		q.n--
		dropped = true
	}
	i := (q.head + q.n) % q.depth
	q.slots[i] = append(q.slots[i][:0], msg...)
	q.n++
	return dropped
}

// pop copies the oldest message into dst (grown if needed) and returns it;
// ok is false when the queue is empty.
func (q *latest) pop(dst []byte) (msg []byte, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return dst[:0], false
	}
	s := q.slots[q.head]
	msg = append(dst[:0], s...)
	if cap(s) > latestKeep {
		q.slots[q.head] = nil
	}
	q.head = (q.head + 1) % q.depth
	q.n--
	return msg, true
}

// len is the number of queued messages.
func (q *latest) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}
