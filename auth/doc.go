// Package auth issues and verifies the edge's HS256 JWTs: access tokens
// (who a client is), resume tokens (which session and shard it may return
// to), Pixel Streaming session and streamer tokens, waiting-room queue
// tickets and admission tickets.
//
// Every token carries a "type" claim and an audience, and each Verify
// method checks both, so a token minted for one purpose is never accepted
// for another.
package auth
