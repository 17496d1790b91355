package transport

import "net/http"

// CrossOrigin answers CORS for h: a fleet's edges serve one another's
// pages (the demo page moves its session to the edge holding its voice
// room), so negotiate, the WebRTC offer and voice are callable from other
// origins. They authenticate by bearer token or in-band hello, never by
// cookie, so an origin grants nothing; with --allowed-origin set, only
// those origins are answered, as for WebSocket. Preflights end here.
func CrossOrigin(allowed []string, h http.Handler) http.Handler {
	origins := NewOrigins(allowed)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" || !origins.Allow(origin) {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Access-Control-Allow-Origin", origin)
		w.Header().Add("Vary", "Origin")
		// WHIP's ICE servers ride in Link headers (the WebRTC answer).
		w.Header().Set("Access-Control-Expose-Headers", "Link")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			w.Header().Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
			w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
			w.Header().Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.ServeHTTP(w, r)
	})
}
