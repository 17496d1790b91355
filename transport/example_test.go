package transport_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/oshun/egbe-edge/internal/devcert"
	"github.com/oshun/egbe-edge/internal/iceport"
	"github.com/oshun/egbe-edge/transport"
)

// Example wires the four endpoints the way the edge does: WebSocket,
// WebRTC and negotiate on the HTTP mux, which HTTP/3 also serves, and
// WebTransport owning the UDP socket.
func Example() {
	ctx := context.Background()
	logger := slog.Default()
	m := transport.NewMetrics(prometheus.NewRegistry())
	session := func(ctx context.Context, c transport.Conn) { /* hello, admission, proxy */ }

	cert, hash, _ := devcert.Generate(nil, devcert.DefaultValidity)
	cfg := transport.Default()
	cfg.Negotiate.CertificateHashes = [][32]byte{hash}

	port, _ := iceport.Listen(iceport.Config{Listen: ":8444"})
	ws, _ := transport.NewWebSocket(cfg.WebSocket, session, logger, m)
	rtc, _ := transport.NewWebRTC(cfg.WebRTC, port, session, logger, m)
	neg, _ := transport.NewNegotiate(cfg.Negotiate)
	wt, _ := transport.NewWebTransport(cfg.WebTransport, session, logger, m)

	mux := http.NewServeMux()
	mux.Handle("GET "+transport.PathNegotiate, neg)
	mux.Handle(transport.PathWebSocket, ws)
	mux.Handle("POST "+transport.PathWebRTC, rtc)

	udp, _ := net.ListenPacket("udp", ":8443")
	tlsConf := &tls.Config{Certificates: []tls.Certificate{cert}}
	go wt.Serve(ctx, udp, tlsConf, mux) // returns when ctx ends
	// ... http.Server{Handler: mux} on :8080 and TLS :8443 ...

	// Drain: a fresh timeout context for each (STYLE.md).
	_ = ws.Shutdown(ctx)
	_ = rtc.Shutdown(ctx)
	_ = wt.Shutdown(ctx)
}
