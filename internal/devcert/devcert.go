// Package devcert generates the self-signed TLS certificate the edge uses in
// dev mode. Browsers accept it for WebTransport through
// serverCertificateHashes, which Chromium only honours for ECDSA P-256
// certificates valid for at most 14 days; the SHA-256 of the leaf's DER is
// what the page passes as the hash.
package devcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// MaxValidity is the longest validity serverCertificateHashes accepts
// (W3C WebTransport, "custom certificate requirements": at most two weeks).
const MaxValidity = 14 * 24 * time.Hour

// DefaultValidity is what dev mode uses: short of MaxValidity so clock skew
// between the edge and a browser never pushes it over.
const DefaultValidity = 10 * 24 * time.Hour

// backdate covers a client clock slightly behind the edge's.
const backdate = time.Hour

var (
	// ErrValidity: the requested validity is not in (0, MaxValidity].
	ErrValidity = errors.New("devcert: validity must be positive and at most 14 days")
	// ErrHost: a host is empty.
	ErrHost = errors.New("devcert: empty host name")
)

// defaultHosts are always in the SANs so local browsers and tests can reach
// the edge by any loopback name.
var defaultHosts = [...]string{"127.0.0.1", "::1", "localhost"}

// Generate returns a fresh self-signed ECDSA P-256 certificate for hosts
// (IP literals become IP SANs, anything else DNS SANs; 127.0.0.1, ::1 and
// localhost are always included) valid from now for validity, together with
// the SHA-256 of the leaf certificate's DER encoding.
func Generate(hosts []string, validity time.Duration) (tls.Certificate, [32]byte, error) {
	var zero [32]byte
	if validity <= 0 || validity > MaxValidity {
		return tls.Certificate{}, zero, fmt.Errorf("%w: %s", ErrValidity, validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, zero, fmt.Errorf("devcert: generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, zero, fmt.Errorf("devcert: serial: %w", err)
	}
	// The backdate counts against the validity so NotAfter-NotBefore never
	// exceeds what the caller asked for (Chromium checks the span).
	now := time.Now()
	notBefore := now.Add(-min(backdate, validity/2))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "egbe-edge dev", Organization: []string{"egbe-edge"}},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	seen := make(map[string]bool)
	all := append(append([]string(nil), defaultHosts[:]...), hosts...)
	for _, h := range all {
		if h == "" {
			return tls.Certificate{}, zero, ErrHost
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, zero, fmt.Errorf("devcert: create certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, zero, fmt.Errorf("devcert: parse certificate: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	return cert, sha256.Sum256(der), nil
}
