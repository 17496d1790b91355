// Package sfu owns the edge's Opus voice selective forwarding unit: voice
// peers (one pion PeerConnection per client on the shared ICE-lite port),
// rooms, squads, mute lists, proximity and parental controls, the choice of
// which speakers fill each listener's K audio slots, and the per-slot RTP
// rewriting that lets a slot switch speakers without renegotiation.
//
// See README.md for the model, the eligibility and ranking rules, the slot
// rewriting and the HTTP API.
package sfu
