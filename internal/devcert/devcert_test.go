package devcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"
	"time"
)

func TestGenerate(t *testing.T) {
	cert, sum, err := Generate([]string{"edge.example", "10.1.2.3", "localhost"}, DefaultValidity)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if sum != sha256.Sum256(cert.Certificate[0]) {
		t.Error("hash is not SHA-256 of the leaf DER")
	}
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("key is %T, want ECDSA P-256", leaf.PublicKey)
	}
	if span := leaf.NotAfter.Sub(leaf.NotBefore); span > MaxValidity || span != DefaultValidity {
		t.Errorf("validity span %s", span)
	}
	now := time.Now()
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		t.Errorf("not valid now: %s..%s", leaf.NotBefore, leaf.NotAfter)
	}
	for _, h := range []string{"127.0.0.1", "::1", "localhost", "edge.example", "10.1.2.3"} {
		if err := leaf.VerifyHostname(h); err != nil {
			t.Errorf("VerifyHostname(%q): %v", h, err)
		}
	}
	if len(leaf.DNSNames) != 2 {
		t.Errorf("duplicate SANs: %v", leaf.DNSNames)
	}
	// Usable as a TLS server certificate trusted by pinning it as a root.
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "localhost", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("verify: %v", err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestGenerateRejects(t *testing.T) {
	tests := []struct {
		name     string
		hosts    []string
		validity time.Duration
		want     error
	}{
		{"zero validity", nil, 0, ErrValidity},
		{"over 14 days", nil, MaxValidity + time.Second, ErrValidity},
		{"empty host", []string{""}, DefaultValidity, ErrHost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Generate(tt.hosts, tt.validity); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	if _, _, err := Generate(nil, MaxValidity); err != nil {
		t.Fatalf("exactly 14 days: %v", err)
	}
}
