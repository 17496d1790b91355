package gostacks

import (
	"strings"
	"sync"
	"testing"
)

func parked(ready *sync.WaitGroup, stop chan struct{}) {
	ready.Done()
	<-stop
}

// TestEntry: a goroutine started directly and one started through
// sync.WaitGroup.Go are both found by the function they run.
func TestEntry(t *testing.T) {
	stop := make(chan struct{})
	var ready, wg sync.WaitGroup
	ready.Add(2)
	go parked(&ready, stop)
	wg.Go(func() { parked(&ready, stop) })
	ready.Wait()
	defer func() { close(stop); wg.Wait() }()
	direct, viaGo := 0, 0
	for _, g := range All() {
		switch e := Entry(g); {
		case strings.HasSuffix(e, "gostacks.parked"):
			direct++
		case strings.HasSuffix(e, "gostacks.TestEntry.func1"):
			viaGo++
		}
	}
	if direct != 1 || viaGo != 1 {
		t.Fatalf("found %d direct and %d WaitGroup.Go goroutines, want 1 and 1", direct, viaGo)
	}
}
