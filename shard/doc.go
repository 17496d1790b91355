// Package shard is the edge's realtime session gateway: it runs each
// client's handshake (token, admission, negotiation), resolves the world
// shard holding the client's instance (resume pin first, then the
// directory), and proxies the session over one multiplexed QUIC link per
// shard. Shard snapshots arrive once per instance per tick per link and are
// projected, delta-encoded and budgeted per client here (fan-out at the
// edge). See README.md for the link protocol.
package shard
