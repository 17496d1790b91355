package turnrelay

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pion/logging"
	"github.com/pion/turn/v5"
)

// The relay benchmarks measure the TURN server's CPU only: the clients
// (pion/turn, one allocation per player) and the stream sources (one UDP
// socket per player, the "streamer" sending to that player's relayed
// address) run in a child process, this test binary started again with
// benchChildEnv set. The server under test, egbe's or a bare pion/turn
// server with the same TURN REST credentials, runs in the benchmark
// process, whose CPU time (getrusage) over the streaming window is the
// server's. Run under cpu-exclusive:
//
//	go test -run '^$' -bench 'Relay|Allocate' -benchtime 1x ./turnrelay/
//
// EGBE_TURN_BENCH_SECONDS sets the streaming window (default 5).
const (
	benchChildEnv  = "EGBE_TURN_BENCH_CHILD" // relay | alloc
	benchAddrEnv   = "EGBE_TURN_BENCH_ADDR"
	benchNEnv      = "EGBE_TURN_BENCH_N"       // players (relay) or allocations (alloc)
	benchSecsEnv   = "EGBE_TURN_BENCH_SECONDS" // streaming window
	benchBPSEnv    = "EGBE_TURN_BENCH_BPS"     // bits per second per stream
	benchPacket    = 1200                      // bytes: a typical video RTP packet
	benchAllocConc = 8                         // concurrent allocating clients
)

func benchSeconds() float64 {
	if v, err := strconv.ParseFloat(os.Getenv(benchSecsEnv), 64); err == nil && v > 0 {
		return v
	}
	return 5
}

// benchServer is a TURN server under test.
type benchServer struct {
	addr  string
	close func()
}

func startEgbe(b *testing.B) benchServer {
	cfg := Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.RelayPorts = PortRange{}
	cfg.Secret = testSecret
	cfg.AllowLoopbackPeers = true
	cfg.MaxAllocationsPerUser, cfg.MaxAllocationsPerNetwork, cfg.MaxTCPConnsPerNetwork = 1000, 1000, 1000
	s, err := New(cfg, Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	return benchServer{addr: s.UDPAddr().String(), close: func() { s.Close() }}
}

// startPion is the baseline: pion/turn's own server with its TURN REST
// auth handler, relays on any loopback port, nothing else.
func startPion(b *testing.B) benchServer {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	_ = pc.(*net.UDPConn).SetReadBuffer(udpBufferBytes)
	_ = pc.(*net.UDPConn).SetWriteBuffer(udpBufferBytes)
	lf := logging.NewDefaultLoggerFactory()
	lf.DefaultLogLevel = logging.LogLevelDisabled
	s, err := turn.NewServer(turn.ServerConfig{
		Realm:         "egbe",
		AuthHandler:   turn.LongTermTURNRESTAuthHandler(string(testSecret), lf.NewLogger("turn")),
		LoggerFactory: lf,
		PacketConnConfigs: []turn.PacketConnConfig{{PacketConn: pc,
			RelayAddressGenerator: &turn.RelayAddressGeneratorStatic{RelayAddress: net.IPv4(127, 0, 0, 1), Address: "127.0.0.1"}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return benchServer{addr: pc.LocalAddr().String(), close: func() { s.Close() }}
}

// childResult is what the client process reports.
type childResult struct {
	Sent, Received int64   // datagrams
	Bytes          int64   // payload bytes received by the clients
	Seconds        float64 // the measured window
	Allocations    int64
}

// runChild starts the client process against srv and returns, with the
// server process's CPU seconds over the child's measured window.
func runChild(b *testing.B, mode string, srv benchServer, n int, bps int) (childResult, float64) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchChildEnv+"="+mode, benchAddrEnv+"="+srv.addr, benchNEnv+"="+strconv.Itoa(n),
		benchBPSEnv+"="+strconv.Itoa(bps), benchSecsEnv+"="+strconv.FormatFloat(benchSeconds(), 'f', -1, 64))
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	outPipe, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	out := bufio.NewScanner(outPipe)
	if !out.Scan() || out.Text() != "ready" {
		b.Fatalf("child: %q %v", out.Text(), out.Err())
	}
	cpu0 := processCPU()
	fmt.Fprintln(in, "go")
	if !out.Scan() {
		b.Fatalf("child: no result: %v", out.Err())
	}
	cpu := processCPU() - cpu0
	var r childResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		b.Fatalf("child: %q: %v", out.Text(), err)
	}
	return r, cpu
}

func processCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkRelay: one 6 Mbit/s stream, and 50 concurrent relayed players
// at 6 Mbit/s each, peer -> client through the TURN server; egbe's server
// against bare pion/turn in the same run.
func BenchmarkRelay(b *testing.B) {
	for _, players := range []int{1, 50} {
		for _, s := range []struct {
			name  string
			start func(*testing.B) benchServer
		}{{"pion", startPion}, {"egbe", startEgbe}} {
			b.Run(fmt.Sprintf("players=%d/server=%s", players, s.name), func(b *testing.B) {
				for range b.N {
					srv := s.start(b)
					r, cpu := runChild(b, "relay", srv, players, 6_000_000)
					srv.close()
					b.ReportMetric(float64(r.Bytes)*8/r.Seconds/1e6, "Mbit/s")
					b.ReportMetric(cpu/float64(max(r.Received, 1))*1e9, "cpu-ns/pkt")
					b.ReportMetric(cpu/r.Seconds, "cores")
					b.ReportMetric(100*(1-float64(r.Received)/float64(max(r.Sent, 1))), "loss%")
				}
			})
		}
	}
}

// BenchmarkAllocate: allocations per second (8 clients allocating and
// deleting in turn) and the server's CPU per allocation.
func BenchmarkAllocate(b *testing.B) {
	for _, s := range []struct {
		name  string
		start func(*testing.B) benchServer
	}{{"pion", startPion}, {"egbe", startEgbe}} {
		b.Run("server="+s.name, func(b *testing.B) {
			for range b.N {
				srv := s.start(b)
				r, cpu := runChild(b, "alloc", srv, 2000, 0)
				srv.close()
				b.ReportMetric(float64(r.Allocations)/r.Seconds, "allocs/s")
				b.ReportMetric(cpu/float64(max(r.Allocations, 1))*1e6, "cpu-µs/alloc")
			}
		})
	}
}

// benchChild is the client process.
func benchChild(mode string) int {
	addr := os.Getenv(benchAddrEnv)
	n, _ := strconv.Atoi(os.Getenv(benchNEnv))
	secs, _ := strconv.ParseFloat(os.Getenv(benchSecsEnv), 64)
	bps, _ := strconv.Atoi(os.Getenv(benchBPSEnv))
	var r childResult
	var err error
	switch mode {
	case "relay":
		r, err = childRelay(addr, n, bps, time.Duration(secs*float64(time.Second)))
	case "alloc":
		r, err = childAlloc(addr, n)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		return 1
	}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	return 0
}

// waitGo says ready and waits for the parent's "go".
func waitGo() {
	fmt.Println("ready")
	bufio.NewScanner(os.Stdin).Scan()
}

func childClient(addr, subject string) (*turn.Client, net.PacketConn, net.PacketConn, error) {
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, err
	}
	_ = conn.(*net.UDPConn).SetReadBuffer(4 << 20)
	user := Username(time.Now().Add(time.Hour), subject)
	cl, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: addr, TURNServerAddr: addr, Conn: conn,
		Username: user, Password: Credential(testSecret, user), Realm: "egbe", RTO: 200 * time.Millisecond})
	if err != nil {
		conn.Close()
		return nil, nil, nil, err
	}
	if err := cl.Listen(); err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	relay, err := cl.AllocateWithContext(ctx)
	if err != nil {
		cl.Close()
		conn.Close()
		return nil, nil, nil, err
	}
	return cl, conn, relay, nil
}

// childRelay: n players, each a pion/turn client with an allocation, and
// per player a source socket streaming bps to the relayed address.
func childRelay(addr string, n, bps int, window time.Duration) (childResult, error) {
	type player struct {
		cl          *turn.Client
		conn, relay net.PacketConn
		src         *net.UDPConn
	}
	players := make([]player, n)
	for i := range players {
		cl, conn, relay, err := childClient(addr, "player-"+strconv.Itoa(i))
		if err != nil {
			return childResult{}, fmt.Errorf("player %d: %w", i, err)
		}
		src, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return childResult{}, err
		}
		_ = src.SetWriteBuffer(4 << 20)
		players[i] = player{cl: cl, conn: conn, relay: relay, src: src}
	}
	// Permissions and channel bindings for each source, then wait until a
	// datagram from each source arrives (the binding is up).
	var received, bytes atomic.Int64
	var wg sync.WaitGroup
	firstSeen := make([]atomic.Bool, n)
	for i, p := range players {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1600)
			for {
				m, _, err := p.relay.ReadFrom(buf)
				if err != nil {
					return
				}
				firstSeen[i].Store(true)
				received.Add(1)
				bytes.Add(int64(m))
			}
		}()
	}
	payload := make([]byte, benchPacket)
	deadline := time.Now().Add(20 * time.Second)
	for i, p := range players {
		for !firstSeen[i].Load() {
			if time.Now().After(deadline) {
				return childResult{}, fmt.Errorf("player %d: no datagram through the relay", i)
			}
			_, _ = p.relay.WriteTo([]byte("bind"), p.src.LocalAddr())
			_, _ = p.src.WriteTo(payload, p.relay.LocalAddr())
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(200 * time.Millisecond) // let channel bindings settle
	waitGo()
	received.Store(0)
	bytes.Store(0)
	// Pace every stream in 5 ms slices from one goroutine.
	perSlice := float64(bps) / 8 / benchPacket / 200
	var sent int64
	start := time.Now()
	owed := 0.0
	t := time.NewTicker(5 * time.Millisecond)
	for now := range t.C {
		if now.Sub(start) >= window {
			break
		}
		owed += perSlice
		k := int(owed)
		owed -= float64(k)
		for _, p := range players {
			dst := p.relay.LocalAddr()
			for j := 0; j < k; j++ {
				if _, err := p.src.WriteTo(payload, dst); err == nil {
					sent++
				}
			}
		}
	}
	t.Stop()
	elapsed := time.Since(start)
	time.Sleep(100 * time.Millisecond) // in flight
	r := childResult{Sent: sent, Received: received.Load(), Bytes: bytes.Load(), Seconds: elapsed.Seconds()}
	for _, p := range players {
		p.relay.Close()
		p.cl.Close()
		p.conn.Close()
		p.src.Close()
	}
	wg.Wait()
	return r, nil
}

// childAlloc: total allocations, benchAllocConc at a time, each deleted
// (Refresh with lifetime 0) once made.
func childAlloc(addr string, total int) (childResult, error) {
	waitGo()
	var next, done atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < benchAllocConc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(total) {
				cl, conn, relay, err := childClient(addr, "user-"+strconv.Itoa(w))
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				relay.Close()
				cl.Close()
				conn.Close()
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return childResult{}, err
	}
	return childResult{Allocations: done.Load(), Seconds: time.Since(start).Seconds()}, nil
}
