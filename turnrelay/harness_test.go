package turnrelay

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/pion/turn/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

// TestMain fails the package on leaked goroutines: Close must let go of
// every allocation and connection pion/turn holds. The same binary is the
// benchmarks' client process (see bench_test.go).
func TestMain(m *testing.M) {
	if mode := os.Getenv(benchChildEnv); mode != "" {
		os.Exit(benchChild(mode))
	}
	goleak.VerifyTestMain(m)
}

var testSecret = []byte("test-turn-secret-0123456789abcdef")

// testServer runs a Server on loopback with dev-mode peers (loopback
// allowed) unless mutate says otherwise.
type testServer struct {
	*Server
	reg *prometheus.Registry
}

func startServer(t *testing.T, mutate func(*Config), now func() time.Time) *testServer {
	t.Helper()
	cfg := Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.RelayPorts = PortRange{}
	cfg.Secret = testSecret
	cfg.AllowLoopbackPeers = true
	if mutate != nil {
		mutate(&cfg)
	}
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg, Deps{Logger: log, Registerer: reg, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &testServer{Server: s, reg: reg}
}

// refusals reads egbe_turn_refusals_total{reason}.
func (s *testServer) refusals(reason string) float64 {
	return testutil.ToFloat64(s.m.refusals[reason])
}

// mint returns a username and credential for subject expiring at expiry.
func mint(subject string, expiry time.Time) (user, pass string) {
	user = Username(expiry, subject)
	return user, Credential(testSecret, user)
}

// turnClient is a pion/turn client with its socket.
type turnClient struct {
	*turn.Client
	conn net.PacketConn
}

// dial opens a pion/turn client to the server over "udp" or "tcp".
func dial(t *testing.T, network, addr, user, pass, realm string) *turnClient {
	t.Helper()
	var conn net.PacketConn
	switch network {
	case "udp":
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		conn = c
	case "tcp":
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn = turn.NewSTUNConn(c)
	}
	cl, err := turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: addr, TURNServerAddr: addr, Conn: conn,
		Username: user, Password: pass, Realm: realm,
		RTO: 200 * time.Millisecond,
	})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	if err := cl.Listen(); err != nil {
		t.Fatal(err)
	}
	tc := &turnClient{Client: cl, conn: conn}
	t.Cleanup(func() { cl.Close(); conn.Close() })
	return tc
}

// allocate asks for a UDP relay; the relayed conn is closed at cleanup.
func (c *turnClient) allocate(t *testing.T) (net.PacketConn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	relay, err := c.AllocateWithContext(ctx)
	if err == nil {
		t.Cleanup(func() { relay.Close() })
	}
	return relay, err
}

// peer is a plain UDP socket standing for a WebRTC peer behind the relay.
func peer(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends ping from the relay to p, has p answer to the relayed
// address, and returns what the client read back.
func roundTrip(t *testing.T, relay net.PacketConn, p *net.UDPConn, ping []byte) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 1500)
	// The first datagram also creates the permission; repeat until the
	// peer hears one (UDP on loopback can still drop).
	for {
		if _, err := relay.WriteTo(ping, p.LocalAddr()); err != nil {
			t.Fatalf("relay write: %v", err)
		}
		_ = p.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, from, err := p.ReadFromUDP(buf)
		if err == nil {
			if !bytes.Equal(buf[:n], ping) {
				t.Fatalf("peer got %q, want %q", buf[:n], ping)
			}
			if from.String() != relay.LocalAddr().String() {
				t.Fatalf("peer heard from %v, want the relayed address %v", from, relay.LocalAddr())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("peer never heard the relay: %v", err)
		}
	}
	pong := append([]byte("pong:"), ping...)
	for {
		if _, err := p.WriteToUDP(pong, relay.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatal(err)
		}
		_ = relay.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, _, err := relay.ReadFrom(buf)
		if err == nil {
			if !bytes.Equal(buf[:n], pong) {
				t.Fatalf("client got %q, want %q", buf[:n], pong)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("client never heard the peer: %v", err)
		}
	}
}

// fixedClock is a clock that moves only when told to.
type fixedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fixedClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}
