// Package codec owns the egbe wire protocol: the protobuf schema
// (egbe.proto, package egbe.v1) and its generated Go, stream framing, the
// wire error-code table, and the hand-written per-client data path that
// turns one shard snapshot into what each client receives:
//
//	World (one instance tick, sorted by ID; DecodeShardFrame)
//	  -> Index.Build              grid cells, once per tick for every client
//	  -> Index.Project(Window)    interest window: radius, 32 agents / 8 players,
//	                              focus kept, self excluded (= Project)
//	  -> Diff(prev projection)    upserts + removed IDs
//	  -> AppendDeltaEnvelope      ServerEnvelope bytes, no proto.Marshal
//	  -> Budget.Allow             256 kbit/s token bucket
//
// plus envelope decoding/encoding for the binary and JSON lanes (the
// per-message client envelopes and shard frames by protowire, without
// reflection: DecodeClientMsg, DecodeShardFrame), and
// handshake negotiation (Negotiate). The hot-path functions do not allocate
// given buffers of sufficient capacity; tests hold them to that.
//
// See README.md for the protocol in brief.
package codec
