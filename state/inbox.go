package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
	// maxInboxMessage bounds one message.
	maxInboxMessage = 1 << 20
)

func checkInbox(edge string, msgs [][]byte) error {
	if err := CheckEdgeID(edge); err != nil {
		return err
	}
	for _, m := range msgs {
		if len(m) > maxInboxMessage {
			return fmt.Errorf("%w: inbox message of %d bytes (max %d)", ErrBadArgument, len(m), maxInboxMessage)
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
	if err := checkInbox(edge, msgs); err != nil {
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

// ---- Redis ----

// RedisInbox keeps each edge's inbox in a Redis stream of its own,
// {px-in:<edge>} (keys.go), each message one entry with one field. The
// reader keeps its inbox from expiring (PEXPIRE keep, renewed every
// keep/4 by the injected clock), so the inbox of an edge that died goes
// away by itself.
type RedisInbox struct {
	r    *Redis           // immutable
	keep time.Duration    // immutable
	now  func() time.Time // immutable

	mu      sync.Mutex
	renewed map[string]time.Time // guarded by mu: edge -> last PEXPIRE
}

var _ Inbox = (*RedisInbox)(nil)

// DefaultInboxKeep is how long an inbox outlives its reader.
const DefaultInboxKeep = 150 * time.Second

// NewRedisInbox returns the inboxes on r; keep 0 is DefaultInboxKeep, now
// nil is time.Now.
func NewRedisInbox(r *Redis, keep time.Duration, now func() time.Time) *RedisInbox {
	if keep <= 0 {
		keep = DefaultInboxKeep
	}
	if now == nil {
		now = time.Now
	}
	return &RedisInbox{r: r, keep: keep, now: now, renewed: map[string]time.Time{}}
}

// inboxField is the one field of an inbox entry.
const inboxField = "m"

// Send implements Inbox: one pipeline of XADDs.
func (in *RedisInbox) Send(ctx context.Context, edge string, msgs ...[]byte) error {
	if err := checkInbox(edge, msgs); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	key := inboxKey(edge)
	_, err := in.r.pipe(ctx, func(p *scriptPipe) {
		for _, m := range msgs {
			p.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: InboxMaxLen, Approx: true, Values: []any{inboxField, m}})
		}
	})
	return err
}

// End implements Inbox.
func (in *RedisInbox) End(ctx context.Context, edge string) (string, error) {
	if err := CheckEdgeID(edge); err != nil {
		return "", err
	}
	xs, err := in.r.c.XRevRangeN(ctx, inboxKey(edge), "+", "-", 1).Result()
	if err != nil {
		return "", in.r.wrap("inbox end", err)
	}
	if len(xs) == 1 {
		return xs[0].ID, nil
	}
	return "0-0", nil
}

// Read implements Inbox: XREAD BLOCK.
func (in *RedisInbox) Read(ctx context.Context, edge, cursor string, max int, wait time.Duration) ([][]byte, string, error) {
	if cursor == "" {
		c, err := in.End(ctx, edge)
		if err != nil {
			return nil, "", err
		}
		cursor = c
	}
	key := inboxKey(edge)
	if err := in.renew(ctx, edge, key); err != nil {
		return nil, cursor, err
	}
	res, err := in.r.c.XRead(ctx, &redis.XReadArgs{Streams: []string{key, cursor}, Count: int64(max), Block: wait}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, cursor, nil
	}
	if err != nil {
		return nil, cursor, in.r.wrap("inbox read", err)
	}
	var out [][]byte
	for _, st := range res {
		for _, m := range st.Messages {
			cursor = m.ID
			if s, ok := m.Values[inboxField].(string); ok {
				out = append(out, []byte(s))
			}
		}
	}
	return out, cursor, nil
}

// renew keeps edge's inbox from expiring while it is read.
func (in *RedisInbox) renew(ctx context.Context, edge, key string) error {
	now := in.now()
	in.mu.Lock()
	due := now.Sub(in.renewed[edge]) >= in.keep/4
	in.mu.Unlock()
	if !due {
		return nil
	}
	if err := in.r.c.PExpire(ctx, key, in.keep).Err(); err != nil {
		return in.r.wrap("inbox keep", err)
	}
	in.mu.Lock()
	in.renewed[edge] = now
	in.mu.Unlock()
	return nil
}
