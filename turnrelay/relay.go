package turnrelay

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/pion/turn/v5"
	"golang.org/x/time/rate"
)

// relayBufferBytes is each relay socket's kernel buffer: a video stream's
// key frame arrives as a burst of datagrams.
const relayBufferBytes = 1 << 20

// relayGen hands pion/turn the relay sockets: from the port range, bound
// to the relay bind address, announced at the relay IP, wrapped so every
// datagram is policed (peer policy, bitrate cap, credential expiry) and
// counted.
type relayGen struct {
	s       *Server    // immutable
	bind    netip.Addr // immutable
	relayIP net.IP     // immutable
	ports   PortRange  // immutable
}

var _ turn.RelayAddressGenerator = (*relayGen)(nil)

func (g *relayGen) Validate() error { return nil }

// AllocatePacketConn binds a relay socket for a UDP allocation. userID is
// the whole TURN username (see Server.authenticate), so the credential's
// expiry is known here and becomes the allocation's end.
func (g *relayGen) AllocatePacketConn(conf turn.AllocateListenerConfig) (net.PacketConn, net.Addr, error) {
	expiry, _, err := ParseUsername(conf.UserID)
	if err != nil {
		return nil, nil, err
	}
	network := "udp4"
	if g.relayIP.To4() == nil {
		network = "udp6"
	}
	if conf.Network != network {
		return nil, nil, fmt.Errorf("turnrelay: %s relay asked, this server relays %s", conf.Network, network)
	}
	conn, err := g.listen(network, conf.RequestedPort)
	if err != nil {
		return nil, nil, err
	}
	_ = conn.SetReadBuffer(relayBufferBytes)
	_ = conn.SetWriteBuffer(relayBufferBytes)
	rc := newRelayConn(conn, expiry, g.s)
	port := conn.LocalAddr().(*net.UDPAddr).Port
	return rc, &net.UDPAddr{IP: g.relayIP, Port: port}, nil
}

// listen binds a port of the range, trying each once from a random start,
// so a nearly full range still finds its last free port.
func (g *relayGen) listen(network string, requested int) (*net.UDPConn, error) {
	ip := net.IP(g.bind.AsSlice())
	if requested != 0 || g.ports.Any() {
		return net.ListenUDP(network, &net.UDPAddr{IP: ip, Port: requested})
	}
	n := g.ports.Size()
	start := rand.IntN(n)
	for i := 0; i < n; i++ {
		port := int(g.ports.Min) + (start+i)%n
		conn, err := net.ListenUDP(network, &net.UDPAddr{IP: ip, Port: port})
		if err == nil {
			return conn, nil
		}
	}
	g.s.m.refuse(reasonNoRelayPort)
	return nil, fmt.Errorf("%w in %s", ErrNoRelayPort, g.ports)
}

// AllocateListener refuses RFC 6062 TCP relays.
func (g *relayGen) AllocateListener(turn.AllocateListenerConfig) (net.Listener, net.Addr, error) {
	g.s.m.refuse(reasonTCPRelay)
	return nil, nil, ErrTCPRelay
}

// AllocateConn refuses RFC 6062 TCP relays.
func (g *relayGen) AllocateConn(turn.AllocateConnConfig) (net.Conn, error) {
	g.s.m.refuse(reasonTCPRelay)
	return nil, ErrTCPRelay
}

// relayConn is one allocation's relay socket. pion/turn reads it from the
// allocation's own goroutine (peer -> client) and writes it from the
// listener's read loop (client -> peer), so each direction has one user.
type relayConn struct {
	*net.UDPConn
	s      *Server       // immutable
	expiry time.Time     // immutable: the credential's expiry ends the allocation
	in     *rate.Limiter // peer -> client, used by ReadFrom
	out    *rate.Limiter // client -> peer, used by WriteTo
}

func newRelayConn(c *net.UDPConn, expiry time.Time, s *Server) *relayConn {
	bytesPerSec := float64(s.cfg.MaxBitrate) / 8
	burst := max(int(bytesPerSec/2), 64<<10) // half a second of traffic absorbs a key frame
	rc := &relayConn{UDPConn: c, s: s, expiry: expiry,
		in:  rate.NewLimiter(rate.Limit(bytesPerSec), burst),
		out: rate.NewLimiter(rate.Limit(bytesPerSec), burst)}
	// pion/turn deletes an allocation whose relay socket fails to read:
	// the deadline ends it when its credential does. The deadline is on
	// the kernel socket's wall clock, hence time.Until.
	_ = c.SetReadDeadline(time.Now().Add(expiry.Sub(s.now())))
	return rc
}

// ReadFrom returns the next datagram from a peer within the bitrate cap;
// datagrams over it are dropped and counted. At the credential's expiry it
// fails, which ends the allocation.
func (c *relayConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.UDPConn.ReadFrom(p)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				c.s.m.expired.Inc()
				return 0, nil, fmt.Errorf("%w: allocation ends", ErrExpired)
			}
			return 0, nil, err
		}
		if !c.in.AllowN(c.s.now(), n) {
			c.s.m.refuse(reasonBandwidth)
			continue
		}
		c.s.m.bytesIn.Add(float64(n))
		c.s.m.packetsIn.Inc()
		return n, addr, nil
	}
}

// WriteTo sends a client's datagram to a peer: refused when the peer is
// not relayable, dropped (and counted) over the bitrate cap.
func (c *relayConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, fmt.Errorf("turnrelay: relay to %T", addr)
	}
	ip, _ := netip.AddrFromSlice(ua.IP)
	if !c.s.peerAllowed(ip, ua.Port) {
		c.s.m.refuse(reasonPeerForbidden)
		return 0, ErrPeerForbidden
	}
	now := c.s.now()
	if !now.Before(c.expiry) {
		return 0, ErrExpired
	}
	if !c.out.AllowN(now, len(p)) {
		c.s.m.refuse(reasonBandwidth)
		return len(p), nil
	}
	n, err := c.UDPConn.WriteTo(p, addr)
	if err == nil {
		c.s.m.bytesOut.Add(float64(n))
		c.s.m.packetsOut.Inc()
	}
	return n, err
}

// SetReadDeadline never extends past the credential's expiry.
func (c *relayConn) SetReadDeadline(t time.Time) error {
	end := time.Now().Add(c.expiry.Sub(c.s.now()))
	if t.IsZero() || t.After(end) {
		t = end
	}
	return c.UDPConn.SetReadDeadline(t)
}

// SetDeadline: see SetReadDeadline.
func (c *relayConn) SetDeadline(t time.Time) error {
	if err := c.UDPConn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}
