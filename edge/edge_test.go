package edge

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/oshun/egbe-edge/internal/testwait"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// quic-go and pion keep package-level helpers alive between tests.
		goleak.IgnoreTopFunction("github.com/quic-go/quic-go/internal/utils.(*Timer).Reset"),
		goleak.IgnoreAnyFunction("github.com/pion/transport/v3/vnet.(*resolver).lookUp"),
		// go-redis retries a failed dial from a goroutine that sleeps up to
		// a second and ends on its own after the client is closed (the
		// Redis outage test leaves one behind).
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	)
}

func TestDevEndpoints(t *testing.T) {
	te := startEdge(t, nil)

	t.Run("dev token verifies", func(t *testing.T) {
		tok := te.devToken(t, "alice")
		a, err := te.Signer().VerifyAccess(tok)
		if err != nil || a.Subject != "alice" || a.Tenant != "tara-studio" || a.Region != "gb" {
			t.Fatalf("%+v %v", a, err)
		}
	})
	t.Run("dev token refuses bad bodies", func(t *testing.T) {
		for _, body := range []any{map[string]any{}, map[string]any{"sub": "x", "extra": 1}} {
			resp, b := postJSON(t, te.httpURL("/v6/dev/token"), body)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "bad_request") {
				t.Fatalf("%v: %d %s", body, resp.StatusCode, b)
			}
		}
	})
	t.Run("cert hash matches the served certificate", func(t *testing.T) {
		resp, err := http.Get(te.httpURL("/v6/realtime/cert-hash"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct{ Algorithm, Value, Hex string }
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		want := te.CertHash()
		if body.Algorithm != "sha-256" || body.Value != base64.StdEncoding.EncodeToString(want[:]) {
			t.Fatalf("cert hash %+v", body)
		}
	})
	t.Run("admin endpoints", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/readyz", "/metrics", "/debug/pprof/", "/ops/", "/ops/metrics.json"} {
			resp, err := http.Get(te.adminURL(p))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s: %d", p, resp.StatusCode)
			}
		}
	})
}

func TestProdHasNoDevToken(t *testing.T) {
	te := startProdEdge(t, nil)
	resp, _ := postJSON(t, te.httpURL("/v6/dev/token"), map[string]any{"sub": "x"})
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("prod dev token: %d, want 404", resp.StatusCode)
	}
}

func TestReadinessDropsOnShutdown(t *testing.T) {
	te := startEdge(t, nil)
	te.cancel()
	te.cancel = nil
	testwait.Within(t, 10*1e9, "readyz to turn unready or close", func() bool {
		resp, err := http.Get(te.adminURL("/readyz"))
		if err != nil {
			return true // listener closed
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	if err := <-te.done; err != nil {
		t.Fatal(err)
	}
}
