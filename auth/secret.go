package auth

import (
	"fmt"
	"math"
	"strings"
)

// Estimated entropy a production edge asks of its secrets (CheckSecret): a
// JWT signing secret of 32 random bytes carries 256 bits (192 as base64
// text, 128 as hex); the shared secrets (TURN credentials, the shard link
// token) are at least 16 bytes. The estimate is
// deliberately rough (below), so the floors sit well under what any random
// secret of the minimum length scores and well over what a word, a
// repeated pattern or a keyboard run does.
const (
	MinSigningSecretBits = 80
	MinSharedSecretBits  = 28
)

// placeholders are pieces of the text shipped manifests and examples put
// where a secret goes. A secret containing one was never replaced.
var placeholders = []string{"replace", "changeme", "change-me", "change_me", "placeholder", "example", "your-secret", "xxxxxxxx"}

// CheckSecret refuses a placeholder and a secret whose estimated entropy
// is under minBits.
func CheckSecret(s string, minBits float64) error {
	low := strings.ToLower(s)
	for _, p := range placeholders {
		if strings.Contains(low, p) {
			return fmt.Errorf("%w: it holds the placeholder text %q; generate one, e.g. `openssl rand -base64 48`", ErrWeakSecret, p)
		}
	}
	if bits := secretBits(s); bits < minBits {
		return fmt.Errorf("%w: about %.0f bits of entropy, want at least %d; generate one, e.g. `openssl rand -base64 48`", ErrWeakSecret, bits, int(minBits))
	}
	return nil
}

// secretBits estimates the entropy of s: the Shannon entropy of its bytes
// times the length of its shortest period (a repeated pattern says no more
// than one copy of it).
func secretBits(s string) float64 {
	if s == "" {
		return 0
	}
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / float64(len(s))
			h -= p * math.Log2(p)
		}
	}
	return h * float64(period(s))
}

// period is the length of the shortest p with s[i] == s[i+p] for every i
// (KMP's failure function): "abcabcab" has period 3.
func period(s string) int {
	fail := make([]int, len(s))
	k := 0
	for i := 1; i < len(s); i++ {
		for k > 0 && s[i] != s[k] {
			k = fail[k-1]
		}
		if s[i] == s[k] {
			k++
		}
		fail[i] = k
	}
	return len(s) - fail[len(s)-1]
}
