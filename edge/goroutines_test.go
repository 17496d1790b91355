package edge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/egbeclient"
	"github.com/oshun/egbe-edge/internal/gostacks"
	"github.com/oshun/egbe-edge/internal/testwait"
)

// edgeCensus counts the edge process's goroutines by who owns them, by
// each goroutine's stack: the sessions' (a stack inside shard's session
// or Gateway.Serve: the reader and the writer), the rest of this module's
// (the transports', the edge's), the libraries' (quic-go, pion, net/http,
// ...), and the in-process dev shard's (shardsim's, the far end of the
// link, reported apart). Goroutines of the test itself are left out.
type edgeCensus struct {
	session, ours, library, shard int
	byEntry                       map[string]int
}

// perSessionOurs is every goroutine of this module a session accounts
// for: its reader and writer plus the transport's own.
func (c edgeCensus) perSessionOurs() int { return c.session + c.ours }

func takeEdgeCensus() edgeCensus {
	c := edgeCensus{byEntry: map[string]int{}}
	for _, g := range gostacks.All() {
		entry := gostacks.Entry(g)
		switch {
		case strings.Contains(g, "testing.tRunner"), strings.HasPrefix(entry, "os/exec."),
			strings.Contains(g, "edge.runEdgeClients"), strings.Contains(g, "edge.takeEdgeCensus"):
			continue // the test harness
		case strings.Contains(g, "shard/shardsim."):
			c.shard++
		case strings.Contains(g, "shard.(*session)."), strings.Contains(g, "shard.(*Gateway).Serve"):
			c.session++
		case strings.HasPrefix(entry, "github.com/oshun/egbe-edge/"):
			c.ours++
		default:
			c.library++
		}
		c.byEntry[entry]++
	}
	return c
}

func (c edgeCensus) minus(base edgeCensus) edgeCensus {
	d := edgeCensus{session: c.session - base.session, ours: c.ours - base.ours, library: c.library - base.library,
		shard: c.shard - base.shard, byEntry: map[string]int{}}
	for k, v := range c.byEntry {
		if v -= base.byEntry[k]; v != 0 {
			d.byEntry[k] = v
		}
	}
	for k, v := range base.byEntry {
		if _, ok := c.byEntry[k]; !ok {
			d.byEntry[k] = -v
		}
	}
	return d
}

// steadyEdgeCensus takes a few censuses 50 ms apart and keeps, class by
// class, the smallest count: a goroutine that belongs to every session
// shows in every census, while one that only passes through (a presence
// timer's callback, a datagram burst's sender, a handshake that just
// ended) is not counted against the bound.
func steadyEdgeCensus() edgeCensus {
	var got edgeCensus
	for i := range 5 {
		c := takeEdgeCensus()
		if i == 0 {
			got = c
		} else {
			got.session, got.ours = min(got.session, c.session), min(got.ours, c.ours)
			got.library, got.shard = min(got.library, c.library), min(got.shard, c.shard)
		}
		time.Sleep(50 * time.Millisecond) // the interval between samples
	}
	return got
}

// TestGoroutinesPerSessionEveryTransport counts the goroutines a realtime
// session costs the running edge, shard link included, on each transport:
// real clients (in a child process, so that everything counted is the
// edge's) say hello through the edge's public endpoints to the real dev
// shard, then keep sending presence and acknowledging the moving world's
// states, so every session's writer is busy. The bounds are the ones
// transport/README.md and shard/README.md document: this module's own
// goroutines per session (the session's reader and writer, plus the
// transport's own) and the library's.
func TestGoroutinesPerSessionEveryTransport(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a client process per transport")
	}
	te := startEdge(t, nil)
	sessions := func() float64 { v, _ := te.metric(t, "egbe_shard_sessions", nil); return v }
	const n = 12
	for _, tc := range []struct {
		kind string
		// ours: the session's reader and writer plus the transport's own
		// (WebTransport: its datagram receiver and the QUIC connection's
		// ServeQUICConn; the datagram sender that runs only while
		// datagrams wait is not steady; WebRTC: the unreliable channel's
		// receiver). library: quic-go's, http3's and webtransport-go's,
		// or pion's ICE, DTLS and SCTP loops.
		ours, library int
	}{
		{"websocket", 2, 0},
		{"webtransport", 4, 10},
		{"webrtc", 3, 14},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			// A first session brings the link's lanes and the transport's
			// shared machinery up; the census is taken once it is gone.
			stop := runEdgeClients(t, te, tc.kind, 1)
			stop()
			testwait.Within(t, 20*time.Second, "the warm-up session to end", func() bool { return sessions() == 0 })
			base := steadyEdgeCensus()

			stop = runEdgeClients(t, te, tc.kind, n)
			testwait.Within(t, 20*time.Second, "every session to be up", func() bool { return sessions() == n })
			got := steadyEdgeCensus().minus(base)
			stop()
			per := func(v int) float64 { return float64(v) / n }
			t.Logf("%s, per session: session (reader, writer) %.2f, the rest of ours %.2f, library %.2f, dev shard %.2f; by entry: %v",
				tc.kind, per(got.session), per(got.ours), per(got.library), per(got.shard), got.byEntry)
			if got.perSessionOurs() > tc.ours*n {
				t.Errorf("%.2f of this module's goroutines per session, bound %d", per(got.perSessionOurs()), tc.ours)
			}
			if got.session > 2*n {
				t.Errorf("%.2f session goroutines per session, want at most 2 (its reader and writer)", per(got.session))
			}
			if got.library > tc.library*n {
				t.Errorf("%.2f library goroutines per session, bound %d", per(got.library), tc.library)
			}
			if got.shard > 0 {
				t.Errorf("the dev shard runs %d goroutines more with %d sessions: sessions are multiplexed over its lanes", got.shard, n)
			}
			testwait.Within(t, 20*time.Second, "the sessions to end", func() bool { return sessions() == 0 })
		})
	}
}

// runEdgeClients starts a child process (this test binary, running
// TestEdgeClientProcess) holding n sessions of kind on te, each of which
// has said hello and received world state; it returns once they are up.
// stop ends the child and its sessions.
func runEdgeClients(t *testing.T, te *testEdge, kind string, n int) (stop func()) {
	t.Helper()
	toks := make([]string, n)
	for i := range toks {
		toks[i] = te.devToken(t, fmt.Sprintf("census-%s-%d", kind, i))
	}
	hash := te.CertHash()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEdgeClientProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "EGBE_EDGE_CLIENT="+kind, "EGBE_EDGE_HTTP="+te.httpURL(""), "EGBE_EDGE_H3="+te.h3Base(),
		"EGBE_EDGE_CERT="+hex.EncodeToString(hash[:]), "EGBE_EDGE_TOKENS="+strings.Join(toks, ","))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var drained sync.WaitGroup
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("client process: %v\n%s", err, stderr.Bytes())
		}
		drained.Wait()
	}
	t.Cleanup(stop)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if sc.Text() == "ready" {
			drained.Go(func() { _, _ = io.Copy(io.Discard, stdout) })
			return stop
		}
	}
	stop()
	t.Fatalf("client process never became ready\n%s", stderr.Bytes())
	return nil
}

// TestEdgeClientProcess is the client side of
// TestGoroutinesPerSessionEveryTransport, in a child process; run
// directly it does nothing. Each session says hello, sends presence at
// 20 Hz and acknowledges every state it receives, until stdin closes.
func TestEdgeClientProcess(t *testing.T) {
	kind := os.Getenv("EGBE_EDGE_CLIENT")
	if kind == "" {
		return
	}
	var hash [32]byte
	if b, err := hex.DecodeString(os.Getenv("EGBE_EDGE_CERT")); err != nil || len(b) != 32 {
		t.Fatalf("cert hash: %v", err)
	} else {
		copy(hash[:], b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var conns []*egbeclient.Conn
	defer func() {
		cancel()
		for _, c := range conns {
			_ = c.Close()
		}
		wg.Wait()
	}()
	toks := strings.Split(os.Getenv("EGBE_EDGE_TOKENS"), ",")
	states := make(chan struct{}, len(toks))
	for i, tok := range toks {
		c, err := egbeclient.Dial(ctx, egbeclient.Options{Kind: kind, HTTPBase: os.Getenv("EGBE_EDGE_HTTP"), H3Base: os.Getenv("EGBE_EDGE_H3"), CertHash: hash})
		if err != nil {
			t.Fatalf("dial %s: %v", kind, err)
		}
		conns = append(conns, c)
		if _, err := c.Hello(ctx, helloFor(tok)); err != nil {
			t.Fatalf("hello: %v", err)
		}
		wg.Go(func() { // presence at 20 Hz, walking
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for seq := uint64(1); ; seq++ {
				p := &codec.PresencePacket{Seq: seq, Position: &codec.Vec3{XMm: int32(i*3000) + int32(seq%100)*50, YMm: 2000}}
				if c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Presence{Presence: p}}, true) != nil {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		})
		wg.Go(func() { // acknowledges every state
			first := true
			for {
				env, err := c.Recv(ctx)
				if err != nil {
					return
				}
				seq := env.GetSnapshot().GetSequence()
				if d := env.GetDelta(); d != nil {
					seq = d.GetSequence()
				}
				if seq == 0 {
					continue
				}
				if first {
					first = false
					states <- struct{}{}
				}
				if c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ack{Ack: &codec.Ack{SnapshotSequence: seq}}}, true) != nil {
					return
				}
			}
		})
	}
	for range toks {
		select {
		case <-states:
		case <-ctx.Done():
			t.Fatal("not every session received world state")
		}
	}
	// The WebRTC offers' keep-alive connection would hold an HTTP
	// connection goroutine on the edge (and one pair here).
	http.DefaultClient.CloseIdleConnections()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}
