package turnrelay

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestMintShape: the minted JSON is exactly the shape WebRTC clients and
// Epic's peerConnectionOptions take, and its credential verifies.
func TestMintShape(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	iss, err := NewIssuer(IssuerConfig{Secret: testSecret, Port: 3478, TTL: time.Hour, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(iss.Mint("alice", 90*time.Second, "edge.example.net"))
	user := "1800000090:alice"
	want := `{"iceServers":[{"urls":["turn:edge.example.net:3478?transport=udp","turn:edge.example.net:3478?transport=tcp"],"username":"` +
		user + `","credential":"` + Credential(testSecret, user) + `"}]}`
	if string(got) != want {
		t.Fatalf("minted\n %s\nwant\n %s", got, want)
	}

	// A fixed expiry: the same credential whenever it is minted.
	until := at.Add(7 * time.Hour)
	a, b := iss.MintUntil("alice", until, "edge.example.net"), iss.MintUntil("alice", until, "edge.example.net")
	if a.ICEServers[0].Username != "1800025200:alice" || a.ICEServers[0].Credential != b.ICEServers[0].Credential {
		t.Errorf("MintUntil: %+v %+v", a, b)
	}

	// No lifetime: the issuer's TTL. A fixed host (the public IP) wins
	// over the client's; IPv6 hosts are bracketed.
	iss2, _ := NewIssuer(IssuerConfig{Secret: testSecret, Port: 3478, Host: "2001:db8::7", TTL: time.Hour, Now: func() time.Time { return at },
		External: []string{"turn:coturn.example.net:3478?transport=udp", "turns:coturn.example.net:5349"}})
	o := iss2.Mint("bob", 0, "ignored.example.net")
	if len(o.ICEServers) != 2 {
		t.Fatalf("%d ice servers, want embedded and external: %+v", len(o.ICEServers), o)
	}
	if u := o.ICEServers[0].URLs[0]; u != "turn:[2001:db8::7]:3478?transport=udp" {
		t.Errorf("embedded url %q", u)
	}
	if o.ICEServers[0].Username != "1800003600:bob" || o.ICEServers[1].Username != o.ICEServers[0].Username ||
		o.ICEServers[1].Credential != Credential(testSecret, "1800003600:bob") {
		t.Errorf("credentials %+v", o.ICEServers)
	}
	if strings.Join(o.ICEServers[1].URLs, " ") != "turn:coturn.example.net:3478?transport=udp turns:coturn.example.net:5349" {
		t.Errorf("external urls %v", o.ICEServers[1].URLs)
	}

	// External only (no embedded server).
	iss3, _ := NewIssuer(IssuerConfig{Secret: testSecret, TTL: time.Hour, External: []string{"turn:10.0.0.5:3478"}})
	if o := iss3.Mint("carol", time.Minute, "x"); len(o.ICEServers) != 1 || o.ICEServers[0].URLs[0] != "turn:10.0.0.5:3478" {
		t.Errorf("external only: %+v", o)
	}
	// Nothing to hand out: an empty list, never null.
	iss4, _ := NewIssuer(IssuerConfig{Secret: testSecret, TTL: time.Hour})
	if b, _ := json.Marshal(iss4.Mint("d", 0, "")); string(b) != `{"iceServers":[]}` {
		t.Errorf("empty: %s", b)
	}
}

// TestCredentialVector: the credential is base64(HMAC-SHA1(secret,
// username)), checked against a value computed independently
// (printf %s 1700000000:alice | openssl dgst -sha1 -hmac s3cret -binary | base64).
func TestCredentialVector(t *testing.T) {
	if got := Credential([]byte("s3cret"), "1700000000:alice"); got != "TtElzSjT0GdnTQ9xdcRNxx96yQs=" {
		t.Fatalf("credential %q", got)
	}
}

func TestUsername(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	for in, want := range map[string]string{
		"alice":                  "1700000000:alice",
		"":                       "1700000000:anonymous",
		"a:b c\x00é":             "1700000000:a_b_c___",
		strings.Repeat("x", 200): "1700000000:" + strings.Repeat("x", MaxSubjectLen),
	} {
		if got := Username(at, in); got != want {
			t.Errorf("Username(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseUsername(t *testing.T) {
	for _, tc := range []struct {
		in      string
		expiry  int64
		subject string
		ok      bool
	}{
		{"1700000000:alice", 1700000000, "alice", true},
		{"1700000000", 1700000000, "", true},
		{"1700000000:a:b", 1700000000, "a:b", true},
		{"alice", 0, "", false},
		{":alice", 0, "", false},
		{"-5:alice", 0, "", false},
		{"+5:alice", 0, "", false},
		{"17e8:alice", 0, "", false},
		{"9999999999999:x", 0, "", false},
		{"", 0, "", false},
		{"1:" + strings.Repeat("x", MaxUsernameLen), 0, "", false},
	} {
		exp, subj, err := ParseUsername(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseUsername(%q): err %v, want ok=%v", tc.in, err, tc.ok)
			continue
		}
		if !tc.ok {
			if !errors.Is(err, ErrBadUsername) {
				t.Errorf("ParseUsername(%q): %v is not ErrBadUsername", tc.in, err)
			}
			continue
		}
		if exp.Unix() != tc.expiry || subj != tc.subject {
			t.Errorf("ParseUsername(%q) = %d %q", tc.in, exp.Unix(), subj)
		}
	}
}

// FuzzParseUsername: no input panics; an accepted username's parts
// rebuild it, and a minted username always parses back.
func FuzzParseUsername(f *testing.F) {
	for _, s := range []string{"1700000000:alice", "1800000090:session-7f3a", "1700000000", "alice", ":", "1:a:b", "99999999999:x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		exp, subj, err := ParseUsername(s)
		if err != nil {
			if !errors.Is(err, ErrBadUsername) {
				t.Fatalf("error %v is not ErrBadUsername", err)
			}
			return
		}
		if exp.Unix() < 0 || len(s) > MaxUsernameLen {
			t.Fatalf("accepted %q", s)
		}
		if !strings.HasSuffix(s, subj) {
			t.Fatalf("subject %q not the tail of %q", subj, s)
		}
		u := Username(exp, subj)
		e2, s2, err := ParseUsername(u)
		if err != nil || !e2.Equal(exp) || strings.Contains(s2, ":") || len(s2) > MaxSubjectLen {
			t.Fatalf("minted %q from %q does not parse back cleanly: %v %q", u, s, err, s2)
		}
	})
}

func TestValidateURL(t *testing.T) {
	for u, ok := range map[string]bool{
		"turn:coturn.example.net:3478?transport=udp": true,
		"turns:coturn.example.net:5349":              true,
		"stun:stun.example.net":                      true,
		"turn:10.0.0.5":                              true,
		"http://x":                                   false,
		"turn://x:3478":                              false,
		"turn:":                                      false,
		"turn:a b":                                   false,
		"coturn.example.net":                         false,
		"turn:" + strings.Repeat("a", 600):           false,
	} {
		if err := ValidateURL(u); (err == nil) != ok {
			t.Errorf("ValidateURL(%q) = %v, want ok=%v", u, err, ok)
		}
	}
}

func TestPeerPolicy(t *testing.T) {
	prod := peerPolicy{}
	dev := peerPolicy{allowLoopback: true}
	custom := peerPolicy{allow: mustPrefixes(t, "10.20.0.0/16", "fd00:1::/32")}
	for _, tc := range []struct {
		ip                string
		prod, dev, custom bool
	}{
		{"203.0.113.7", true, true, true},
		{"8.8.8.8", true, true, true},
		{"2606:4700::1111", true, true, true},
		{"127.0.0.1", false, true, false},
		{"::1", false, true, false},
		{"::ffff:127.0.0.1", false, true, false},
		{"10.20.3.4", false, false, true},
		{"10.21.3.4", false, false, false},
		{"192.168.0.1", false, false, false},
		{"172.31.255.255", false, false, false},
		{"169.254.169.254", false, false, false}, // cloud metadata
		{"100.100.100.100", false, false, false},
		{"0.0.0.0", false, false, false},
		{"224.0.0.251", false, false, false},
		{"255.255.255.255", false, false, false},
		{"fd00:1::5", false, false, true},
		{"fc00::1", false, false, false},
		{"fe80::1", false, false, false},
		{"ff02::1", false, false, false},
		{"2002:0a00:0001::1", false, false, false}, // 6to4 of 10.0.0.1
		{"2002:cb00:7107::1", true, true, true},    // 6to4 of 203.0.113.7
		{"64:ff9b::7f00:1", false, true, false},    // NAT64 of 127.0.0.1
		{"64:ff9b::808:808", true, true, true},     // NAT64 of 8.8.8.8
	} {
		ip := netip.MustParseAddr(tc.ip)
		if got := prod.allowed(ip); got != tc.prod {
			t.Errorf("prod %s: %v", tc.ip, got)
		}
		if got := dev.allowed(ip); got != tc.dev {
			t.Errorf("dev %s: %v", tc.ip, got)
		}
		if got := custom.allowed(ip); got != tc.custom {
			t.Errorf("custom %s: %v", tc.ip, got)
		}
	}
}

func mustPrefixes(t *testing.T, s ...string) []netip.Prefix {
	t.Helper()
	p, err := parsePrefixes(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigValidate(t *testing.T) {
	ok := Default()
	ok.Secret = testSecret
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults with a secret: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"no secret":        func(c *Config) { c.Secret = nil },
		"bad listen":       func(c *Config) { c.Listen = "3478" },
		"reversed ports":   func(c *Config) { c.RelayPorts = PortRange{Min: 50000, Max: 49000} },
		"bad relay ip":     func(c *Config) { c.RelayIP = "edge" },
		"zero user cap":    func(c *Config) { c.MaxAllocationsPerUser = 0 },
		"v4 bits":          func(c *Config) { c.NetworkBitsV4 = 33 },
		"tiny bitrate":     func(c *Config) { c.MaxBitrate = 1000 },
		"bad allowed peer": func(c *Config) { c.AllowPeers = []string{"lan"} },
		"realm quote":      func(c *Config) { c.Realm = `a"b` },
	} {
		c := ok
		mutate(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	for in, want := range map[string]PortRange{"49160-49200": {49160, 49200}, "": {}, "5000": {5000, 5000}, " 1 - 2 ": {1, 2}} {
		if got, err := ParsePortRange(in); err != nil || got != want {
			t.Errorf("ParsePortRange(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"0-10", "10-5", "a-b", "1-70000", "-"} {
		if _, err := ParsePortRange(in); err == nil {
			t.Errorf("ParsePortRange(%q) accepted", in)
		}
	}
}
