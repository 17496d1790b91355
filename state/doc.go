// Package state owns the edge's shared state behind small interfaces, each
// with a memory implementation (one node, the default) and a Redis one
// (many nodes sharing one Redis). The same contract tests run against both.
//
// This package holds the admission state: concurrency leases (Leases),
// usage budgets (Budgets) and the virtual waiting room (Queue). Every
// multi-key decision on Redis is one Lua script over keys that share one
// hash tag, so a Redis Cluster keeps them in one slot. Waiting-room keys
// carry an epoch: a flushed, restarted-empty or rolled-back Redis is
// detected and reported as ErrStateLost, never silently treated as empty.
package state
