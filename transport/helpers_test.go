package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/oshun/egbe-edge/internal/devcert"
)

// echo answers every message on the lane it came in on.
func echo(ctx context.Context, c Conn) {
	for {
		m, err := c.Read(ctx)
		if err != nil {
			return
		}
		if m.Lane == Unreliable {
			_ = c.WriteUnreliable(m.Data)
			continue
		}
		if err := c.WriteReliable(ctx, m.Data); err != nil {
			return
		}
	}
}

// recordingEcho is echo that also reports the Read error ending it.
func recordingEcho(errs chan<- error) Handler {
	return func(ctx context.Context, c Conn) {
		for {
			m, err := c.Read(ctx)
			if err != nil {
				errs <- err
				return
			}
			if m.Lane == Reliable {
				if err := c.WriteReliable(ctx, m.Data); err != nil {
					errs <- err
					return
				}
			} else {
				_ = c.WriteUnreliable(m.Data)
			}
		}
	}
}

func testMetrics() (*Metrics, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	return NewMetrics(reg), reg
}

func counter(m *Metrics, vec string, labels ...string) float64 {
	switch vec {
	case "accepted":
		return testutil.ToFloat64(m.accepted.WithLabelValues(labels...))
	case "active":
		return testutil.ToFloat64(m.active.WithLabelValues(labels...))
	case "messages":
		return testutil.ToFloat64(m.messages.WithLabelValues(labels...))
	case "drops":
		return testutil.ToFloat64(m.drops.WithLabelValues(labels...))
	case "handshake":
		return testutil.ToFloat64(m.handshakeFailures.WithLabelValues(labels...))
	}
	return -1
}

// testTLS returns a dev certificate's server config and a client config
// trusting it.
func testTLS(t testing.TB) (server, client *tls.Config, hash [32]byte) {
	t.Helper()
	cert, hash, err := devcert.Generate(nil, devcert.DefaultValidity)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	return &tls.Config{Certificates: []tls.Certificate{cert}}, &tls.Config{RootCAs: pool}, hash
}

func shutdownCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// leakCheck verifies, after every other cleanup (servers shut down), that
// the test left no goroutines behind. Call it first.
func leakCheck(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
}
