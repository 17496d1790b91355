// Package epictest holds the end-to-end test that Epic's own Pixel
// Streaming frontend (@epicgames-ps/lib-pixelstreamingfrontend-ue5.5@1.3.0,
// bundled by esbuild from web/epic at test time) plays the synthetic
// streamer's video through the signalling broker in headless Chromium, in
// drop-in mode and in token mode through the matchmaker. It has no
// non-test code.
package epictest
