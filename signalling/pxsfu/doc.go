// Package pxsfu is a Pixel Streaming SFU in Go (pion): it fans one
// Unreal Engine streamer out to hundreds of players, speaking the SFU side
// of Epic's signalling protocol (PIXEL_STREAMING_SFU.md), so it runs
// against any Epic-compatible signalling server's SFU port: the edge's
// (--sfu-ws, where the edge can also run it in-process, --pxsfu) or Epic's
// own wilbur.
//
// On its one signalling socket the SFU is a player of the streamer it
// subscribes to (it answers the streamer's offer, ICE-lite and without
// trickle, accepting simulcast as RID or SSRC groups) and a streamer to
// its own players (it offers each one sendonly track per upstream track,
// sfu:true with the upstream's scalabilityMode). Per player it forwards one
// simulcast layer, chosen by the player's layerPreference and bounded by
// its bandwidth estimate (REMB), switching only on key frames; key-frame
// requests upstream are rate-limited per layer. Data channels are relayed
// both ways per player, non-multiplexed (per-player SCTP streams on the
// streamer's association) or multiplexed (one stream, the 199/198 framing
// of internal/pxmux).
//
// README.md beside the signalling package describes the protocol; the
// per-packet path (forward.go) allocates nothing.
package pxsfu
