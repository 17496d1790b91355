package bench

import (
	"context"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/signalling"
)

// inProcessBroker serves a drop-in signalling.Server on two loopback
// listeners, standing in for the edge binary.
func inProcessBroker(t *testing.T) *Target {
	t.Helper()
	srv, err := signalling.New(signalling.Default(), signalling.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	st := httptest.NewServer(srv.StreamerHandler())
	pl := httptest.NewServer(srv.PlayerHandler())
	t.Cleanup(func() {
		srv.Close()
		st.Close()
		pl.Close()
	})
	return &Target{StreamerWS: strings.TrimPrefix(st.URL, "http://"), PlayerWS: strings.TrimPrefix(pl.URL, "http://"), PID: os.Getpid()}
}

func TestPxstreamScenario(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tg := inProcessBroker(t)
	rep, err := RunPxstream(ctx, tg, PxOptions{Pairs: 3, Handshakes: 12, Idle: 20, DialWorkers: 4, Settle: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Errors != 0 || rep.Handshakes != 12 {
		t.Fatalf("handshakes=%d errors=%d %v", rep.Handshakes, rep.Errors, rep.FirstErrs)
	}
	if rep.IdleConnected != 20 || rep.IdleErrors != 0 {
		t.Fatalf("idle connected=%d errors=%d %v", rep.IdleConnected, rep.IdleErrors, rep.IdleFirstErrs)
	}
	if rep.Latency.P50 <= 0 || !strings.Contains(rep.String(), "CPU-s per 1,000 handshakes") {
		t.Fatalf("report:\n%s", rep)
	}
}

func TestPxstreamNeedsPlayerPort(t *testing.T) {
	if _, err := RunPxstream(context.Background(), &Target{StreamerWS: "127.0.0.1:1"}, PxOptions{Pairs: 1, Handshakes: 1}); err == nil {
		t.Fatal("want an error without --player-ws")
	}
}

func TestMatchInProcess(t *testing.T) {
	rep, err := RunMatch(context.Background(), nil, MatchOptions{Streamers: 1000, InProcess: 300})
	if err != nil {
		t.Fatal(err)
	}
	if rep.InProcDecisions != 300 || rep.InProcCPU <= 0 && rep.InProcElapsed <= 0 {
		t.Fatalf("report:\n%s", rep)
	}
}

func TestMatchRegionsFollowSplit(t *testing.T) {
	n := 0
	for _, k := range splitN(1000) {
		n += k
	}
	if n != 1000 || len(matchRegions) != 100 {
		t.Fatalf("split %d streamers, %d regions", n, len(matchRegions))
	}
	path, err := benchPolicy()
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
}

// BenchmarkLoopbackRoundTrip is the kernel floor under every scenario
// here: one 64-byte message each way over loopback TCP between two
// goroutines of this process, with no WebSocket or JSON. cpu-us/op is
// process CPU per round trip (two messages delivered).
func BenchmarkLoopbackRoundTrip(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 64)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 64)
	b.ReportAllocs()
	cpu0 := clientCPU()
	for b.Loop() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((clientCPU()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-us/op")
	c.Close()
	<-done
}
