package turnrelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// udpBufferBytes is the TURN listener's kernel buffer: every UDP client's
// traffic to its peers passes this one socket.
const udpBufferBytes = 8 << 20

// closeWait bounds how long Close waits for pion/turn's goroutines to let
// go of their allocations and connections.
const closeWait = 5 * time.Second

// Deps are a Server's collaborators.
type Deps struct {
	Logger     *slog.Logger          // nil: slog.Default()
	Registerer prometheus.Registerer // nil: metrics are not registered
	Now        func() time.Time      // nil: time.Now
}

// Server is the embedded TURN server: a UDP and a TCP listener on one
// port, serving from New until Close.
type Server struct {
	cfg     Config           // immutable after New
	log     *slog.Logger     // immutable after New
	now     func() time.Time // immutable after New
	m       *metrics         // immutable after New
	q       *quotas          // immutable after New
	policy  peerPolicy       // immutable after New
	relayIP netip.Addr       // immutable after New
	port    int              // immutable after New: both listeners' port

	udp net.PacketConn // immutable after New
	tcp *tcpListener   // immutable after New
	srv *turn.Server   // immutable after New

	closeOnce sync.Once
	closeErr  error
}

// New binds the UDP and TCP listeners on cfg.Listen and starts serving.
func New(cfg Config, deps Deps) (s *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	allow, _ := parsePrefixes(cfg.AllowPeers) // checked by Validate
	s = &Server{cfg: cfg, log: deps.Logger.With("component", "turn"), now: deps.Now, q: newQuotas(cfg),
		policy: peerPolicy{allowLoopback: cfg.AllowLoopbackPeers, allow: allow}}
	if s.m, err = newMetrics(deps.Registerer); err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(cfg.Listen)
	listenIP, _ := netip.ParseAddr(host)
	s.relayIP, err = relayAddress(cfg.RelayIP, listenIP)
	if err != nil {
		return nil, err
	}
	bind := unspecifiedOf(s.relayIP)
	if cfg.RelayBind != "" {
		bind, _ = netip.ParseAddr(cfg.RelayBind)
	} else if listenIP.IsValid() && !listenIP.IsUnspecified() {
		bind = listenIP
	}

	tcpLn, udpConn, err := listenBoth(cfg.Listen)
	if err != nil {
		return nil, err
	}
	if uc, ok := udpConn.(*net.UDPConn); ok {
		_ = uc.SetReadBuffer(udpBufferBytes)
		_ = uc.SetWriteBuffer(udpBufferBytes)
	}
	s.udp = udpConn
	s.port = udpConn.LocalAddr().(*net.UDPAddr).Port
	s.tcp = &tcpListener{Listener: tcpLn, s: s, conns: map[string]*tcpConn{}}

	gen := &relayGen{s: s, bind: bind, relayIP: net.IP(s.relayIP.AsSlice()), ports: cfg.RelayPorts}
	permit := func(_ net.Addr, peer net.IP) bool {
		ip, _ := netip.AddrFromSlice(peer)
		if s.policy.allowed(ip) {
			return true
		}
		s.m.refuse(reasonPeerForbidden)
		return false
	}
	s.srv, err = turn.NewServer(turn.ServerConfig{
		Realm:              cfg.Realm,
		AuthHandler:        s.authenticate,
		QuotaHandler:       s.admit,
		AllocationLifetime: cfg.AllocationLifetime,
		LoggerFactory:      pionLoggers{s.log},
		EventHandler: turn.EventHandler{
			OnAuth:              s.onAuth,
			OnAllocationCreated: s.onCreated,
			OnAllocationDeleted: s.onDeleted,
		},
		PacketConnConfigs: []turn.PacketConnConfig{{PacketConn: udpConn, RelayAddressGenerator: gen, PermissionHandler: permit}},
		ListenerConfigs:   []turn.ListenerConfig{{Listener: s.tcp, RelayAddressGenerator: gen, PermissionHandler: permit}},
	})
	if err != nil {
		udpConn.Close()
		tcpLn.Close()
		return nil, fmt.Errorf("turnrelay: %w", err)
	}
	return s, nil
}

// relayAddress picks the announced relay IP: the configured one, else the
// listen IP when it names one, else loopback (a single-machine setup).
func relayAddress(configured string, listenIP netip.Addr) (netip.Addr, error) {
	if configured != "" {
		ip, err := netip.ParseAddr(configured)
		if err != nil || ip.IsUnspecified() {
			return netip.Addr{}, fmt.Errorf("%w: relay ip %q", ErrConfig, configured)
		}
		return ip.Unmap(), nil
	}
	if listenIP.IsValid() && !listenIP.IsUnspecified() {
		return listenIP.Unmap(), nil
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1}), nil
}

func unspecifiedOf(ip netip.Addr) netip.Addr {
	if ip.Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

// listenBoth binds TCP and UDP on the same port (with port 0, UDP follows
// whatever TCP got).
func listenBoth(addr string) (net.Listener, net.PacketConn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: listen %q: %w", ErrConfig, addr, err)
	}
	for attempt := 0; attempt < 8; attempt++ {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("turnrelay: listen tcp %s: %w", addr, err)
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
			return nil, nil, fmt.Errorf("turnrelay: listen udp %s: %w", addr, err)
		}
	}
	return nil, nil, fmt.Errorf("turnrelay: listen %s: no port free on both TCP and UDP", addr)
}

// UDPAddr and TCPAddr are the bound listener addresses.
func (s *Server) UDPAddr() *net.UDPAddr { return s.udp.LocalAddr().(*net.UDPAddr) }

// TCPAddr is the bound TCP listener address.
func (s *Server) TCPAddr() *net.TCPAddr { return s.tcp.Addr().(*net.TCPAddr) }

// Port is the listeners' port number.
func (s *Server) Port() int { return s.port }

// RelayIP is the address announced as clients' relayed address.
func (s *Server) RelayIP() netip.Addr { return s.relayIP }

// Allocations is the number of live allocations.
func (s *Server) Allocations() int { return s.srv.AllocationCount() }

// authenticate is pion's AuthHandler: it recomputes the credential from
// the username. The user id it returns is the whole username, so the
// allocation (and its relay socket) knows the credential's expiry; the
// quota's user is its subject part.
func (s *Server) authenticate(ra *turn.RequestAttributes) (string, []byte, bool) {
	expiry, _, err := ParseUsername(ra.Username)
	if err != nil {
		s.m.refuse(reasonBadUsername)
		return "", nil, false
	}
	if !s.now().Before(expiry) {
		s.m.refuse(reasonExpired)
		return "", nil, false
	}
	return ra.Username, turn.GenerateAuthKey(ra.Username, ra.Realm, Credential(s.cfg.Secret, ra.Username)), true
}

// onAuth counts credentials whose MESSAGE-INTEGRITY did not verify: a
// wrong secret, a tampered username or credential.
func (s *Server) onAuth(_, _ net.Addr, _, _, _, _ string, verdict bool) {
	if !verdict {
		s.m.refuse(reasonBadCredential)
	}
}

// admit is pion's QuotaHandler (a refusal is 486 Allocation Quota Reached).
func (s *Server) admit(userID, _ string, src net.Addr) bool {
	reason, ok := s.q.reserve(userID, src, s.now())
	if !ok {
		s.m.refuse(reason)
		s.log.Debug("allocation refused", "reason", reason, "client", src.String())
	}
	return ok
}

func (s *Server) onCreated(src, _ net.Addr, _, userID, _ string, _ net.Addr, _ int) {
	s.q.created(userID, src)
	t := transportOf(src)
	s.m.allocations.WithLabelValues(t).Inc()
	s.m.created.WithLabelValues(t).Inc()
	if t == "tcp" {
		s.tcp.holding(src, true)
	}
}

func (s *Server) onDeleted(src, _ net.Addr, _, _, _ string) {
	s.q.deleted(src)
	t := transportOf(src)
	s.m.allocations.WithLabelValues(t).Dec()
	if t == "tcp" {
		s.tcp.holding(src, false)
	}
}

func transportOf(a net.Addr) string {
	if _, ok := a.(*net.TCPAddr); ok {
		return "tcp"
	}
	return "udp"
}

// peerAllowed is the peer policy for one datagram: the policy's ranges,
// and never the TURN port itself on the relay address (a relay must not
// talk to its own server).
func (s *Server) peerAllowed(ip netip.Addr, port int) bool {
	ip = ip.Unmap()
	if port == s.port && (ip == s.relayIP || ip.IsLoopback()) {
		return false
	}
	return s.policy.allowed(ip)
}

// Drain stops new allocations (refused with 486, counted "draining");
// live ones keep relaying until Close.
func (s *Server) Drain() { s.q.drain() }

// Close closes both listeners, every client TCP connection and every
// allocation, and waits (up to closeWait) until pion/turn has let go of
// them all.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.q.drain()
		s.closeErr = s.srv.Close()
		s.tcp.closeAll()
		ctx, cancel := context.WithTimeout(context.Background(), closeWait)
		defer cancel()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for s.srv.AllocationCount() > 0 || s.tcp.open() > 0 {
			select {
			case <-ctx.Done():
				s.log.Warn("TURN close: allocations or connections still open", "allocations", s.srv.AllocationCount(), "tcp", s.tcp.open())
				return
			case <-t.C:
			}
		}
	})
	if errors.Is(s.closeErr, net.ErrClosed) {
		return nil
	}
	return s.closeErr
}

// tcpListener tracks the TURN port's TCP connections: a cap per network,
// an idle deadline while a connection holds no allocation, and closing
// them all on Close (pion/turn closes only the listener).
type tcpListener struct {
	net.Listener
	s *Server // immutable

	mu     sync.Mutex
	conns  map[string]*tcpConn // guarded by mu: by remote address
	closed bool                // guarded by mu
}

func (l *tcpListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// EMFILE and friends: pion/turn stops serving TCP for good
				// when Accept fails, so back off and retry instead.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return nil, err
		}
		delay = 0
		ip := addrIP(c.RemoteAddr())
		n, ok := l.s.q.openConn(ip)
		if !ok {
			l.s.m.refuse(reasonTCPConnQuota)
			c.Close()
			continue
		}
		tc := &tcpConn{Conn: c, l: l, net: n}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			tc.Close()
			return nil, net.ErrClosed
		}
		l.conns[c.RemoteAddr().String()] = tc
		l.mu.Unlock()
		l.s.m.tcpConns.Inc()
		_ = c.SetReadDeadline(time.Now().Add(l.s.cfg.TCPIdleTimeout))
		return tc, nil
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// holding clears the idle deadline while src's connection holds an
// allocation and sets it again when the allocation ends.
func (l *tcpListener) holding(src net.Addr, yes bool) {
	l.mu.Lock()
	c := l.conns[src.String()]
	l.mu.Unlock()
	if c == nil {
		return
	}
	if yes {
		_ = c.SetReadDeadline(time.Time{})
	} else {
		_ = c.SetReadDeadline(time.Now().Add(l.s.cfg.TCPIdleTimeout))
	}
}

func (l *tcpListener) closeAll() {
	l.mu.Lock()
	l.closed = true
	conns := make([]*tcpConn, 0, len(l.conns))
	for _, c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// open is the number of connections pion/turn has not closed yet.
func (l *tcpListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// tcpConn is one client TCP connection; pion/turn closes it when its read
// loop ends, which is when it leaves the listener's table.
type tcpConn struct {
	net.Conn
	l    *tcpListener // immutable
	net  netip.Prefix // immutable
	once sync.Once
}

func (c *tcpConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.conns[c.RemoteAddr().String()] == c {
			delete(c.l.conns, c.RemoteAddr().String())
		}
		c.l.mu.Unlock()
		c.l.s.q.closeConn(c.net)
		c.l.s.m.tcpConns.Dec()
	})
	return err
}

// pionLoggers hands pion/turn's warnings and errors to slog at debug
// level: the ones that matter are refusals, which are counted, and some
// fire per datagram (a client gone away), which must not reach the log.
type pionLoggers struct{ log *slog.Logger }

func (f pionLoggers) NewLogger(scope string) logging.LeveledLogger {
	return pionLogger{f.log.With("pion", scope)}
}

type pionLogger struct{ log *slog.Logger }

func (pionLogger) Trace(string)          {}
func (pionLogger) Tracef(string, ...any) {}
func (pionLogger) Debug(string)          {}
func (pionLogger) Debugf(string, ...any) {}
func (pionLogger) Info(string)           {}
func (pionLogger) Infof(string, ...any)  {}
func (l pionLogger) Warn(msg string)     { l.log.Debug(msg) }
func (l pionLogger) Warnf(f string, a ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug(fmt.Sprintf(f, a...))
	}
}
func (l pionLogger) Error(msg string) { l.log.Debug(msg) }
func (l pionLogger) Errorf(f string, a ...any) {
	if l.log.Enabled(context.Background(), slog.LevelDebug) {
		l.log.Debug(fmt.Sprintf(f, a...))
	}
}
