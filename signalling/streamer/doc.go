// Package streamer is a synthetic Pixel Streaming streamer: it connects to a
// signalling server's streamer port exactly as a UE5.5 worker does (Epic
// protocol, see PIXEL_STREAMING.md), and answers every playerConnected with
// a real pion WebRTC offer carrying an H.264 test-pattern video track and a
// data channel. It trickles ICE, applies answers and remote candidates,
// pings, and reconnects with backoff when its socket drops.
//
// The video is generated here (PatternH264: I_PCM macroblocks, no encoder
// needed). The offer always carries H.264; Config.Codecs is only what the
// streamer advertises on registration, so advertising another codec makes
// the matchmaker's codec check fail on purpose.
//
// cmd/egbe-streamer wraps Run; the edge starts N in-process for
// --dev-streamers.
package streamer
