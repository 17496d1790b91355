package edge

import (
	"net"
	"strings"
)

// Page is one page the edge serves, for --help and the start-up log.
type Page struct {
	Path     string // "POST /v6/dev/token" for an endpoint a page is not
	Listener string // http, player-ws or admin
	What     string
	DevOnly  bool
}

// pages are the pages a newcomer opens, in the order the README's tour
// visits them.
var pages = []Page{
	{Path: "/", Listener: "http", What: "demo page: a realtime session on the best transport, voice between tabs"},
	{Path: "/queue/", Listener: "http", What: "the waiting room's page (the demo page goes there when the room is armed)"},
	{Path: "/pxstream/", Listener: "http", What: "Epic's Pixel Streaming player (--dev-streamers N gives it something to play)"},
	{Path: "/", Listener: "player-ws", What: "the same player, Epic-style, on the player port"},
	{Path: "/ops/", Listener: "admin", What: "operator page: live figures, the waiting room and its controls, live sessions and revoke"},
	{Path: "POST /v6/dev/token", Listener: "http", What: `mint an access token: {"sub","tenant","region","entitlement","roles"} -> {"token"}`, DevOnly: true},
}

// Pages lists the pages the edge serves.
func Pages() []Page { return append([]Page(nil), pages...) }

// listenerURL is a browser's URL for a listener's address: an unspecified
// host (":8080", "[::]:8080") reads as localhost.
func listenerURL(addr, path string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + path
}

// logStartup prints one line per listener and one per page, with the URL
// to open.
func (e *Edge) logStartup() {
	a := e.Addrs()
	e.log.Info("egbe-edge serving", "mode", e.cfg.Mode, "edge_id", e.edgeID)
	for _, l := range []struct{ name, addr, carries string }{
		{"http", a.HTTP, "WebSocket realtime, HTTP APIs, Epic players, the pages (TCP)"},
		{"https", a.HTTPS, "the same over TLS (TCP)"},
		{"http3", a.H3, "HTTP/3 and WebTransport (UDP)"},
		{"ice", a.ICE, "every WebRTC peer: data channels, voice, Epic players (UDP)"},
		{"streamer-ws", a.StreamerWS, "Epic streamers, any path (TCP)"},
		{"player-ws", a.PlayerWS, "Epic players, any path (TCP)"},
		{"turn", a.TURN, "TURN relays (UDP and TCP)"},
		{"admin", a.Admin, "/metrics /healthz /readyz /debug/pprof/ /ops/ (TCP)"},
	} {
		if l.addr != "" {
			e.log.Info("listening", "listener", l.name, "addr", l.addr, "carries", l.carries)
		}
	}
	for _, p := range pages {
		addr := map[string]string{"http": a.HTTP, "player-ws": a.PlayerWS, "admin": a.Admin}[p.Listener]
		if addr == "" || p.DevOnly && e.cfg.Mode != ModeDev {
			continue
		}
		method, path, found := strings.Cut(p.Path, " ")
		if !found {
			method, path = "", p.Path
		}
		args := []any{"url", listenerURL(addr, path), "what", p.What}
		if method != "" {
			args = append(args, "method", method)
		}
		e.log.Info("page", args...)
	}
}
