// Package bench is the load harness behind cmd/egbe-bench: scenarios that
// drive real clients at an edge (or at a bare baseline server measured in
// the same run) and report latency percentiles, throughput, errors, and
// the server process's CPU time and RSS read from /proc.
package bench
