package redisstate

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/statetest"
)

// TestVoiceRoomsRedisLostKeys: a Redis that comes back empty loses the
// room keys; the holder's next heartbeat claims its rooms again.
func TestVoiceRoomsRedisLostKeys(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartServer(t)
	r := testRedis(t, &redis.Options{Addr: srv.Addr})
	rdb := r.Client()
	a := NewVoiceRooms(mustMembers(t, r, state.Member{ID: "edge-a", URL: "http://a"}), 0)
	b := NewVoiceRooms(mustMembers(t, r, state.Member{ID: "edge-b", URL: "http://b"}), 0)
	if _, _, err := a.Claim(ctx, "grove"); err != nil {
		t.Fatal(err)
	}
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if lost, err := a.Heartbeat(ctx, []string{"grove"}); err != nil || len(lost) != 0 {
		t.Fatalf("heartbeat after flush: lost %v err %v", lost, err)
	}
	if h, mine, err := b.Claim(ctx, "grove"); err != nil || h.EdgeID != "edge-a" || mine {
		t.Fatalf("after flush and heartbeat: holder %+v err %v, want edge-a", h, err)
	}

	// Redis down: typed unavailability.
	srv.Kill()
	if _, _, err := b.Claim(ctx, "grove"); !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("claim with Redis down: %v, want state.ErrUnavailable", err)
	}
	if _, err := a.Heartbeat(ctx, []string{"grove"}); !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("heartbeat with Redis down: %v, want state.ErrUnavailable", err)
	}
}

// TestShardDirectoryRedis: what only Redis has, semi-trusted content and
// an outage.
func TestShardDirectoryRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	r := testRedis(t, &redis.Options{Addr: srv.Addr})
	rdb := r.Client()
	ctx := context.Background()

	// Redis content is only semi-trusted: a corrupt, oversized or
	// misfiled record is skipped and counted; the others are listed.
	t.Run("redis/CorruptRecordsSkipped", func(t *testing.T) {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		d := NewShardDirectory(r)
		good := state.ShardRecord{ID: "good", Addr: "127.0.0.1:7000", Instances: []string{"orun-grove"}}
		if err := d.Announce(ctx, good, time.Minute); err != nil {
			t.Fatal(err)
		}
		other, _ := json.Marshal(state.ShardRecord{ID: "elsewhere", Addr: "127.0.0.1:1"})
		tooMany, _ := json.Marshal(state.ShardRecord{ID: "wide", Addr: "127.0.0.1:1", Instances: make([]string, state.MaxShardInstances+1)})
		bad := map[string]string{
			"garbage":  "{not json",
			"huge":     `{"id":"huge","addr":"127.0.0.1:1","inst":["` + strings.Repeat("x", state.MaxShardRecordBytes) + `"]}`,
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
		if len(got) != 1 || !statetest.EqualShardRecord(got[0], good) {
			t.Fatalf("list %+v, want only the good record", got)
		}
		if n := d.Corrupt(); n != uint64(len(bad)) {
			t.Fatalf("corrupt count %d, want %d", n, len(bad))
		}
	})

	// An unreachable Redis is state.ErrUnavailable on both calls.
	t.Run("redis/Down", func(t *testing.T) {
		srv.Kill()
		d := NewShardDirectory(r)
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if err := d.Announce(ctx, state.ShardRecord{ID: "s", Addr: "127.0.0.1:1"}, time.Minute); !errors.Is(err, state.ErrUnavailable) {
			t.Fatalf("announce with redis down: %v", err)
		}
		if _, err := d.List(ctx); !errors.Is(err, state.ErrUnavailable) {
			t.Fatalf("list with redis down: %v", err)
		}
	})
}

// TestKVAndTalliesDown: an unreachable Redis is state.ErrUnavailable, not "not
// found" or "nothing counted".
func TestKVAndTalliesDown(t *testing.T) {
	srv := redistest.StartServer(t)
	r := testRedis(t, &redis.Options{Addr: srv.Addr})
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := NewKV(r, "test:kv:").Get(ctx, "k"); !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("kv, redis down: %v", err)
	}
	if _, err := NewTallies(r).Read(ctx, time.Now(), "k"); !errors.Is(err, state.ErrUnavailable) {
		t.Fatalf("tallies, redis down: %v", err)
	}
}
