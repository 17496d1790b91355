package redisstate

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/state"
)

// ---- Redis ----

// Inbox keeps each edge's inbox in a Redis stream of its own,
// {px-in:<edge>} (keys.go), each message one entry with one field. The
// reader keeps its inbox from expiring (PEXPIRE keep, renewed every
// keep/4 by the injected clock), so the inbox of an edge that died goes
// away by itself.
type Inbox struct {
	r    *Conn            // immutable
	keep time.Duration    // immutable
	now  func() time.Time // immutable

	mu      sync.Mutex
	renewed map[string]time.Time // guarded by mu: edge -> last PEXPIRE
}

var _ state.Inbox = (*Inbox)(nil)

// DefaultInboxKeep is how long an inbox outlives its reader.
const DefaultInboxKeep = 150 * time.Second

// NewInbox returns the inboxes on r; keep 0 is DefaultInboxKeep, now
// nil is time.Now.
func NewInbox(r *Conn, keep time.Duration, now func() time.Time) *Inbox {
	if keep <= 0 {
		keep = DefaultInboxKeep
	}
	if now == nil {
		now = time.Now
	}
	return &Inbox{r: r, keep: keep, now: now, renewed: map[string]time.Time{}}
}

// inboxField is the one field of an inbox entry.
const inboxField = "m"

// Send implements Inbox: one pipeline of XADDs.
func (in *Inbox) Send(ctx context.Context, edge string, msgs ...[]byte) error {
	if err := state.CheckInbox(edge, msgs); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	key := inboxKey(edge)
	_, err := in.r.pipe(ctx, func(p *scriptPipe) {
		for _, m := range msgs {
			p.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: state.InboxMaxLen, Approx: true, Values: []any{inboxField, m}})
		}
	})
	return err
}

// End implements Inbox.
func (in *Inbox) End(ctx context.Context, edge string) (string, error) {
	if err := state.CheckEdgeID(edge); err != nil {
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
func (in *Inbox) Read(ctx context.Context, edge, cursor string, max int, wait time.Duration) ([][]byte, string, error) {
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
	if cerr := ctx.Err(); cerr != nil && len(res) == 0 {
		// A context that ended while XREAD blocked: go-redis does not
		// interrupt a blocking read, which returns nil at its timeout.
		return nil, cursor, cerr
	}
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
func (in *Inbox) renew(ctx context.Context, edge, key string) error {
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
