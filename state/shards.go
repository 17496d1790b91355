package state

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// ShardDirectory is the fleet's list of world shards: every edge with a
// live link to a shard announces it, and any edge lists the fleet's shards
// to link to the ones it was not configured with. A record lapses when no
// edge announces it any more (its ttl).
type ShardDirectory interface {
	// Announce stores rec (replacing the shard's previous record) for ttl.
	Announce(ctx context.Context, rec ShardRecord, ttl time.Duration) error
	// List returns the live records, sorted by ID, at most MaxShardRecords.
	List(ctx context.Context) ([]ShardRecord, error)
}

// ShardRecord is one shard as an edge linked to it saw it.
type ShardRecord struct {
	ID        string   `json:"id"`
	Addr      string   `json:"addr"` // link address, host:port (UDP)
	Instances []string `json:"inst,omitempty"`
	Capacity  int      `json:"cap,omitempty"`  // sessions the shard takes (0 = unbounded)
	Sessions  int      `json:"sess,omitempty"` // sessions the shard reported holding
	EdgeID    string   `json:"edge,omitempty"` // the edge that announced it
}

// Bounds on what a directory holds. A record beyond them is refused by
// Announce (ErrBadArgument) and skipped by List (counted, never a panic).
const (
	MaxShardRecords   = 256 // List returns at most this many
	MaxShardInstances = 512 // instances per record
	maxShardIDLen     = 128 // shard, instance and edge ids
	maxShardAddrLen   = 256
	// MaxShardRecordBytes bounds one stored record; 512 instances of 128
	// bytes fit.
	MaxShardRecordBytes = 96 << 10
)

// validate reports a record that does not fit the bounds above.
func (r ShardRecord) validate() error {
	switch {
	case r.ID == "" || len(r.ID) > maxShardIDLen:
		return fmt.Errorf("%w: shard id %q", ErrBadArgument, r.ID)
	case r.Addr == "" || len(r.Addr) > maxShardAddrLen:
		return fmt.Errorf("%w: shard %q address %q", ErrBadArgument, r.ID, r.Addr)
	case len(r.Instances) > MaxShardInstances:
		return fmt.Errorf("%w: shard %q announces %d instances (max %d)", ErrBadArgument, r.ID, len(r.Instances), MaxShardInstances)
	case r.Capacity < 0 || r.Sessions < 0:
		return fmt.Errorf("%w: shard %q negative capacity or sessions", ErrBadArgument, r.ID)
	case len(r.EdgeID) > maxShardIDLen:
		return fmt.Errorf("%w: edge id of shard %q too long", ErrBadArgument, r.ID)
	}
	if _, _, err := net.SplitHostPort(r.Addr); err != nil {
		return fmt.Errorf("%w: shard %q address: %w", ErrBadArgument, r.ID, err)
	}
	for _, in := range r.Instances {
		if in == "" || len(in) > maxShardIDLen {
			return fmt.Errorf("%w: shard %q instance id %q", ErrBadArgument, r.ID, in)
		}
	}
	return nil
}

func (r ShardRecord) clone() ShardRecord {
	r.Instances = slices.Clone(r.Instances)
	return r
}

// CheckAnnounce refuses a record out of bounds and a ttl <= 0.
func CheckAnnounce(rec ShardRecord, ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: shard record ttl %v must be positive", ErrBadArgument, ttl)
	}
	return rec.validate()
}

// SortShardRecords sorts records by shard id, as List returns them.
func SortShardRecords(out []ShardRecord) {
	slices.SortFunc(out, func(a, b ShardRecord) int { return strings.Compare(a.ID, b.ID) })
}

// MemoryShardDirectory is the in-process directory: one process, or
// several gateways of one test sharing it.
type MemoryShardDirectory struct {
	now func() time.Time

	mu sync.Mutex
	m  map[string]memShard // guarded by mu
}

type memShard struct {
	rec ShardRecord
	exp time.Time
}

var _ ShardDirectory = (*MemoryShardDirectory)(nil)

// NewMemoryShardDirectory returns an empty directory; now may be nil
// (time.Now).
func NewMemoryShardDirectory(now func() time.Time) *MemoryShardDirectory {
	if now == nil {
		now = time.Now
	}
	return &MemoryShardDirectory{now: now, m: map[string]memShard{}}
}

// Announce implements ShardDirectory.
func (d *MemoryShardDirectory) Announce(_ context.Context, rec ShardRecord, ttl time.Duration) error {
	if err := CheckAnnounce(rec, ttl); err != nil {
		return err
	}
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.m[rec.ID] = memShard{rec: rec.clone(), exp: now.Add(ttl)}
	return nil
}

// List implements ShardDirectory.
func (d *MemoryShardDirectory) List(context.Context) ([]ShardRecord, error) {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]ShardRecord, 0, len(d.m))
	for id, s := range d.m {
		if !now.Before(s.exp) {
			delete(d.m, id)
			continue
		}
		out = append(out, s.rec.clone())
	}
	SortShardRecords(out)
	if len(out) > MaxShardRecords {
		out = out[:MaxShardRecords]
	}
	return out, nil
}

// DecodeShardRecord decodes the record stored for id, bounded: it never
// accepts a record larger, longer or other than validate allows.
func DecodeShardRecord(id, s string) (ShardRecord, bool) {
	if len(s) > MaxShardRecordBytes {
		return ShardRecord{}, false
	}
	var rec ShardRecord
	if err := json.Unmarshal([]byte(s), &rec); err != nil {
		return ShardRecord{}, false
	}
	if rec.ID != id || rec.validate() != nil {
		return ShardRecord{}, false
	}
	return rec, true
}
