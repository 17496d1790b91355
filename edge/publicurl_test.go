package edge

import (
	"errors"
	"io"
	"testing"
)

// TestPublicURL: --public-url / EGBE_PUBLIC_URL (flag wins), validated;
// without it the edge advertises its HTTP listener.
func TestPublicURL(t *testing.T) {
	cfg, err := Load([]string{"--public-url", "https://edge-3.example.net:8443"}, []string{"EGBE_PUBLIC_URL=https://env.example.net"}, io.Discard)
	if err != nil || cfg.PublicURL != "https://edge-3.example.net:8443" {
		t.Fatalf("flag over env: %q %v", cfg.PublicURL, err)
	}
	cfg, err = Load(nil, []string{"EGBE_PUBLIC_URL=https://env.example.net"}, io.Discard)
	if err != nil || cfg.PublicURL != "https://env.example.net" {
		t.Fatalf("env: %q %v", cfg.PublicURL, err)
	}
	for _, bad := range []string{"edge-3:8443", "ftp://edge-3", "https://", "https://edge-3/voice", "https://edge-3?x=1", "https://a b"} {
		cfg, err := Load([]string{"--public-url", bad}, nil, io.Discard)
		if err == nil {
			err = cfg.Validate()
		}
		if !errors.Is(err, ErrConfig) {
			t.Errorf("--public-url %q: %v, want ErrConfig", bad, err)
		}
	}

	te := startEdge(t, nil)
	if got, want := te.publicURL(), "http://"+te.addrs.HTTP; got != want {
		t.Fatalf("default public url %q, want %q", got, want)
	}
}
