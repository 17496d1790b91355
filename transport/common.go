package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
)

// ending is the end-of-connection state every Conn shares: Done's channel
// and the error Read reports afterwards.
type ending struct {
	once sync.Once
	done chan struct{}
	err  error // written once, before done is closed
}

func newEnding() ending { return ending{done: make(chan struct{})} }

// end records err as the reason and closes done. It reports whether this
// call was the first.
func (e *ending) end(err error) bool {
	first := false
	e.once.Do(func() {
		e.err = err
		close(e.done)
		first = true
	})
	return first
}

// reason is the recorded end error; only valid once done is closed.
func (e *ending) reason() error { return e.err }

// httpError is the typed JSON body of every 4xx/5xx this package answers,
// matching the wire Error's code/message shape.
type httpError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeHTTPError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(httpError{Code: code, Message: msg})
}

// bufPool is a sync.Pool of fixed-size byte slices, used as gorilla's
// WriteBufferPool so idle WebSockets hold no write buffer.
type bufPool struct{ p sync.Pool }

func (b *bufPool) Get() any  { return b.p.Get() }
func (b *bufPool) Put(x any) { b.p.Put(x) }

// readLanes returns the next message queued on either lane — queued
// messages first, even when the connection has ended — or why it ended.
func readLanes(ctx context.Context, reliable, unreliable <-chan []byte, done <-chan struct{}, reason func() error) (Message, error) {
	select {
	case m := <-reliable:
		return Message{Lane: Reliable, Data: m}, nil
	case m := <-unreliable:
		return Message{Lane: Unreliable, Data: m}, nil
	default:
	}
	select {
	case m := <-reliable:
		return Message{Lane: Reliable, Data: m}, nil
	case m := <-unreliable:
		return Message{Lane: Unreliable, Data: m}, nil
	case <-done:
		return Message{}, reason()
	case <-ctx.Done():
		return Message{}, fmt.Errorf("%w: %w", ErrClosed, ctx.Err())
	}
}

// bufListMax bounds how many write buffers a bufList keeps, and
// bufListKeep the largest one it keeps.
const (
	bufListMax  = 64
	bufListKeep = 2 * wsMaxBatch
)

// bufList is a bounded free list of write buffers shared by one
// transport's connections: a connection takes a buffer when it first
// buffers a frame and gives it back after the write, so idle connections
// hold none. Unlike a sync.Pool it is not emptied by every GC (nor thinned
// by the race detector), so a warm writer never allocates; it keeps at most
// bufListMax buffers of at most bufListKeep bytes.
type bufList struct {
	size int        // immutable: capacity of a new buffer
	mu   sync.Mutex // guards free
	free []*[]byte
}

func newBufList(size int) *bufList {
	return &bufList{size: size, free: make([]*[]byte, 0, bufListMax)}
}

// get returns an empty buffer.
func (l *bufList) get() *[]byte {
	l.mu.Lock()
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free[n-1] = nil
		l.free = l.free[:n-1]
		l.mu.Unlock()
		return b
	}
	l.mu.Unlock()
	b := make([]byte, 0, l.size)
	return &b
}

// put gives b back (or drops it when the list is full or b is too large).
func (l *bufList) put(b *[]byte) {
	if cap(*b) > bufListKeep {
		return
	}
	*b = (*b)[:0]
	l.mu.Lock()
	if len(l.free) < bufListMax {
		l.free = append(l.free, b)
	}
	l.mu.Unlock()
}
