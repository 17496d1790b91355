package state

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Inbox delivers messages between the edges of a fleet: each edge reads
// its own inbox, in order, on one goroutine, and any edge appends to any
// inbox. A reader that loses the store and reconnects resumes from its
// cursor: nothing appended meanwhile is lost. Messages are opaque bytes
// (the sender's protocol; signalling's relay entries).
type Inbox interface {
	// Send appends msgs to edge's inbox, in order, in one round trip.
	Send(ctx context.Context, edge string, msgs ...[]byte) error
	// End returns the cursor after the newest message in edge's inbox: a
	// reader starting there sees only what is sent from now on.
	End(ctx context.Context, edge string) (string, error)
	// Read returns the messages of edge's inbox after cursor ("" is End),
	// at most max, waiting up to wait for the first; and the cursor after
	// them (cursor itself when none came).
	Read(ctx context.Context, edge, cursor string, max int, wait time.Duration) ([][]byte, string, error)
}

// Inbox bounds.
const (
	// InboxMaxLen bounds an inbox: beyond it the oldest messages are
	// dropped (approximately, on Redis).
	InboxMaxLen = 100_000
	// MaxInboxMessage bounds one message.
	MaxInboxMessage = 1 << 20
)

// CheckInbox refuses a malformed edge id and an oversized message.
func CheckInbox(edge string, msgs [][]byte) error {
	if err := CheckEdgeID(edge); err != nil {
		return err
	}
	for _, m := range msgs {
		if len(m) > MaxInboxMessage {
			return fmt.Errorf("%w: inbox message of %d bytes (max %d)", ErrBadArgument, len(m), MaxInboxMessage)
		}
	}
	return nil
}

// ---- memory ----

// MemoryInbox is the in-process Inbox: the edges of one test.
type MemoryInbox struct {
	mu    sync.Mutex
	boxes map[string]*memBox // guarded by mu
}

// memBox is one edge's inbox: msgs[i] has cursor base+i+1.
type memBox struct {
	msgs [][]byte
	base uint64
	wake chan struct{} // closed and replaced on every append
}

var _ Inbox = (*MemoryInbox)(nil)

// NewMemoryInbox returns empty inboxes.
func NewMemoryInbox() *MemoryInbox { return &MemoryInbox{boxes: map[string]*memBox{}} }

func (m *MemoryInbox) boxLocked(edge string) *memBox {
	b := m.boxes[edge]
	if b == nil {
		b = &memBox{wake: make(chan struct{})}
		m.boxes[edge] = b
	}
	return b
}

// Send implements Inbox.
func (m *MemoryInbox) Send(_ context.Context, edge string, msgs ...[]byte) error {
	if err := CheckInbox(edge, msgs); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.boxLocked(edge)
	for _, msg := range msgs {
		b.msgs = append(b.msgs, append([]byte(nil), msg...))
	}
	if over := len(b.msgs) - InboxMaxLen; over > 0 {
		b.msgs = append([][]byte(nil), b.msgs[over:]...)
		b.base += uint64(over)
	}
	close(b.wake)
	b.wake = make(chan struct{})
	return nil
}

// End implements Inbox.
func (m *MemoryInbox) End(_ context.Context, edge string) (string, error) {
	if err := CheckEdgeID(edge); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.boxLocked(edge)
	return strconv.FormatUint(b.base+uint64(len(b.msgs)), 10), nil
}

// Read implements Inbox.
func (m *MemoryInbox) Read(ctx context.Context, edge, cursor string, max int, wait time.Duration) ([][]byte, string, error) {
	if cursor == "" {
		c, err := m.End(ctx, edge)
		if err != nil {
			return nil, "", err
		}
		cursor = c
	}
	if max <= 0 {
		max = InboxMaxLen
	}
	at, err := strconv.ParseUint(cursor, 10, 64)
	if err != nil {
		return nil, "", fmt.Errorf("%w: inbox cursor %q", ErrBadArgument, cursor)
	}
	var timer <-chan time.Time
	for {
		m.mu.Lock()
		b := m.boxLocked(edge)
		if at < b.base {
			at = b.base // trimmed meanwhile
		}
		if n := b.base + uint64(len(b.msgs)); at < n {
			out := b.msgs[at-b.base : min(n, at+uint64(max))-b.base]
			m.mu.Unlock()
			return out, strconv.FormatUint(at+uint64(len(out)), 10), nil
		}
		wake := b.wake
		m.mu.Unlock()
		if timer == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-wake:
		case <-timer:
			return nil, cursor, nil
		case <-ctx.Done():
			return nil, cursor, ctx.Err()
		}
	}
}
