// Package turnrelay owns the edge's embedded TURN server (RFC 8656, on
// pion/turn): UDP and TCP listeners on one port, UDP relays from a port
// range, and the short-lived credentials that open it. Credentials follow
// the TURN REST scheme coturn implements as use-auth-secret (username
// "<unix expiry>:<subject>", credential base64(HMAC-SHA1(secret, username))),
// so one shared secret opens the embedded server and a coturn fleet alike.
//
// It also owns the abuse rules a public relay needs: allocations capped per
// user and per network, relayed bandwidth capped per allocation, every
// allocation ending when its credential expires, no relaying to private or
// loopback peers unless configured, and a counted reason for every refusal.
//
// See README.md for the protocol walk-through, the rules and the metrics.
package turnrelay
