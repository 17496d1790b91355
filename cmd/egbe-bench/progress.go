package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// progressEvery is how often a running scenario reports that it runs.
const progressEvery = 5 * time.Second

// progress prints, every progressEvery until ctx ends, how long the
// scenario has run and what the processes it started (edges, shards,
// redis-server) have used: a long run shows it is alive and where the CPU
// goes, without touching the scenario's own output. The returned func
// stops it and waits.
func progress(ctx context.Context, w io.Writer, scenario string) func() {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fmt.Fprintf(w, "egbe-bench: %s running %s%s\n", scenario, time.Since(start).Round(time.Second), children(os.Getpid()))
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// children describes this process's child processes from /proc: name,
// pid, CPU seconds, RSS. Empty when there are none (or no /proc).
func children(parent int) string {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	tick := 100.0 // USER_HZ on Linux
	var parts []string
	for _, d := range dirs {
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15) ... rss(24), in pages.
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 22 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid != parent {
			continue
		}
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		rss, _ := strconv.ParseInt(f[21], 10, 64)
		parts = append(parts, fmt.Sprintf("%s[%s] cpu %.1fs rss %d MiB", s[open+1:end], filepath.Base(d), (ut+st)/tick, rss*int64(os.Getpagesize())>>20))
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}
