// Package state owns the edge's shared state behind small interfaces, each
// with a memory implementation (one node, the default) and a Redis one
// (many nodes sharing one Redis). The same contract tests run against both,
// and the Redis ones also against a real Cluster and through Sentinel.
//
// What it holds: admission state — concurrency leases (Leases), usage
// budgets (Budgets), the virtual waiting room (Queue); session pins and
// other expiring values (KV); resume-token revocations (Revocations); the
// fleet's shard directory (ShardDirectory); voice room -> edge pins
// (VoiceRooms); and the operator page's fleet board (FleetBoard). OpenRedis
// builds the client from --redis-url (single, redis+cluster://,
// redis+sentinel://).
//
// Every multi-key decision on Redis is one Lua script over keys that share
// one hash tag, so a Redis Cluster keeps them in one slot. Waiting-room keys
// carry an epoch: a flushed, restarted-empty or rolled-back Redis is
// detected and reported as ErrStateLost, never silently treated as empty.
// Redis errors wrap ErrUnavailable, which callers turn into typed 503s.
package state
