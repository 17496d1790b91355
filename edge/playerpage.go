package edge

import (
	"bytes"
	"encoding/json"
	"html"
	"io/fs"
	"net/http"
	"strconv"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/signalling/matchmaker"
	"github.com/oshun/egbe-edge/web"
)

// playerPagePrefix is where the main listener serves the player page.
const playerPagePrefix = "/pxstream/"

// playerPageSettings is the page's <meta name="egbe-pxstream"> content:
// how it finds its stream on this edge.
type playerPageSettings struct {
	Auth       string `json:"auth"`                 // none (drop-in) | token
	Dev        bool   `json:"dev"`                  // dev mode: the page may mint its own access token
	Signalling string `json:"signalling,omitempty"` // path of the player signalling on this host; "" = any (the player port)
	Match      string `json:"match"`                // the match API, same origin
	DevToken   string `json:"devToken,omitempty"`   // the dev token endpoint (dev only)
}

// buildPlayerPage serves Epic's player UI at /pxstream/ on the main
// listener and at / on the player port (as Epic's server does), where a
// WebSocket upgrade still goes to the player signalling. It runs after
// buildPxstream has registered the player port's handler.
func (e *Edge) buildPlayerPage() error {
	base := playerPageSettings{Auth: e.cfg.PxstreamAuth, Dev: e.cfg.Mode == ModeDev, Match: matchmaker.PathMatch}
	if base.Dev {
		base.DevToken = "/v6/dev/token"
	}
	main := base
	main.Signalling = matchmaker.Default().SignallingPath
	page, err := newPlayerPage(main)
	if err != nil {
		return err
	}
	e.mainMux.Handle(playerPagePrefix, http.StripPrefix(playerPagePrefix[:len(playerPagePrefix)-1], page))
	e.mainMux.Handle(playerPagePrefix[:len(playerPagePrefix)-1], http.RedirectHandler(playerPagePrefix, http.StatusMovedPermanently))

	if e.playerLn != nil {
		port, err := newPlayerPage(base)
		if err != nil {
			return err
		}
		for i := range e.extraServers {
			if e.extraServers[i].ln == e.playerLn {
				e.extraServers[i].h = e.withPlayerPage(e.extraServers[i].h, port)
			}
		}
	}
	if e.cfg.DevStreamers > 0 && e.httpLn != nil {
		e.log.Info("watch the dev streamers: http://localhost:" + strconv.Itoa(portOf(e.httpLn.Addr().String())) + playerPagePrefix)
		if e.playerLn != nil {
			e.log.Info("or Epic-style on the player port: http://localhost:" + strconv.Itoa(portOf(e.playerLn.Addr().String())) + "/")
		}
	}
	return nil
}

// withPlayerPage serves the page on the player port: WebSocket upgrades
// (any path) are players, the page's own API calls go to the main mux (so
// token mode works same-origin), other GETs are the page.
func (e *Edge) withPlayerPage(players, page http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case websocket.IsWebSocketUpgrade(r):
			players.ServeHTTP(w, r)
		case r.URL.Path == matchmaker.PathMatch || (e.cfg.Mode == ModeDev && r.URL.Path == "/v6/dev/token"):
			e.mainMux.ServeHTTP(w, r)
		case r.Method == http.MethodGet || r.Method == http.MethodHead:
			page.ServeHTTP(w, r)
		default:
			players.ServeHTTP(w, r)
		}
	})
}

// playerPage serves index.html with the settings filled in, and the
// bundle and its licence notice as they are embedded.
type playerPage struct {
	index  []byte       // immutable
	assets http.Handler // immutable
}

func newPlayerPage(s playerPageSettings) (*playerPage, error) {
	index, err := fs.ReadFile(web.Player(), "index.html")
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	index = bytes.Replace(index, []byte(`<meta name="egbe-pxstream" content="{}">`),
		[]byte(`<meta name="egbe-pxstream" content="`+html.EscapeString(string(b))+`">`), 1)
	return &playerPage{index: index, assets: http.FileServerFS(web.Player())}, nil
}

func (p *playerPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use GET")
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	switch r.URL.Path {
	case "/", "", "/index.html":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store") // the settings are this edge's
		w.Header().Set("Content-Length", strconv.Itoa(len(p.index)))
		if r.Method == http.MethodGet {
			_, _ = w.Write(p.index)
		}
	case "/player.js", "/THIRD_PARTY_LICENSES.txt":
		p.assets.ServeHTTP(w, r)
	default:
		http.NotFound(w, r)
	}
}
