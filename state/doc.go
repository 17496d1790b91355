// Package state owns the edge's shared state behind small interfaces, each
// with a memory implementation (one node, the default; here) and a Redis
// one (many nodes sharing one Redis; state/redisstate, the only package of
// the edge that talks to Redis). Every implementation keeps the same
// contract (state/statetest), run on memory, and on Redis on one server, a
// real Cluster and a master found through a real Sentinel; an
// implementation of one's own is checked by calling the same suite.
//
// The stores:
//   - admission: concurrency leases (Leases), usage budgets (Budgets),
//     expiring counters (Tallies), the virtual waiting room (Queue),
//     concert seats per SFU (Seats);
//   - expiring values (KV): admission records, realtime session pins;
//   - resume-token revocations and their notices (Revocations,
//     RevocationNotices);
//   - the fleet's shard directory (ShardDirectory);
//   - the fleet's membership (Members): the one answer to "which edges
//     are alive", asked by voice rooms, the fleet board and Pixel
//     Streaming signalling;
//   - voice room -> edge pins (VoiceRooms), held by live members;
//   - the operator page's fleet board (FleetBoard), showing live members;
//   - the Pixel Streaming streamer registry (Streamers) and the cross-edge
//     inbox (Inbox) that signalling relays through.
//
// Availability is what a shared store says without a round trip: on Redis
// one tracker per process (redisstate.Conn) that every store consults, so
// when Redis goes away every subsystem fails fast together, and /readyz
// reads the same verdict.
//
// Every multi-key decision on Redis is one Lua script over keys that share
// one hash tag, so a Redis Cluster keeps them in one slot
// (state/redisstate/keys.go lists every key). Waiting-room keys carry an
// epoch: a flushed, restarted-empty or rolled-back Redis is detected and
// reported as ErrStateLost, never silently treated as empty. Store errors
// wrap ErrUnavailable, which callers turn into typed 503s. Times that
// drive behaviour come from the caller's injected clock or, for liveness
// judged across edges (membership, shard records), from Redis's own clock.
package state
