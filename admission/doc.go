// Package admission decides who gets in and on which surface: the launch
// tier router (native / Pixel Streaming / local-render fallback / static),
// the region and tenant gate in front of it, Pixel Streaming admission
// (concurrency caps, free-tier budget, concert walk-up, backpressure), the
// abuse classifier, the idle lifecycle of leased streamers, realtime
// handshake admission, and the virtual waiting room. Every number is policy
// data (policy_default.json, embedded; operators ship their own file and
// check it with CheckPolicy). Shared state lives behind the state package's
// interfaces. See README.md.
package admission
