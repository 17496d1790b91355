package state

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// TestMemoryShardDirectoryClock: the memory directory lapses records by
// its injected clock.
func TestMemoryShardDirectoryClock(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	d := NewMemoryShardDirectory(func() time.Time { return now })
	ctx := context.Background()
	if err := d.Announce(ctx, ShardRecord{ID: "s1", Addr: "127.0.0.1:1"}, 6*time.Second); err != nil {
		t.Fatal(err)
	}
	now = now.Add(5 * time.Second)
	if got, _ := d.List(ctx); len(got) != 1 {
		t.Fatalf("lapsed early: %+v", got)
	}
	now = now.Add(time.Second)
	if got, _ := d.List(ctx); len(got) != 0 {
		t.Fatalf("outlived its ttl: %+v", got)
	}
}

// FuzzDecodeShardRecord: whatever is stored under a shard key, decoding
// neither panics nor accepts a record outside the bounds.
func FuzzDecodeShardRecord(f *testing.F) {
	seed, _ := json.Marshal(ShardRecord{ID: "s1", Addr: "127.0.0.1:7000", Instances: []string{"orun-grove"}, Capacity: 10, Sessions: 2, EdgeID: "e1"})
	f.Add("s1", string(seed))
	f.Add("s1", `{"id":"s1","addr":"x"}`)
	f.Add("s1", `{"id":"s1","addr":"127.0.0.1:1","inst":[""]}`)
	f.Add("s1", "")
	f.Fuzz(func(t *testing.T, id, s string) {
		rec, ok := DecodeShardRecord(id, s)
		if !ok {
			return
		}
		if rec.ID != id || rec.validate() != nil || len(rec.Instances) > MaxShardInstances {
			t.Fatalf("accepted %+v for %q", rec, id)
		}
	})
}
