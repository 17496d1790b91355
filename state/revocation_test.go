package state

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/internal/redistest"
)

// roundTrips counts what a go-redis client sends: each command sent alone
// and each pipeline is one round trip. A new connection's set-up (HELLO,
// CLIENT SETINFO) is not a request's round trip and is not counted.
type roundTrips struct{ n atomic.Int64 }

func setup(cmds ...redis.Cmder) bool {
	for _, c := range cmds {
		switch c.Name() {
		case "hello", "client", "auth", "select":
		default:
			return false
		}
	}
	return true
}

func (c *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setup(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !setup(cmds...) {
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// revocationBackend is one implementation under the revocation contract,
// with a KV to pair it with for GetRevoked.
type revocationBackend struct {
	name string
	rev  Revocations
	kv   KV
	rtt  *roundTrips // nil for memory
}

func revocationBackends(t *testing.T, srv *redistest.Server) []revocationBackend {
	r := testRedis(t, &redis.Options{Addr: srv.Addr})
	rdb := r.Client()
	if err := rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	rtt := &roundTrips{}
	rdb.AddHook(rtt)
	return []revocationBackend{
		{name: "memory", rev: NewMemoryRevocations(nil), kv: NewMemoryKV(nil)},
		{name: "redis", rev: NewRedisRevocations(r, nil), kv: NewRedisKV(r, "test:pin:"), rtt: rtt},
	}
}

// TestRevocationsContract runs the same checks against memory and a real
// Redis.
func TestRevocationsContract(t *testing.T) {
	srv := redistest.StartServer(t)
	ctx := context.Background()
	for _, b := range revocationBackends(t, srv) {
		t.Run(b.name, func(t *testing.T) {
			r := b.rev
			if got, err := r.Revoked(ctx, "a", "b"); err != nil || len(got) != 0 {
				t.Fatalf("nothing revoked yet: %v %v", got, err)
			}
			if got, err := r.Revoked(ctx); err != nil || len(got) != 0 {
				t.Fatalf("no ids: %v %v", got, err)
			}
			if err := r.Revoke(ctx, "a", time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			got, err := r.Revoked(ctx, "a", "b", "c")
			if err != nil || len(got) != 1 || !got["a"] {
				t.Fatalf("revoked a: %v %v", got, err)
			}

			// Bad arguments are typed.
			for name, err := range map[string]error{
				"empty id":      r.Revoke(ctx, "", time.Now().Add(time.Minute)),
				"past deadline": r.Revoke(ctx, "x", time.Now().Add(-time.Second)),
			} {
				if !errors.Is(err, ErrBadArgument) {
					t.Errorf("%s: %v, want ErrBadArgument", name, err)
				}
			}

			// A revocation lapses at its deadline; a later revoke with an
			// earlier deadline does not shorten one.
			if err := r.Revoke(ctx, "long", time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			if err := r.Revoke(ctx, "long", time.Now().Add(100*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			if err := r.Revoke(ctx, "short", time.Now().Add(100*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				got, err := r.Revoked(ctx, "short", "long")
				if err != nil {
					t.Fatal(err)
				}
				if !got["short"] {
					if !got["long"] {
						t.Fatal("a revocation was shortened by a later, shorter one")
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("revocation outlived its deadline")
				}
				time.Sleep(20 * time.Millisecond)
			}

			// Many ids (more than one MGET chunk) are one round trip and
			// find exactly the revoked ones.
			ids := make([]string, 3*revokedMGetChunk+7)
			want := map[string]bool{}
			for i := range ids {
				ids[i] = fmt.Sprintf("s%05d", i)
				if i%701 == 3 {
					want[ids[i]] = true
					if err := r.Revoke(ctx, ids[i], time.Now().Add(time.Minute)); err != nil {
						t.Fatal(err)
					}
				}
			}
			before := b.trips()
			got, err = r.Revoked(ctx, ids...)
			if err != nil || len(got) != len(want) {
				t.Fatalf("batch: %v %v, want %v", got, err, want)
			}
			for id := range want {
				if !got[id] {
					t.Fatalf("batch misses %s", id)
				}
			}
			if b.rtt != nil && b.trips()-before != 1 {
				t.Fatalf("batch of %d ids took %d round trips, want 1", len(ids), b.trips()-before)
			}
		})
		t.Run(b.name+"/get-revoked", func(t *testing.T) {
			if err := b.kv.Put(ctx, "live", []byte("pin"), time.Minute); err != nil {
				t.Fatal(err)
			}
			if err := b.rev.Revoke(ctx, "gone", time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			if err := b.rev.Revoke(ctx, "kicked", time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			if err := b.kv.Put(ctx, "kicked", []byte("pin2"), time.Minute); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				key     string
				value   string
				revoked bool
				err     error
			}{
				{"live", "pin", false, nil},
				{"absent", "", false, ErrNotFound},
				{"gone", "", true, ErrNotFound}, // pin lapsed, still revoked
				{"kicked", "pin2", true, nil},
			} {
				before := b.trips()
				v, revoked, err := GetRevoked(ctx, b.kv, tc.key, b.rev, tc.key)
				if string(v) != tc.value || revoked != tc.revoked || !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
					t.Errorf("%s: %q %v %v, want %q %v %v", tc.key, v, revoked, err, tc.value, tc.revoked, tc.err)
				}
				if b.rtt != nil && b.trips()-before != 1 {
					t.Errorf("%s: %d round trips, want 1 (the pin read and the revocation share a pipeline)", tc.key, b.trips()-before)
				}
			}
		})
	}

	// An unreachable Redis is ErrUnavailable, never "not revoked".
	rdb := testRedis(t, &redis.Options{Addr: srv.Addr})
	srv.Kill()
	down := NewRedisRevocations(rdb, nil)
	dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := down.Revoke(dctx, "a", time.Now().Add(time.Minute)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("revoke, redis down: %v", err)
	}
	if _, err := down.Revoked(dctx, "a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("revoked, redis down: %v", err)
	}
	if _, _, err := GetRevoked(dctx, NewRedisKV(rdb, "test:pin:"), "a", down, "a"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("get-revoked, redis down: %v", err)
	}
}

func (b revocationBackend) trips() int64 {
	if b.rtt == nil {
		return 0
	}
	return b.rtt.n.Load()
}

// TestRevocationNotices: every watcher hears each revocation as it
// happens (Redis: across clients, as across edges).
func TestRevocationNotices(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, b := range revocationBackends(t, srv) {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			watcher := b.rev
			if b.name == "redis" { // another client: another edge
				watcher = NewRedisRevocations(testRedis(t, &redis.Options{Addr: srv.Addr}), nil)
			}
			heard := make(chan string, 4)
			done := make(chan error, 1)
			go func() {
				done <- watcher.(RevocationNotices).Watch(ctx, func(id string) { heard <- id })
			}()
			// A subscription takes a moment to be in place: revoke until
			// the first notice arrives, then check one more exactly.
			deadline := time.After(10 * time.Second)
			for first := false; !first; {
				if err := b.rev.Revoke(ctx, "warm-up", time.Now().Add(time.Minute)); err != nil {
					t.Fatal(err)
				}
				select {
				case id := <-heard:
					first = id == "warm-up"
				case <-time.After(100 * time.Millisecond):
				case <-deadline:
					t.Fatal("no notice within 10 s")
				}
			}
			for len(heard) > 0 {
				<-heard
			}
			if err := b.rev.Revoke(ctx, "s_42", time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			select {
			case id := <-heard:
				if id != "s_42" {
					t.Fatalf("heard %q, want s_42", id)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the revocation of s_42 was not heard")
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Watch ended with %v after its context", err)
			}
		})
	}
}
