package edge

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/devcert"
	"github.com/oshun/egbe-edge/internal/iceport"
	"github.com/oshun/egbe-edge/internal/opsboard"
	"github.com/oshun/egbe-edge/shard"
	"github.com/oshun/egbe-edge/signalling/matchmaker"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/redisstate"
)

// devCertValidity: Chromium accepts serverCertificateHashes only for
// certificates valid at most 14 days.
const devCertValidity = 10 * 24 * time.Hour

// shutdownTimeout bounds the whole drain-and-close sequence after the run
// context ends. It is a fresh context, never the cancelled one.
const shutdownTimeout = 30 * time.Second

// Edge is one running egbe-edge process.
type Edge struct {
	cfg    Config       // immutable after New
	base   *slog.Logger // immutable after New: the process logger
	log    *slog.Logger // immutable after New: base with component=edge
	signer *auth.Signer // immutable after New
	reg    *prometheus.Registry

	tlsConf  *tls.Config
	certHash [32]byte
	certEnd  time.Time

	ice *iceport.Port

	// Listeners, bound in New so their addresses are known before Run.
	httpLn, httpsLn, streamerLn, playerLn, adminLn net.Listener
	sfuLn                                          net.Listener // --sfu-ws
	h3Conn                                         net.PacketConn

	mainMux *http.ServeMux // served on HTTP, HTTPS and HTTP/3
	ready   atomic.Bool

	// runners are the subsystems' Run functions, started by Run.
	runners []func(context.Context) error
	// drainers run, in order, when the run context ends.
	drainers []func(context.Context) error
	// closers run last, in reverse order.
	closers []func() error
	// readyChecks must all pass for /readyz.
	readyChecks []func() bool
	readiness   readiness

	// Subsystems and the seams between them.
	rt         *realtime
	px         *pxstream
	adm        *admissionPlane
	redis      *redisstate.Conn    // nil without --redis-url: the one Redis handle (sharedstate.go)
	members    *redisstate.Members // nil without --redis-url: this edge's membership of the fleet
	board      state.FleetBoard    // nil without --redis-url: the operator page's fleet view
	ops        *opsboard.Dashboard // the operator page's figures (the fleet's with --redis-url)
	edgeID     string              // unique in the fleet: names this edge in shared state
	pxAdmitter matchmaker.Admitter // nil: admit every match
	// extraServers are listeners owned by subsystems (Epic ports).
	extraServers []extraServer
	admitter     shard.Admitter   // nil: admit every handshake
	voiceHooks   shard.VoiceHooks // nil: no voice
	turn         *turnPlane       // the embedded TURN server and credential issuer
	// lifetime is cancelled when the edge has closed; subsystems started in
	// New (the dev shard) run under it.
	lifetime context.Context
	endLife  context.CancelFunc
	// publicTimeouts and adminTimeouts bound the net/http servers of the
	// public ports (HTTP, HTTPS, the Epic ports) and of the admin port.
	// Immutable after New (tests shorten them before Run).
	publicTimeouts, adminTimeouts httpTimeouts
}

// httpTimeouts are one net/http server's timeouts.
type httpTimeouts struct {
	// readHeader bounds reading a request's headers; read bounds the whole
	// request, body included (a WebSocket upgrade clears the deadline when
	// it takes the connection over, so it never cuts a live socket); idle
	// closes a keep-alive connection that sends no next request.
	readHeader, read, idle time.Duration
}

// Server timeouts. The public servers bound bodies to 30 s: their handlers
// all answer within seconds, and a slow body must not hold a connection
// and a goroutine forever. The admin server has no whole-request bound:
// net/http cancels a request's context when that deadline passes, and
// /debug/pprof/profile and /trace legitimately run for their ?seconds.
func defaultPublicTimeouts() httpTimeouts {
	return httpTimeouts{readHeader: 10 * time.Second, read: 30 * time.Second, idle: 60 * time.Second}
}

func defaultAdminTimeouts() httpTimeouts {
	return httpTimeouts{readHeader: 10 * time.Second, idle: 60 * time.Second}
}

// Addrs are the bound addresses of an Edge's listeners.
type Addrs struct {
	HTTP, HTTPS, H3, ICE, StreamerWS, PlayerWS, SFUWS, Admin string
	TURN                                                     string // UDP and TCP; "" when off
}

// New validates cfg, binds every listener and builds the subsystems.
func New(cfg Config, log *slog.Logger) (e *Edge, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	e = &Edge{cfg: cfg, base: log, log: log.With("component", "edge"), reg: prometheus.NewRegistry(),
		publicTimeouts: defaultPublicTimeouts(), adminTimeouts: defaultAdminTimeouts()}
	e.lifetime, e.endLife = context.WithCancel(context.Background())
	e.edgeID = newEdgeID()
	built := e // the error returns below set e to nil before the closers run
	e.closers = append(e.closers, func() error { built.endLife(); return nil })
	defer func() {
		if err != nil {
			built.closeAll()
		}
	}()
	e.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	secret := []byte(cfg.JWTSecret)
	if len(secret) == 0 {
		secret = auth.RandomSecret()
		e.log.Warn("!!! EGBE_JWT_SECRET is not set: using a random JWT secret. Tokens will not survive a restart and no other edge can verify them. Never run like this in production. !!!")
	}
	if cfg.Mode == ModeProd && cfg.LinkToken == "" {
		e.log.Warn("EGBE_LINK_TOKEN is not set: shard links run unauthenticated; set it to the shards' egbe-shard --token")
	}
	if e.signer, err = auth.New(secret, cfg.clock()); err != nil {
		return nil, err
	}
	if err := e.loadTLS(); err != nil {
		return nil, err
	}
	if err := e.bind(); err != nil {
		return nil, err
	}
	e.mainMux = http.NewServeMux()
	e.mountCommon()
	if err := e.buildSubsystems(); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Edge) loadTLS() error {
	if e.cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(e.cfg.TLSCert, e.cfg.TLSKey)
		if err != nil {
			return fmt.Errorf("%w: TLS: %w", ErrConfig, err)
		}
		e.tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
		if cert.Leaf != nil {
			e.certHash = sha256.Sum256(cert.Leaf.Raw)
			e.certEnd = cert.Leaf.NotAfter
		}
		return nil
	}
	cert, hash, err := devcert.Generate(nil, devCertValidity)
	if err != nil {
		return fmt.Errorf("dev certificate: %w", err)
	}
	e.tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	e.certHash = hash
	if cert.Leaf != nil {
		e.certEnd = cert.Leaf.NotAfter
	}
	e.log.Info("generated a dev TLS certificate (ECDSA P-256, 10 days) for WebTransport serverCertificateHashes",
		"sha256", fmt.Sprintf("%x", hash), "not_after", e.certEnd)
	return nil
}

// bind opens every listener. The HTTPS port is TCP and UDP on the same
// number; with port 0 the UDP side follows whatever TCP got.
func (e *Edge) bind() (err error) {
	listen := func(addr string) (net.Listener, error) {
		if addr == "" {
			return nil, nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		e.closers = append(e.closers, func() error { ln.Close(); return nil })
		return ln, nil
	}
	if e.httpLn, err = listen(e.cfg.HTTP); err != nil {
		return err
	}
	if e.adminLn, err = listen(e.cfg.Admin); err != nil {
		return err
	}
	if e.streamerLn, err = listen(e.cfg.StreamerWS); err != nil {
		return err
	}
	if e.playerLn, err = listen(e.cfg.PlayerWS); err != nil {
		return err
	}
	if e.sfuLn, err = listen(e.cfg.SFUWS); err != nil {
		return err
	}
	if e.cfg.HTTPS != "" {
		if e.httpsLn, e.h3Conn, err = listenTCPAndUDP(e.cfg.HTTPS); err != nil {
			return err
		}
		e.closers = append(e.closers, func() error { e.httpsLn.Close(); e.h3Conn.Close(); return nil })
	}
	e.ice, err = iceport.Listen(iceport.Config{Listen: e.cfg.ICEUDP, PublicIPs: e.cfg.PublicIPs})
	if err != nil {
		return err
	}
	e.closers = append(e.closers, e.ice.Close)
	return nil
}

func listenTCPAndUDP(addr string) (net.Listener, net.PacketConn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, err
	}
	for attempt := 0; attempt < 8; attempt++ {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		p := port
		if p == "0" {
			p = strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		}
		pc, err := net.ListenPacket("udp", net.JoinHostPort(host, p))
		if err == nil {
			return ln, pc, nil
		}
		ln.Close()
		if port != "0" {
			return nil, nil, fmt.Errorf("listen udp %s: %w", addr, err)
		}
	}
	return nil, nil, fmt.Errorf("listen %s: no port free on both TCP and UDP", addr)
}

// Addrs reports the bound addresses.
func (e *Edge) Addrs() Addrs {
	s := func(ln net.Listener) string {
		if ln == nil {
			return ""
		}
		return ln.Addr().String()
	}
	a := Addrs{HTTP: s(e.httpLn), HTTPS: s(e.httpsLn), StreamerWS: s(e.streamerLn), PlayerWS: s(e.playerLn), SFUWS: s(e.sfuLn), Admin: s(e.adminLn), ICE: e.ice.String()}
	if e.h3Conn != nil {
		a.H3 = e.h3Conn.LocalAddr().String()
	}
	if e.turn != nil && e.turn.srv != nil {
		a.TURN = e.turn.srv.UDPAddr().String()
	}
	return a
}

// newEdgeID names this process in the fleet: host, pid and a random tag
// (no spaces or braces: it appears inside Redis keys).
func newEdgeID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r == ' ' || r == '{' || r == '}' {
			return '-'
		}
		return r
	}, host)
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
}

// logFor is the logger of one component.
func (e *Edge) logFor(component string) *slog.Logger { return e.base.With("component", component) }

// Signer is the edge's token signer (tests mint tokens with it).
func (e *Edge) Signer() *auth.Signer { return e.signer }

// CertHash is the SHA-256 of the TLS leaf certificate.
func (e *Edge) CertHash() [32]byte { return e.certHash }

// Registry is the edge's Prometheus registry.
func (e *Edge) Registry() *prometheus.Registry { return e.reg }

// mountCommon mounts what does not belong to a subsystem.
func (e *Edge) mountCommon() {
	e.mainMux.HandleFunc("/v6/realtime/cert-hash", certHashHandler(e.certHash, e.certEnd))
	if e.cfg.Mode == ModeDev {
		e.mainMux.HandleFunc("/v6/dev/token", devTokenHandler(e.signer))
	}
}

// Ready reports readiness: serving, not draining, the shared state in
// reach, the waiting room not failed closed, a shard to serve (see
// readiness.go).
func (e *Edge) Ready() bool { return len(e.unready()) == 0 }

// Run serves until ctx ends, then drains and closes with a fresh timeout.
func (e *Edge) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	servers := []*http.Server{}
	serve := func(ln net.Listener, h http.Handler, tlsOn bool) {
		if ln == nil {
			return
		}
		to := e.publicTimeouts
		if ln == e.adminLn {
			to = e.adminTimeouts
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: to.readHeader, ReadTimeout: to.read, IdleTimeout: to.idle,
			ErrorLog: slog.NewLogLogger(e.log.Handler(), slog.LevelDebug)}
		servers = append(servers, srv)
		g.Go(func() error {
			var err error
			if tlsOn {
				srv.TLSConfig = e.tlsConf.Clone()
				srv.TLSConfig.NextProtos = []string{"h2", "http/1.1"}
				err = srv.ServeTLS(ln, "", "")
			} else {
				err = srv.Serve(ln)
			}
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		})
	}
	mainHandler := e.withAltSvc(e.mainMux)
	serve(e.httpLn, mainHandler, false)
	serve(e.httpsLn, mainHandler, true)
	serve(e.adminLn, e.adminHandler(), false)
	e.serveExtra(serve)
	for _, run := range e.runners {
		g.Go(func() error { return run(gctx) })
	}
	g.Go(func() error { return e.runReadiness(gctx) })
	e.ready.Store(true)
	e.logStartup()

	<-gctx.Done()
	// Readiness goes first so load balancers stop sending new clients.
	e.ready.Store(false)
	e.log.Info("draining: readiness off, Drain to every session", "sessions", e.rt.gw.Sessions(),
		"drain_window", time.Duration(e.cfg.DrainWindow))
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	for _, drain := range e.drainers {
		if err := drain(sctx); err != nil {
			e.log.Warn("drain", "err", err)
		}
	}
	for _, srv := range servers {
		_ = srv.Shutdown(sctx)
	}
	err := g.Wait()
	e.closeAll()
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		err = nil
	}
	if err == nil {
		e.log.Info("stopped")
	}
	return err
}

func (e *Edge) closeAll() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		_ = e.closers[i]()
	}
	e.closers = nil
}

// withAltSvc advertises HTTP/3 on the HTTPS port.
func (e *Edge) withAltSvc(h http.Handler) http.Handler {
	if e.h3Conn == nil {
		return h
	}
	port := e.h3Conn.LocalAddr().(*net.UDPAddr).Port
	v := fmt.Sprintf(`h3=":%d"; ma=86400`, port)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			w.Header().Set("Alt-Svc", v)
		}
		h.ServeHTTP(w, r)
	})
}
