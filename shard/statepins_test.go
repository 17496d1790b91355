package shard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/state"
)

func TestStatePins(t *testing.T) {
	now := time.Now()
	pins := NewStatePins(state.NewMemoryKV(nil), time.Minute, nil)
	ctx := context.Background()
	if _, err := pins.Get(ctx, "nobody", now); !errors.Is(err, ErrPinNotFound) {
		t.Fatalf("absent: %v", err)
	}
	want := Pin{SessionID: "s1", ShardID: "a", InstanceID: "orun-grove", Subject: "u", EntityID: 7}
	if err := pins.Put(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := pins.Get(ctx, "s1", now)
	if err != nil || got != want {
		t.Fatalf("connected pin: %+v %v", got, err)
	}
	want.ExpiresAt = now.Add(60 * time.Second)
	if err := pins.Put(ctx, want); err != nil {
		t.Fatal(err)
	}
	if got, err := pins.Get(ctx, "s1", now.Add(59*time.Second)); err != nil || !got.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("within retention: %+v %v", got, err)
	}
	if _, err := pins.Get(ctx, "s1", now.Add(61*time.Second)); !errors.Is(err, ErrPinNotFound) {
		t.Fatalf("past retention: %v", err)
	}
}
