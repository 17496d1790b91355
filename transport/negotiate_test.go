package transport

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/codec"
)

func TestNegotiate(t *testing.T) {
	hash := [32]byte{1, 2, 3}
	b64 := base64.StdEncoding.EncodeToString(hash[:])
	all := DefaultNegotiateConfig()
	all.CertificateHashes = [][32]byte{hash}
	noWT := all
	noWT.WebTransport = false

	wt := TransportOffer{Kind: KindWebTransport, URL: "https://edge.example:8443/v6/realtime/webtransport",
		Path: PathWebTransport, CertificateHashes: []CertificateHash{{"sha-256", b64}}}
	rtc := TransportOffer{Kind: KindWebRTC, URL: "http://edge.example:8080/v6/realtime/webrtc", Path: PathWebRTC}
	ws := TransportOffer{Kind: KindWebSocket, URL: "ws://edge.example:8080/v6/realtime/websocket", Path: PathWebSocket,
		Subprotocols: []string{SubprotocolProto, SubprotocolJSON}}

	tests := []struct {
		name  string
		cfg   NegotiateConfig
		host  string
		query string
		want  []TransportOffer // nil: 422
	}{
		{"full profile", all, "edge.example:8080", "", []TransportOffer{wt, rtc, ws}},
		{"quic=0", all, "edge.example:8080", "quic=0", []TransportOffer{rtc, ws}},
		{"webrtc=0", all, "edge.example:8080", "webrtc=0", []TransportOffer{wt, ws}},
		{"quic=0&webrtc=0", all, "edge.example:8080", "quic=0&webrtc=0", []TransportOffer{ws}},
		{"flags=1 keep", all, "edge.example:8080", "quic=1&ws=true", []TransportOffer{wt, rtc, ws}},
		{"edge disabled webtransport", noWT, "edge.example:8080", "", []TransportOffer{rtc, ws}},
		{"all off", all, "edge.example:8080", "quic=0&webrtc=0&ws=0", nil},
		{"disabled plus profile", noWT, "edge.example", "webrtc=0&ws=0", nil},
		{"host without port uses configured port", all, "edge.example", "", []TransportOffer{wt, rtc, ws}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := NewNegotiate(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest("GET", "http://"+tt.host+PathNegotiate+"?"+tt.query, nil)
			rec := httptest.NewRecorder()
			n.ServeHTTP(rec, req)
			if tt.want == nil {
				var e httpError
				_ = json.Unmarshal(rec.Body.Bytes(), &e)
				if rec.Code != http.StatusUnprocessableEntity || e.Code != string(codec.CodeNoAvailableTransport) || e.Message == "" {
					t.Fatalf("got %d %s, want 422 no_available_transport", rec.Code, rec.Body)
				}
				return
			}
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var got NegotiateResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Transports, tt.want) {
				t.Errorf("transports\n got %+v\nwant %+v", got.Transports, tt.want)
			}
			for i, k := range got.FallbackChain {
				if k != tt.want[i].Kind {
					t.Errorf("fallbackChain = %v", got.FallbackChain)
				}
			}
		})
	}
}

func TestNegotiateURLs(t *testing.T) {
	cfg := DefaultNegotiateConfig()
	n, err := NewNegotiate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, host string
		tls        bool
		wantWS     string
		wantWT     string
	}{
		{"ipv4", "127.0.0.1:8080", false, "ws://127.0.0.1:8080/v6/realtime/websocket", "https://127.0.0.1:8443/v6/realtime/webtransport"},
		{"ipv6", "[::1]:8080", false, "ws://[::1]:8080/v6/realtime/websocket", "https://[::1]:8443/v6/realtime/webtransport"},
		{"over tls", "localhost:8443", true, "wss://localhost:8443/v6/realtime/websocket", "https://localhost:8443/v6/realtime/webtransport"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			offers := n.Offers(tt.host, tt.tls, Profile{true, true, true})
			if offers[0].URL != tt.wantWT || offers[2].URL != tt.wantWS {
				t.Errorf("urls %s %s", offers[0].URL, offers[2].URL)
			}
		})
	}
	// Port 0: keep the port the request came in on.
	cfg.HTTPPort = 0
	n, _ = NewNegotiate(cfg)
	if got := n.Offers("edge:9999", false, Profile{true, true, true})[2].URL; got != "ws://edge:9999/v6/realtime/websocket" {
		t.Errorf("port 0 url %s", got)
	}
	if got := n.Offers("[::1]", false, Profile{true, true, true})[2].URL; got != "ws://[::1]/v6/realtime/websocket" {
		t.Errorf("ipv6 no port url %s", got)
	}
}

func TestNegotiateMethod(t *testing.T) {
	n, _ := NewNegotiate(DefaultNegotiateConfig())
	rec := httptest.NewRecorder()
	n.ServeHTTP(rec, httptest.NewRequest("POST", PathNegotiate, nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("status %d", rec.Code)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Default()
	bad.WebSocket.ReadBufferSize = 1
	bad2 := Default()
	bad2.WebTransport.KeepAlivePeriod = time.Hour
	bad3 := Default()
	bad3.Negotiate.HTTPSPort = 0
	for i, c := range []Config{bad, bad2, bad3} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("case %d: %v", i, err)
		}
	}
}
