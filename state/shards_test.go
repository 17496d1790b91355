package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
)

// TestShardDirectoryContract runs the same checks against memory and a
// real Redis.
func TestShardDirectoryContract(t *testing.T) {
	srv := redistest.StartServer(t)
	r := testRedis(t, &redis.Options{Addr: srv.Addr})
	rdb := r.Client()
	impls := []struct {
		name string
		new  func(t *testing.T) ShardDirectory
	}{
		{"memory", func(*testing.T) ShardDirectory { return NewMemoryShardDirectory(nil) }},
		{"redis", func(t *testing.T) ShardDirectory {
			if err := rdb.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			return NewRedisShardDirectory(r)
		}},
	}
	ctx := context.Background()
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			t.Run("AnnounceAndList", func(t *testing.T) {
				d := impl.new(t)
				if got, err := d.List(ctx); err != nil || len(got) != 0 {
					t.Fatalf("empty directory: %v %v", got, err)
				}
				west := ShardRecord{ID: "west", Addr: "10.0.0.2:7000", Instances: []string{"aye-shore"}, Capacity: 500, Sessions: 3, EdgeID: "edge-a"}
				east := ShardRecord{ID: "east", Addr: "10.0.0.1:7000", Instances: []string{"orun-grove", "orun-market"}, EdgeID: "edge-b"}
				for _, r := range []ShardRecord{west, east} {
					if err := d.Announce(ctx, r, time.Minute); err != nil {
						t.Fatal(err)
					}
				}
				got, err := d.List(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != 2 || !equalRecord(got[0], east) || !equalRecord(got[1], west) {
					t.Fatalf("list %+v, want east then west as announced", got)
				}
				// The caller owns what List returns.
				got[0].Instances[0] = "mutated"
				if again, _ := d.List(ctx); again[0].Instances[0] != "orun-grove" {
					t.Fatalf("List handed out the stored slice: %+v", again)
				}
			})
			t.Run("ReannounceReplaces", func(t *testing.T) {
				d := impl.new(t)
				r := ShardRecord{ID: "s1", Addr: "10.0.0.1:7000", Instances: []string{"a", "b"}, Sessions: 1}
				if err := d.Announce(ctx, r, time.Minute); err != nil {
					t.Fatal(err)
				}
				r2 := ShardRecord{ID: "s1", Addr: "10.0.0.9:7001", Instances: []string{"c"}, Sessions: 7}
				if err := d.Announce(ctx, r2, time.Minute); err != nil {
					t.Fatal(err)
				}
				if got, err := d.List(ctx); err != nil || len(got) != 1 || !equalRecord(got[0], r2) {
					t.Fatalf("after re-announce: %+v %v", got, err)
				}
			})
			t.Run("Lapses", func(t *testing.T) {
				d := impl.new(t)
				live := ShardRecord{ID: "live", Addr: "127.0.0.1:1"}
				if err := d.Announce(ctx, live, time.Minute); err != nil {
					t.Fatal(err)
				}
				if err := d.Announce(ctx, ShardRecord{ID: "silent", Addr: "127.0.0.1:2"}, 50*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				// Refreshed before it lapses, a record stays.
				if err := d.Announce(ctx, ShardRecord{ID: "kept", Addr: "127.0.0.1:3"}, 50*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				if err := d.Announce(ctx, ShardRecord{ID: "kept", Addr: "127.0.0.1:3"}, time.Minute); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(5 * time.Second)
				for {
					got, err := d.List(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if ids := recordIDs(got); slices.Equal(ids, []string{"kept", "live"}) {
						break
					} else if time.Now().After(deadline) {
						t.Fatalf("a silent shard never lapsed (or a live one did): %v", ids)
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
			t.Run("BadArguments", func(t *testing.T) {
				d := impl.new(t)
				many := make([]string, MaxShardInstances+1)
				for i := range many {
					many[i] = fmt.Sprintf("i%d", i)
				}
				for name, c := range map[string]struct {
					rec ShardRecord
					ttl time.Duration
				}{
					"empty id":          {ShardRecord{Addr: "127.0.0.1:1"}, time.Minute},
					"long id":           {ShardRecord{ID: strings.Repeat("x", 200), Addr: "127.0.0.1:1"}, time.Minute},
					"no address":        {ShardRecord{ID: "s"}, time.Minute},
					"address sans port": {ShardRecord{ID: "s", Addr: "10.0.0.1"}, time.Minute},
					"empty instance":    {ShardRecord{ID: "s", Addr: "127.0.0.1:1", Instances: []string{""}}, time.Minute},
					"too many":          {ShardRecord{ID: "s", Addr: "127.0.0.1:1", Instances: many}, time.Minute},
					"negative load":     {ShardRecord{ID: "s", Addr: "127.0.0.1:1", Sessions: -1}, time.Minute},
					"zero ttl":          {ShardRecord{ID: "s", Addr: "127.0.0.1:1"}, 0},
				} {
					if err := d.Announce(ctx, c.rec, c.ttl); !errors.Is(err, ErrBadArgument) {
						t.Errorf("%s: %v, want ErrBadArgument", name, err)
					}
				}
				if got, _ := d.List(ctx); len(got) != 0 {
					t.Fatalf("a refused record was stored: %+v", got)
				}
			})
		})
	}

	// Redis content is only semi-trusted: a corrupt, oversized or
	// misfiled record is skipped and counted; the others are listed.
	t.Run("redis/CorruptRecordsSkipped", func(t *testing.T) {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		d := NewRedisShardDirectory(r)
		good := ShardRecord{ID: "good", Addr: "127.0.0.1:7000", Instances: []string{"orun-grove"}}
		if err := d.Announce(ctx, good, time.Minute); err != nil {
			t.Fatal(err)
		}
		other, _ := json.Marshal(ShardRecord{ID: "elsewhere", Addr: "127.0.0.1:1"})
		tooMany, _ := json.Marshal(ShardRecord{ID: "wide", Addr: "127.0.0.1:1", Instances: make([]string, MaxShardInstances+1)})
		bad := map[string]string{
			"garbage":  "{not json",
			"huge":     `{"id":"huge","addr":"127.0.0.1:1","inst":["` + strings.Repeat("x", maxShardRecordBytes) + `"]}`,
			"misfiled": string(other),
			"wide":     string(tooMany),
			"noaddr":   `{"id":"noaddr"}`,
			"array":    `[1,2,3]`,
		}
		exp := float64(time.Now().Add(time.Minute).UnixMilli())
		for id, v := range bad {
			rdb.Set(ctx, shardsKeyPrefix+id, v, time.Minute)
			rdb.ZAdd(ctx, shardsIndex, redis.Z{Score: exp, Member: id})
		}
		// An index entry whose key lapsed is not corruption.
		rdb.ZAdd(ctx, shardsIndex, redis.Z{Score: exp, Member: "lapsed"})
		got, err := d.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !equalRecord(got[0], good) {
			t.Fatalf("list %+v, want only the good record", got)
		}
		if n := d.Corrupt(); n != uint64(len(bad)) {
			t.Fatalf("corrupt count %d, want %d", n, len(bad))
		}
	})

	// An unreachable Redis is ErrUnavailable on both calls.
	t.Run("redis/Down", func(t *testing.T) {
		srv.Kill()
		d := NewRedisShardDirectory(r)
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := d.Announce(ctx, ShardRecord{ID: "s", Addr: "127.0.0.1:1"}, time.Minute); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("announce with redis down: %v", err)
		}
		if _, err := d.List(ctx); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("list with redis down: %v", err)
		}
	})
}

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
		rec, ok := decodeShardRecord(id, s)
		if !ok {
			return
		}
		if rec.ID != id || rec.validate() != nil || len(rec.Instances) > MaxShardInstances {
			t.Fatalf("accepted %+v for %q", rec, id)
		}
	})
}

func equalRecord(a, b ShardRecord) bool {
	return a.ID == b.ID && a.Addr == b.Addr && slices.Equal(a.Instances, b.Instances) &&
		a.Capacity == b.Capacity && a.Sessions == b.Sessions && a.EdgeID == b.EdgeID
}

func recordIDs(rs []ShardRecord) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return ids
}
