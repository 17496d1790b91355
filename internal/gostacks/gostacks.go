// Package gostacks reads this process's goroutine stacks for tests that
// count goroutines by who owns them (the goroutines-per-session bounds of
// transport and edge). Only _test files import it.
package gostacks

import (
	"runtime"
	"strings"
)

// All returns every goroutine's stack, one string each, as runtime.Stack
// prints them.
func All() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return strings.Split(string(buf), "\n\n")
}

// Entry is the function goroutine stack g was started with: its
// bottom-most frame, looking through sync.WaitGroup.Go's wrapper.
func Entry(g string) string {
	entry := ""
	for _, line := range strings.Split(g, "\n") {
		if line == "" || strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "goroutine ") || strings.HasPrefix(line, "created by ") {
			continue
		}
		fn := line
		if i := strings.LastIndex(fn, "("); i > 0 {
			fn = fn[:i]
		}
		if strings.HasPrefix(fn, "sync.(*WaitGroup).Go") {
			break
		}
		entry = fn
	}
	return entry
}
