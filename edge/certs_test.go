package edge

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/devcert"
)

// writeTestCert writes a fresh certificate and key as PEM files.
func writeTestCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	cert, _, err := devcert.Generate(nil, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func accessFor(sub string) auth.Access {
	return auth.Access{Subject: sub, Tenant: "tara-studio", Region: "gb"}
}

func resumeFor() auth.Resume {
	return auth.Resume{SessionID: "s-1", ShardID: DevShardName, InstanceID: "orun-grove", Subject: "mallory"}
}
