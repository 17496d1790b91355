package turnrelay

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/pion/turn/v5"
)

// coturnBinary is Debian's coturn (scripts/test.sh installs it). The
// test fails, never skips, without it.
const coturnBinary = "/usr/bin/turnserver"

// startCoturn runs coturn on free loopback ports with use-auth-secret
// and the given secret, until the test ends; it returns its address.
func startCoturn(t *testing.T, secret []byte) string {
	t.Helper()
	bin := coturnBinary
	if p := os.Getenv("TURNSERVER"); p != "" {
		bin = p
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("coturn is required for the interop test (scripts/test.sh installs it): %v", err)
	}
	port := freeUDPPorts(t, 1)
	relayLo := freeUDPPorts(t, 8)
	dir := t.TempDir()
	var out bytes.Buffer
	cmd := exec.Command(bin, "-n",
		"--listening-ip=127.0.0.1", "--listening-port="+strconv.Itoa(port),
		"--relay-ip=127.0.0.1", "--min-port="+strconv.Itoa(relayLo), "--max-port="+strconv.Itoa(relayLo+7),
		"--use-auth-secret", "--static-auth-secret="+string(secret), "--realm=egbe",
		"--no-tls", "--no-dtls", "--no-cli", "--allow-loopback-peers", "--no-software-attribute",
		"--db="+filepath.Join(dir, "turndb"), "--pidfile="+filepath.Join(dir, "turnserver.pid"),
		"--log-file=stdout", "--simple-log")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start coturn: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("coturn output:\n%s", out.String())
		}
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// Ready when it answers a STUN binding request.
	waitUntil(t, 20*time.Second, "coturn listening", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("coturn exited: %v\n%s", err, out.String())
		default:
		}
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
	})
	return addr
}

// TestCoturnAcceptsMintedCredentials: coturn, started with the same
// static auth secret, accepts credentials the Issuer minted for it as an
// external server (--turn-url), relays with them, and refuses tampered
// and expired ones.
func TestCoturnAcceptsMintedCredentials(t *testing.T) {
	addr := startCoturn(t, testSecret)
	iss, err := NewIssuer(IssuerConfig{Secret: testSecret, TTL: time.Hour, External: []string{"turn:" + addr + "?transport=udp"}})
	if err != nil {
		t.Fatal(err)
	}
	o := iss.Mint("alice", 10*time.Minute, "")
	if len(o.ICEServers) != 1 || o.ICEServers[0].URLs[0] != "turn:"+addr+"?transport=udp" {
		t.Fatalf("minted %+v", o)
	}
	user, pass := o.ICEServers[0].Username, o.ICEServers[0].Credential

	relay, err := dial(t, "udp", addr, user, pass, "egbe").allocate(t)
	if err != nil {
		t.Fatalf("coturn refused the edge's credential: %v", err)
	}
	roundTrip(t, relay, peer(t), []byte("through coturn"))

	// The same credential opens the embedded server: one secret, one fleet.
	s := startServer(t, nil, nil)
	if _, err := dial(t, "udp", s.UDPAddr().String(), user, pass, "egbe").allocate(t); err != nil {
		t.Errorf("the embedded server refused what coturn accepted: %v", err)
	}

	if _, err := dial(t, "udp", addr, user, pass[:len(pass)-2]+"AA", "egbe").allocate(t); err == nil {
		t.Error("coturn accepted a tampered credential")
	}
	expired := issuerAt(t, time.Now().Add(-2*time.Hour)).Mint("alice", time.Minute, "")
	if _, err := dial(t, "udp", addr, expired.ICEServers[0].Username, expired.ICEServers[0].Credential, "egbe").allocate(t); err == nil {
		t.Error("coturn accepted an expired credential")
	}
}

// issuerAt is an issuer for the embedded server whose clock reads at.
func issuerAt(t *testing.T, at time.Time) *Issuer {
	t.Helper()
	iss, err := NewIssuer(IssuerConfig{Secret: testSecret, Port: 3478, TTL: time.Hour, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	return iss
}
