package turnrelay

import (
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/coturntest"
)

// TestCoturnAcceptsMintedCredentials: coturn, started with the same
// static auth secret, accepts credentials the Issuer minted for it as an
// external server (--turn-url), relays with them, and refuses tampered
// and expired ones.
func TestCoturnAcceptsMintedCredentials(t *testing.T) {
	addr := coturntest.Start(t, testSecret)
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
