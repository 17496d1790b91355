// Package matchmaker owns the Pixel Streaming match: it turns a browser's
// "give me a stream" request into a POP, a leased idle streamer and a
// session JWT (POST /api/v6/pxstream/match, alias /api/v3/pxstream/match).
//
// The fleet is live: utilisation and free workers come from the streamer
// registry (the Fleet interface); a static Topology supplies what
// registration cannot — per-client-region RTT maps, residency scopes,
// session capacity and GPU quotas. Admission (caps, budgets, abuse) plugs in
// through the Admitter seam. CheckOffer verifies a streamer's SDP offer
// advertises the leased codec; OfferCheck adapts it to the broker's hook.
//
// See README.md for the scoring formula and the refusal table.
package matchmaker
