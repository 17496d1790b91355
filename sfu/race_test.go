//go:build race

package sfu

// raceEnabled: the race detector makes sync.Pool drop a quarter of what
// is put back, so process-wide allocation counts mean nothing.
const raceEnabled = true
