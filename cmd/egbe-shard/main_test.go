package main

import (
	"context"
	"io"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--instances", "a, b,c", "--agents", "5"}, io.Discard, func(addr string) { got <- addr })
	}()
	select {
	case addr := <-got:
		if addr == "" {
			t.Fatal("no address")
		}
	case err := <-done:
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--nope"},
		{"--instances", ""},
		{"--instances", "a,a"},
		{"--agents", "-1"},
	} {
		if err := run(context.Background(), append([]string{"--listen", "127.0.0.1:0"}, args...), io.Discard, nil); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
