package auth

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// TestSecretChecks: prod refuses placeholders and low-entropy secrets and
// accepts random ones of the minimum length, in every usual encoding.
func TestSecretChecks(t *testing.T) {
	for _, weak := range []string{
		strings.Repeat("s", 32), strings.Repeat("fleet-secret-", 4), "passwordpasswordpasswordpassword",
		"replace-with-32+-random-bytes-shared-by-every-edge", "REPLACE-ME-openssl-rand-base64-48", "changeme-changeme-changeme-0123456789",
		"0123012301230123012301230123012301230123",
	} {
		if err := CheckSecret(weak, MinSigningSecretBits); !errors.Is(err, ErrWeakSecret) {
			t.Errorf("%q accepted (%.0f bits)", weak, secretBits(weak))
		}
	}
	for i := 0; i < 2000; i++ {
		b16, b32 := make([]byte, 16), make([]byte, 32)
		_, _ = rand.Read(b16)
		_, _ = rand.Read(b32)
		for _, c := range []struct {
			s    string
			bits float64
		}{
			{hex.EncodeToString(b16), MinSigningSecretBits}, // openssl rand -hex 16: 32 characters
			{base64.StdEncoding.EncodeToString(b32), MinSigningSecretBits},
			{base64.RawURLEncoding.EncodeToString(b16), MinSharedSecretBits},
			{hex.EncodeToString(b16[:8]), MinSharedSecretBits}, // 16 hex characters
		} {
			if err := CheckSecret(c.s, c.bits); err != nil {
				t.Fatalf("random secret %q refused: %v", c.s, err)
			}
		}
	}
}
