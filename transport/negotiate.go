package transport

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/httpjson"
)

// NegotiateConfig says which transports the edge offers and where.
type NegotiateConfig struct {
	// Enabled transports; a disabled one is never offered.
	WebTransport, WebRTC, WebSocket bool
	// HTTPPort and HTTPSPort are the public ports of the HTTP and the
	// HTTPS/HTTP-3 listeners. 0 means "the port the request arrived on" for
	// the request's own scheme.
	HTTPPort, HTTPSPort int
	// CertificateHashes are SHA-256 digests of the WebTransport certificate,
	// for serverCertificateHashes (dev certificates). Empty for a CA-issued
	// certificate.
	CertificateHashes [][32]byte
	// ICEServers, when set, gives the ice_servers of an answer offering
	// WebRTC: what the client's RTCPeerConnections (data channels, voice)
	// must be configured with before they make their offers.
	ICEServers ICEServersFunc
}

// DefaultNegotiateConfig offers all three transports on the DESIGN.md
// default ports.
func DefaultNegotiateConfig() NegotiateConfig {
	return NegotiateConfig{WebTransport: true, WebRTC: true, WebSocket: true, HTTPPort: 8080, HTTPSPort: 8443}
}

// Validate checks ranges.
func (c NegotiateConfig) Validate() error {
	if c.HTTPPort < 0 || c.HTTPPort > 65535 || c.HTTPSPort < 0 || c.HTTPSPort > 65535 {
		return fmt.Errorf("%w: negotiate ports out of range", ErrConfig)
	}
	if c.WebTransport && c.HTTPSPort == 0 {
		// WebTransport always needs the HTTPS port, even over plain HTTP.
		return fmt.Errorf("%w: webtransport offered without an HTTPS port", ErrConfig)
	}
	return nil
}

// NegotiateResponse is the body of GET PathNegotiate.
type NegotiateResponse struct {
	FallbackChain []Kind           `json:"fallbackChain"`
	Transports    []TransportOffer `json:"transports"`
	// ICEServers is {"iceServers":[...]} (STUN/TURN with credentials) for
	// the client's WebRTC connections to this edge; absent when WebRTC is
	// not offered or the edge hands this client none.
	ICEServers json.RawMessage `json:"ice_servers,omitempty"`
}

// TransportOffer is one usable transport.
type TransportOffer struct {
	Kind              Kind              `json:"kind"`
	URL               string            `json:"url"`
	Path              string            `json:"path"`
	CertificateHashes []CertificateHash `json:"certificateHashes,omitempty"`
	Subprotocols      []string          `json:"subprotocols,omitempty"`
}

// CertificateHash is a WebTransportHash: algorithm and base64 value.
type CertificateHash struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"value"`
}

// Negotiate answers GET PathNegotiate.
type Negotiate struct {
	cfg    NegotiateConfig   // immutable after New
	hashes []CertificateHash // immutable after New
}

// NewNegotiate returns the negotiate handler.
func NewNegotiate(cfg NegotiateConfig) (*Negotiate, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Negotiate{cfg: cfg}
	for _, h := range cfg.CertificateHashes {
		n.hashes = append(n.hashes, CertificateHash{Algorithm: "sha-256", Value: base64.StdEncoding.EncodeToString(h[:])})
	}
	return n, nil
}

// Profile is what a client declares it can open (query flags quic=0,
// webrtc=0, ws=0; absent means yes).
type Profile struct {
	QUIC, WebRTC, WebSocket bool
}

// ParseProfile reads the profile flags from a query.
func ParseProfile(q map[string][]string) Profile {
	flag := func(name string) bool {
		v, ok := q[name]
		if !ok || len(v) == 0 {
			return true
		}
		b, err := strconv.ParseBool(v[0])
		return err != nil || b // an unparsable flag does not remove a transport
	}
	return Profile{QUIC: flag("quic"), WebRTC: flag("webrtc"), WebSocket: flag("ws")}
}

// Offers lists the transports for a request to host (host[:port]) that
// arrived over TLS or not, in fallback order.
func (n *Negotiate) Offers(host string, tls bool, p Profile) []TransportOffer {
	hostname, reqPort, err := net.SplitHostPort(host)
	if err != nil {
		// No port; an IPv6 literal keeps its brackets then.
		hostname, reqPort = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), ""
	}
	if hostname == "" {
		hostname = "localhost"
	}
	// Ports: WebTransport always on HTTPS; the others on the request's own
	// scheme, so a page served over HTTPS gets wss:// (mixed content rules).
	join := func(port int, fallback string) string {
		switch {
		case port != 0:
			return net.JoinHostPort(hostname, strconv.Itoa(port))
		case fallback != "":
			return net.JoinHostPort(hostname, fallback)
		case strings.Contains(hostname, ":"):
			return "[" + hostname + "]" // IPv6 literal without a port
		default:
			return hostname
		}
	}
	httpScheme, wsScheme, port := "http", "ws", n.cfg.HTTPPort
	if tls {
		httpScheme, wsScheme, port = "https", "wss", n.cfg.HTTPSPort
	}
	plainHost := join(port, reqPort)
	var out []TransportOffer
	for _, k := range FallbackOrder {
		switch k {
		case KindWebTransport:
			if n.cfg.WebTransport && p.QUIC {
				out = append(out, TransportOffer{Kind: k, URL: "https://" + join(n.cfg.HTTPSPort, reqPort) + PathWebTransport,
					Path: PathWebTransport, CertificateHashes: n.hashes})
			}
		case KindWebRTC:
			if n.cfg.WebRTC && p.WebRTC {
				out = append(out, TransportOffer{Kind: k, URL: httpScheme + "://" + plainHost + PathWebRTC, Path: PathWebRTC})
			}
		case KindWebSocket:
			if n.cfg.WebSocket && p.WebSocket {
				out = append(out, TransportOffer{Kind: k, URL: wsScheme + "://" + plainHost + PathWebSocket, Path: PathWebSocket,
					Subprotocols: []string{SubprotocolProto, SubprotocolJSON}})
			}
		}
	}
	return out
}

// ServeHTTP answers the fallback chain, or 422 no_available_transport.
func (n *Negotiate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeHTTPError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use GET")
		return
	}
	offers := n.Offers(r.Host, r.TLS != nil, ParseProfile(r.URL.Query()))
	if len(offers) == 0 {
		writeHTTPError(w, http.StatusUnprocessableEntity, string(codec.CodeNoAvailableTransport),
			"no transport is both enabled on this edge and allowed by the client profile")
		return
	}
	resp := NegotiateResponse{Transports: offers}
	for _, o := range offers {
		resp.FallbackChain = append(resp.FallbackChain, o.Kind)
		if o.Kind == KindWebRTC && n.cfg.ICEServers != nil {
			if ice := n.cfg.ICEServers(r); json.Valid(ice) {
				resp.ICEServers = ice
			}
		}
	}
	httpjson.Write(w, http.StatusOK, resp)
}
