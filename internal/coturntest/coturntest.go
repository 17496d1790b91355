// Package coturntest runs Debian's coturn (turnserver) for tests: on free
// loopback ports, with use-auth-secret and the given shared secret (the
// TURN REST scheme the edge mints for), loopback peers allowed, stopped
// when the test ends. A missing turnserver fails the test loudly; it is
// never skipped (scripts/test.sh installs coturn).
package coturntest

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pion/turn/v5"
)

// Binary is where Debian installs coturn; $TURNSERVER overrides it.
const Binary = "/usr/bin/turnserver"

// Realm is the realm the server announces.
const Realm = "egbe"

// Start runs coturn until the test ends and returns its "127.0.0.1:port"
// (UDP and TCP).
func Start(tb testing.TB, secret []byte) string {
	tb.Helper()
	bin := Binary
	if p := os.Getenv("TURNSERVER"); p != "" {
		bin = p
	}
	if _, err := os.Stat(bin); err != nil {
		tb.Fatalf("coturntest: coturn is required (scripts/test.sh installs it): %v", err)
	}
	for attempt := 0; ; attempt++ {
		addr, ok := launch(tb, bin, secret)
		if ok {
			return addr
		}
		if attempt == 2 {
			tb.Fatal("coturntest: coturn did not start in three attempts")
		}
	}
}

// launch starts one coturn on fresh ports; false if it exited before it
// answered (another process took a port in between).
func launch(tb testing.TB, bin string, secret []byte) (string, bool) {
	tb.Helper()
	port := freePorts(tb, 1)
	relayLo := freePorts(tb, 16)
	dir := tb.TempDir()
	out := &syncBuffer{}
	cmd := exec.Command(bin, "-n",
		"--listening-ip=127.0.0.1", "--listening-port="+strconv.Itoa(port),
		"--relay-ip=127.0.0.1", "--min-port="+strconv.Itoa(relayLo), "--max-port="+strconv.Itoa(relayLo+15),
		"--use-auth-secret", "--static-auth-secret="+string(secret), "--realm="+Realm,
		"--no-tls", "--no-dtls", "--no-cli", "--allow-loopback-peers", "--no-software-attribute",
		"--db="+filepath.Join(dir, "turndb"), "--pidfile="+filepath.Join(dir, "turnserver.pid"),
		"--log-file=stdout", "--simple-log")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("coturntest: start: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(20 * time.Second)
	for !answers(addr) {
		select {
		case <-exited:
			tb.Logf("coturntest: coturn exited before answering:\n%s", out.String())
			return "", false
		default:
		}
		if time.Now().After(deadline) {
			stop()
			tb.Fatalf("coturntest: coturn did not answer within 20 s:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Cleanup(func() {
		stop()
		if tb.Failed() {
			tb.Logf("coturn output:\n%s", out.String())
		}
	})
	return addr, true
}

// answers reports whether a STUN binding request to addr gets an answer.
func answers(addr string) bool {
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return false
	}
	defer c.Close()
	cl, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: addr, TURNServerAddr: addr, Conn: c, RTO: 100 * time.Millisecond})
	if err != nil {
		return false
	}
	defer cl.Close()
	if err := cl.Listen(); err != nil {
		return false
	}
	_, err = cl.SendBindingRequest()
	return err == nil
}

// freePorts finds n consecutive loopback ports free on both UDP and TCP.
func freePorts(tb testing.TB, n int) int {
	tb.Helper()
	for try := 0; try < 200; try++ {
		probe, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			tb.Fatal(err)
		}
		base := probe.LocalAddr().(*net.UDPAddr).Port
		probe.Close()
		if base+n > 65535 {
			continue
		}
		ok := true
		for p := base; p < base+n && ok; p++ {
			u, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p})
			if err != nil {
				ok = false
				break
			}
			l, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p})
			u.Close()
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	tb.Fatal("coturntest: no free port range")
	return 0
}

// syncBuffer is coturn's output, written by the exec copier goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
