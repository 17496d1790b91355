package turnrelay

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oshun/egbe-edge/internal/testwait"
)

// TestAllocateAndRelay: a pion/turn client allocates with minted
// credentials over UDP and over TCP and relays a round trip to a peer.
func TestAllocateAndRelay(t *testing.T) {
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			s := startServer(t, nil, nil)
			user, pass := mint("alice", time.Now().Add(time.Hour))
			c := dial(t, network, s.UDPAddr().String(), user, pass, "egbe")
			relay, err := c.allocate(t)
			if err != nil {
				t.Fatalf("allocate: %v", err)
			}
			if got := relay.LocalAddr().(*net.UDPAddr).IP.String(); got != "127.0.0.1" {
				t.Errorf("relayed address %v: want the relay IP 127.0.0.1", relay.LocalAddr())
			}
			roundTrip(t, relay, peer(t), []byte("hello through "+network))
			if got := testutil.ToFloat64(s.m.allocations.WithLabelValues(network)); got != 1 {
				t.Errorf("egbe_turn_allocations{transport=%q} = %v, want 1", network, got)
			}
			// The counters move just after the datagram leaves: poll.
			testwait.Within(t, 5*time.Second, "relayed bytes counted both ways", func() bool {
				return testutil.ToFloat64(s.m.bytesOut) > 0 && testutil.ToFloat64(s.m.bytesIn) > 0
			})
			relay.Close() // a Refresh with lifetime 0 deletes the allocation
			// pion removes the allocation, then reports its deletion: the
			// gauge follows a moment later.
			testwait.Within(t, 10*time.Second, "allocation deleted and egbe_turn_allocations back to 0", func() bool {
				return s.Allocations() == 0 && testutil.ToFloat64(s.m.allocations.WithLabelValues(network)) == 0
			})
		})
	}
}

// TestCredentialsRefused: tampered, foreign, expired and malformed
// credentials get no allocation, and each refusal is counted.
func TestCredentialsRefused(t *testing.T) {
	good, goodPass := mint("alice", time.Now().Add(time.Hour))
	expUser, expPass := mint("alice", time.Now().Add(-time.Minute))
	flip := func(s string) string {
		b := []byte(s)
		if b[0] == 'A' {
			b[0] = 'B'
		} else {
			b[0] = 'A'
		}
		return string(b)
	}
	for _, tc := range []struct {
		name, user, pass, reason string
	}{
		{"tampered credential", good, flip(goodPass), reasonBadCredential},
		{"tampered subject", strings.Replace(good, "alice", "mallory", 1), goodPass, reasonBadCredential},
		{"extended expiry", strings.Replace(good, ":", "9:", 1), goodPass, reasonBadCredential},
		{"another secret", good, Credential([]byte("some-other-secret-of-32-bytes!!!"), good), reasonBadCredential},
		{"expired", expUser, expPass, reasonExpired},
		{"not a REST username", "alice", Credential(testSecret, "alice"), reasonBadUsername},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, nil, nil)
			c := dial(t, "udp", s.UDPAddr().String(), tc.user, tc.pass, "egbe")
			if _, err := c.allocate(t); err == nil {
				t.Fatal("allocation succeeded")
			}
			if got := s.refusals(tc.reason); got < 1 {
				t.Errorf("egbe_turn_refusals_total{reason=%q} = %v, want >= 1", tc.reason, got)
			}
			if s.Allocations() != 0 {
				t.Errorf("%d allocations, want 0", s.Allocations())
			}
		})
	}
}

// TestUserQuota: the third allocation of one subject is refused (486),
// another subject on the same network is not, and a freed slot is reusable.
func TestUserQuota(t *testing.T) {
	s := startServer(t, func(c *Config) { c.MaxAllocationsPerUser = 2 }, nil)
	addr := s.UDPAddr().String()
	var relays []net.PacketConn
	for i := 0; i < 2; i++ {
		user, pass := mint("alice", time.Now().Add(time.Hour))
		r, err := dial(t, "udp", addr, user, pass, "egbe").allocate(t)
		if err != nil {
			t.Fatalf("allocation %d: %v", i+1, err)
		}
		relays = append(relays, r)
	}
	user, pass := mint("alice", time.Now().Add(time.Hour))
	third := dial(t, "tcp", addr, user, pass, "egbe")
	if _, err := third.allocate(t); err == nil {
		t.Fatal("third allocation for alice succeeded")
	}
	if got := s.refusals(reasonUserQuota); got != 1 {
		t.Errorf("user_quota refusals = %v, want 1", got)
	}
	bobUser, bobPass := mint("bob", time.Now().Add(time.Hour))
	if _, err := dial(t, "udp", addr, bobUser, bobPass, "egbe").allocate(t); err != nil {
		t.Fatalf("bob: %v", err)
	}
	relays[0].Close()
	testwait.Within(t, 10*time.Second, "alice's slot freed", func() bool { return s.Allocations() == 2 })
	if _, err := third.allocate(t); err != nil {
		t.Fatalf("alice after freeing a slot: %v", err)
	}
}

// TestNetworkQuota: allocations are capped per client /24 whoever asks.
func TestNetworkQuota(t *testing.T) {
	s := startServer(t, func(c *Config) { c.MaxAllocationsPerNetwork = 2 }, nil)
	addr := s.UDPAddr().String()
	for i, who := range []string{"alice", "bob", "carol"} {
		user, pass := mint(who, time.Now().Add(time.Hour))
		_, err := dial(t, "udp", addr, user, pass, "egbe").allocate(t)
		if i < 2 && err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		if i == 2 && err == nil {
			t.Fatalf("%s: a third allocation from 127.0.0.0/24 succeeded", who)
		}
	}
	if got := s.refusals(reasonNetworkQuota); got != 1 {
		t.Errorf("network_quota refusals = %v, want 1", got)
	}
	if u, n := s.q.counts("carol", s.q.networkOf(addrIP(s.UDPAddr()))); u != 0 || n != 2 {
		t.Errorf("counts carol=%d network=%d, want 0 and 2", u, n)
	}
}

// TestPeerPolicyProd: with loopback peers not allowed (prod), a relay to a
// loopback or private peer is refused and counted, and the peer hears
// nothing; an allowed prefix opens it again.
func TestPeerPolicyProd(t *testing.T) {
	s := startServer(t, func(c *Config) { c.AllowLoopbackPeers = false }, nil)
	user, pass := mint("alice", time.Now().Add(time.Hour))
	c := dial(t, "udp", s.UDPAddr().String(), user, pass, "egbe")
	relay, err := c.allocate(t)
	if err != nil {
		t.Fatal(err)
	}
	p := peer(t)
	if _, err := relay.WriteTo([]byte("into the edge's network"), p.LocalAddr()); err == nil {
		t.Error("relay to a loopback peer: no error")
	}
	for _, private := range []string{"10.1.2.3", "192.168.1.10", "172.16.0.1", "169.254.1.1", "100.64.0.1"} {
		if err := c.CreatePermission(&net.UDPAddr{IP: net.ParseIP(private), Port: 9}); err == nil {
			t.Errorf("permission to %s granted", private)
		}
	}
	if got := s.refusals(reasonPeerForbidden); got < 6 {
		t.Errorf("peer_forbidden refusals = %v, want >= 6", got)
	}
	_ = p.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, _, err := p.ReadFrom(make([]byte, 64)); err == nil {
		t.Fatalf("the loopback peer received %d bytes", n)
	}

	allowed := startServer(t, func(c *Config) { c.AllowLoopbackPeers = false; c.AllowPeers = []string{"127.0.0.0/8"} }, nil)
	c2 := dial(t, "udp", allowed.UDPAddr().String(), user, pass, "egbe")
	relay2, err := c2.allocate(t)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, relay2, peer(t), []byte("configured subnet"))
}

// TestRelayToOwnPortRefused: a relay never sends to the TURN port itself.
func TestRelayToOwnPortRefused(t *testing.T) {
	s := startServer(t, nil, nil)
	user, pass := mint("alice", time.Now().Add(time.Hour))
	relay, err := dial(t, "udp", s.UDPAddr().String(), user, pass, "egbe").allocate(t)
	if err != nil {
		t.Fatal(err)
	}
	before := s.refusals(reasonPeerForbidden)
	_, _ = relay.WriteTo([]byte{0, 1, 0, 0}, s.UDPAddr())
	testwait.Within(t, 5*time.Second, "refusal counted", func() bool { return s.refusals(reasonPeerForbidden) > before })
}

// TestAllocationEndsWithCredential: an allocation is deleted when its
// credential expires, though its lifetime (and refreshes) would go on.
func TestAllocationEndsWithCredential(t *testing.T) {
	s := startServer(t, nil, nil)
	user, pass := mint("alice", time.Now().Add(2*time.Second))
	relay, err := dial(t, "udp", s.UDPAddr().String(), user, pass, "egbe").allocate(t)
	if err != nil {
		t.Fatal(err)
	}
	if s.Allocations() != 1 {
		t.Fatalf("%d allocations, want 1", s.Allocations())
	}
	testwait.Within(t, 15*time.Second, "allocation ended at expiry", func() bool { return s.Allocations() == 0 })
	if got := testutil.ToFloat64(s.m.expired); got != 1 {
		t.Errorf("egbe_turn_allocations_expired_total = %v, want 1", got)
	}
	p := peer(t)
	if _, err := p.WriteToUDP([]byte("late"), relay.LocalAddr().(*net.UDPAddr)); err != nil {
		t.Fatal(err)
	}
	_ = relay.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, _, err := relay.ReadFrom(make([]byte, 64)); err == nil {
		t.Error("the relay still delivers after its credential expired")
	}
}

// TestBandwidthCap: on a stopped clock an allocation relays exactly its
// burst (64 KiB at the lowest cap) and drops, counting, the rest.
func TestBandwidthCap(t *testing.T) {
	clock := &fixedClock{t: time.Now()}
	s := startServer(t, func(c *Config) { c.MaxBitrate = 64_000 }, clock.now)
	user, pass := mint("alice", clock.now().Add(time.Hour))
	relay, err := dial(t, "tcp", s.UDPAddr().String(), user, pass, "egbe").allocate(t)
	if err != nil {
		t.Fatal(err)
	}
	p := peer(t)
	const sent, size = 200, 1000
	payload := make([]byte, size)
	for i := 0; i < sent; i++ {
		if _, err := relay.WriteTo(payload, p.LocalAddr()); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	testwait.Within(t, 10*time.Second, "every datagram relayed or dropped", func() bool {
		return testutil.ToFloat64(s.m.packetsOut)+s.refusals(reasonBandwidth) == sent
	})
	want := (64 << 10) / size // the burst: half a second at the cap, at least 64 KiB
	if got := testutil.ToFloat64(s.m.packetsOut); got != float64(want) {
		t.Errorf("relayed %v datagrams, want %d (the burst)", got, want)
	}
	if got := s.refusals(reasonBandwidth); got != float64(sent-want) {
		t.Errorf("bandwidth refusals = %v, want %d", got, sent-want)
	}
}

// TestTCPRelayRefused: RFC 6062 TCP allocations are not offered.
func TestTCPRelayRefused(t *testing.T) {
	s := startServer(t, nil, nil)
	user, pass := mint("alice", time.Now().Add(time.Hour))
	c := dial(t, "tcp", s.UDPAddr().String(), user, pass, "egbe")
	if a, err := c.AllocateTCP(); err == nil {
		a.Close()
		t.Fatal("TCP allocation succeeded")
	}
	if got := s.refusals(reasonTCPRelay); got != 1 {
		t.Errorf("tcp_relay refusals = %v, want 1", got)
	}
}

// TestDrain: after Drain new allocations are refused; live ones relay on.
func TestDrain(t *testing.T) {
	s := startServer(t, nil, nil)
	user, pass := mint("alice", time.Now().Add(time.Hour))
	relay, err := dial(t, "udp", s.UDPAddr().String(), user, pass, "egbe").allocate(t)
	if err != nil {
		t.Fatal(err)
	}
	s.Drain()
	if _, err := dial(t, "udp", s.UDPAddr().String(), user, pass, "egbe").allocate(t); err == nil {
		t.Fatal("allocation while draining succeeded")
	}
	if got := s.refusals(reasonDraining); got != 1 {
		t.Errorf("draining refusals = %v, want 1", got)
	}
	roundTrip(t, relay, peer(t), []byte("still relaying"))
}

// TestRelayPortRange: relays come from the range, and a full range is a
// counted refusal.
func TestRelayPortRange(t *testing.T) {
	lo := freeUDPPorts(t, 2)
	s := startServer(t, func(c *Config) { c.RelayPorts = PortRange{Min: uint16(lo), Max: uint16(lo + 1)} }, nil)
	seen := map[int]bool{}
	for i, who := range []string{"alice", "bob", "carol"} {
		user, pass := mint(who, time.Now().Add(time.Hour))
		relay, err := dial(t, "udp", s.UDPAddr().String(), user, pass, "egbe").allocate(t)
		if i == 2 {
			if err == nil {
				t.Fatalf("a third relay in a two-port range: %v", relay.LocalAddr())
			}
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		port := relay.LocalAddr().(*net.UDPAddr).Port
		if port < lo || port > lo+1 || seen[port] {
			t.Fatalf("relay port %d: want a free one of %d-%d", port, lo, lo+1)
		}
		seen[port] = true
	}
	if got := s.refusals(reasonNoRelayPort); got < 1 {
		t.Errorf("no_relay_port refusals = %v, want >= 1", got)
	}
}

// freeUDPPorts finds n consecutive free UDP ports on loopback.
func freeUDPPorts(t *testing.T, n int) int {
	t.Helper()
	for base := 41000; base < 60000; base += 97 {
		ok := true
		for p := base; p < base+n && ok; p++ {
			c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p})
			if err != nil {
				ok = false
				continue
			}
			c.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free UDP port range")
	return 0
}

// TestTCPConnQuota: TCP connections beyond the per-network cap are closed
// at accept, and counted.
func TestTCPConnQuota(t *testing.T) {
	s := startServer(t, func(c *Config) { c.MaxTCPConnsPerNetwork = 1 }, nil)
	user, pass := mint("alice", time.Now().Add(time.Hour))
	first := dial(t, "tcp", s.UDPAddr().String(), user, pass, "egbe")
	if _, err := first.allocate(t); err != nil {
		t.Fatal(err)
	}
	second := dial(t, "tcp", s.UDPAddr().String(), user, pass, "egbe")
	if _, err := second.allocate(t); err == nil {
		t.Fatal("a second TCP connection from the network allocated")
	}
	if got := s.refusals(reasonTCPConnQuota); got != 1 {
		t.Errorf("tcp_conn_quota refusals = %v, want 1", got)
	}
}

// TestTCPIdleConnectionClosed: a TCP connection holding no allocation is
// closed after the idle timeout.
func TestTCPIdleConnectionClosed(t *testing.T) {
	s := startServer(t, func(c *Config) { c.TCPIdleTimeout = 200 * time.Millisecond }, nil)
	c, err := net.Dial("tcp", s.UDPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || strings.Contains(fmt.Sprint(err), "timeout") {
		t.Fatalf("idle connection: read = %v, want EOF/reset from the server", err)
	}
	testwait.Within(t, 5*time.Second, "connection forgotten", func() bool { return s.tcp.open() == 0 })
}
