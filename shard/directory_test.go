package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/state"
)

func TestDirectory(t *testing.T) {
	d := NewDirectory(map[string]string{"a": "1.2.3.4:1", "b": "1.2.3.4:2"}, map[string]string{"grove": "a"})
	if _, err := d.RouteFor("nowhere"); !errors.Is(err, ErrUnknownInstance) {
		t.Fatalf("unknown: %v", err)
	}
	// Registration adds instances but never moves a configured one.
	d.Register("b", []string{"grove", "shore"}, 100, 3)
	d.Register("ghost", []string{"void"}, 1, 0)
	if r, _ := d.RouteFor("grove"); r.ShardID != "a" {
		t.Fatalf("grove moved to %s", r.ShardID)
	}
	r, err := d.RouteFor("shore")
	if err != nil || r.ShardID != "b" || r.Capacity != 100 || r.Sessions != 3 || r.Healthy {
		t.Fatalf("shore %+v %v", r, err)
	}
	if _, err := d.RouteFor("void"); err == nil {
		t.Fatal("an unknown shard registered an instance")
	}
	d.SetHealth("b", true)
	if r, _ := d.RouteFor("shore"); !r.Healthy {
		t.Fatal("health not recorded")
	}
	if rs := d.Routes(); len(rs) != 2 || rs[0].InstanceID != "grove" {
		t.Fatalf("routes %+v", rs)
	}
}

// TestMemoryPins is the PinStore contract; a Redis store must pass it too.
func TestMemoryPins(t *testing.T) {
	testPinStore(t, NewMemoryPins(nil))
}

func TestStatePinsContract(t *testing.T) {
	testPinStore(t, NewStatePins(state.NewMemoryKV(nil), time.Minute, nil))
}

func testPinStore(t *testing.T, ps PinStore) {
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	if _, err := ps.Get(ctx, "s1", now); !errors.Is(err, ErrPinNotFound) {
		t.Fatalf("empty store: %v", err)
	}
	p := Pin{SessionID: "s1", ShardID: "a", InstanceID: "grove", Subject: "ada", EntityID: 7}
	if err := ps.Put(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got, err := ps.Get(ctx, "s1", now.Add(24*time.Hour)); err != nil || got.ShardID != "a" || got.EntityID != 7 {
		t.Fatalf("connected pin: %+v %v", got, err)
	}
	p.ExpiresAt = now.Add(60 * time.Second)
	if err := ps.Put(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Get(ctx, "s1", now.Add(59*time.Second)); err != nil {
		t.Fatalf("inside the TTL: %v", err)
	}
	if _, err := ps.Get(ctx, "s1", now.Add(60*time.Second)); !errors.Is(err, ErrPinNotFound) {
		t.Fatalf("at the TTL: %v", err)
	}
}

func TestMemoryPinsSweep(t *testing.T) {
	m := NewMemoryPins(nil)
	past := time.Now().Add(-time.Minute)
	for i := range 1024 {
		_ = m.Put(context.Background(), Pin{SessionID: string(rune('a'+i%26)) + time.Duration(i).String(), ShardID: "a", ExpiresAt: past})
	}
	if n := m.Len(); n > 1 {
		t.Fatalf("%d expired pins kept after a sweep", n)
	}
}
