// Package signalling is the edge's Epic Pixel Streaming signalling broker
// (wire-compatible with Epic's UE5.5 signalling server) and its live
// streamer registry.
//
// Unmodified Unreal Engine workers connect to StreamerHandler as streamers;
// unmodified browsers running Epic's frontend library connect to
// PlayerHandler as players; the Server relays SDP and ICE between them in
// order per connection. Registry tracks each streamer's POP, codecs and
// lease state for the matchmaker (signalling/matchmaker). README.md beside
// this file describes the protocol as implemented.
package signalling
