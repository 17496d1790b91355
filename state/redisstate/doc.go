// Package redisstate is state's Redis implementation, and the only package
// of the edge that talks to Redis. Open (or New around a client) returns
// the process's one handle, Conn: the client (one server, Cluster or
// Sentinel, from --redis-url: ParseURL), the availability tracker every
// store built on it consults (conn.go: when Redis goes away every
// subsystem fails fast together), and the one script runner (scripts.go:
// EVALSHA, reloaded on NOSCRIPT in one place). keys.go lists every key and
// hash tag. Each store keeps its interface's contract (state/statetest),
// run here on one server, a real Cluster and through a real Sentinel.
package redisstate
