package bench

import (
	"sync"
)

// edgeLogTail keeps the last bytes a started edge wrote to stderr. The
// edge's log does not go to the bench's own output (where it would mix
// with the report); its tail explains an edge that died.
type edgeLogTail struct {
	mu  sync.Mutex
	buf []byte // guarded by mu
	max int    // immutable
}

// edgeLogTailBytes is how much of a started edge's log is kept.
const edgeLogTailBytes = 64 << 10

func newEdgeLogTail() *edgeLogTail { return &edgeLogTail{max: edgeLogTailBytes} }

func (l *edgeLogTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - l.max; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

// String is the kept tail.
func (l *edgeLogTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}
