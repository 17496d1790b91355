package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/protobuf/proto"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/egbeclient"
)

// EchoOptions shape the connect and echo scenarios.
type EchoOptions struct {
	Transport   string        // webtransport | webrtc | websocket
	Sessions    int           // concurrent sessions
	Rate        float64       // messages per second per session (echo)
	Duration    time.Duration // measured phase (echo)
	DialWorkers int           // concurrent dials while connecting
	// Settle is how long after the last connect the idle RSS is read
	// (default 1 s).
	Settle time.Duration
	// Instance is one instance id, or a comma-separated list that sessions
	// are spread over round-robin (small worlds keep the world fan-out out
	// of a messaging measurement).
	Instance string
}

// EchoReport is what connect and echo measure.
type EchoReport struct {
	Scenario, Transport string
	Sessions            int
	Connected           int
	ConnectErrors       int
	Handshake           Summary
	RTT                 Summary
	Sent, Received      int64
	Throughput          float64 // received messages per second
	ServerCPU           time.Duration
	CPUPerMessage       time.Duration
	RSSBefore, RSSIdle  int64
	RSSPerSession       int64
	Errors              []string
}

func (r EchoReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%s sessions=%d connected=%d connect_errors=%d\n", r.Scenario, r.Transport, r.Sessions, r.Connected, r.ConnectErrors)
	fmt.Fprintf(&b, "  handshake %s\n", r.Handshake)
	if r.RTT.N > 0 {
		fmt.Fprintf(&b, "  rtt       %s\n", r.RTT)
		fmt.Fprintf(&b, "  sent=%d received=%d throughput=%.0f msg/s\n", r.Sent, r.Received, r.Throughput)
		fmt.Fprintf(&b, "  server cpu=%v cpu/msg=%v\n", r.ServerCPU.Round(time.Millisecond), r.CPUPerMessage)
	}
	fmt.Fprintf(&b, "  rss before=%.1f MiB idle=%.1f MiB per-session=%.1f KiB\n", mib(r.RSSBefore), mib(r.RSSIdle), float64(r.RSSPerSession)/1024)
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "  error: %s\n", e)
	}
	return b.String()
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// echoSession is one connected client of the echo scenario.
type echoSession struct {
	send func(id uint64) error
	recv func(ctx context.Context) (uint64, error)
	stop func()
}

// sentTimes remembers when each id was sent; ids wrap modulo its size.
type sentTimes struct {
	mu sync.Mutex
	t  [1024]time.Time
}

// RunEcho runs the connect scenario, then (when opts.Duration > 0) the echo
// scenario on the same sessions, against an edge.
func RunEcho(ctx context.Context, t *Target, opts EchoOptions) (EchoReport, error) {
	dial := edgeEchoDial(func(int) *Target { return t }, strings.Split(opts.Instance, ","), opts)
	return runEcho(ctx, "edge", t.Usage, dial, opts)
}

// edgeEchoDial opens session i on edge pick(i), in instance i mod
// len(instances), and echoes with ping/pong.
func edgeEchoDial(pick func(i int) *Target, instances []string, opts EchoOptions) func(context.Context, int) (*echoSession, time.Duration, error) {
	return func(ctx context.Context, i int) (*echoSession, time.Duration, error) {
		t := pick(i)
		tok, err := t.Token(fmt.Sprintf("bench-%d", i))
		if err != nil {
			return nil, 0, err
		}
		start := time.Now()
		c, err := egbeclient.Dial(ctx, egbeclient.Options{Kind: opts.Transport, HTTPBase: t.HTTPBase, H3Base: t.H3Base, CertHash: t.CertHash, Inbox: 64})
		if err != nil {
			return nil, 0, err
		}
		if _, err := c.Hello(ctx, &codec.ClientHello{AccessToken: tok, InstanceId: instances[i%len(instances)], AuthorityKind: codec.AuthorityKind_UE_CLIENT,
			ProtocolVersion: codec.ProtocolVersion, Capabilities: []string{"action-acks"}}); err != nil {
			c.Close()
			return nil, 0, err
		}
		hs := time.Since(start)
		return &echoSession{
			send: func(id uint64) error {
				return c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: id}}}, false)
			},
			recv: func(ctx context.Context) (uint64, error) {
				for {
					env, err := c.Recv(ctx)
					if err != nil {
						return 0, err
					}
					if p := env.GetPong(); p != nil {
						return p.GetClientTimeMs(), nil
					}
				}
			},
			stop: func() { c.Close() },
		}, hs, nil
	}
}

// RunBaselineEcho drives a bare gorilla echo server (see ServeBaselineEcho)
// with the same load: the same Ping envelope bytes, echoed back untouched.
func RunBaselineEcho(ctx context.Context, wsURL string, pid int, opts EchoOptions) (EchoReport, error) {
	usage := func() ProcUsage { u, _ := ReadProc(pid); return u }
	dial := func(ctx context.Context, i int) (*echoSession, time.Duration, error) {
		start := time.Now()
		d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
		ws, resp, err := d.DialContext(ctx, wsURL, nil)
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		if err != nil {
			return nil, 0, err
		}
		var wmu sync.Mutex
		return &echoSession{
			send: func(id uint64) error {
				b, _ := proto.Marshal(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: id}}})
				wmu.Lock()
				defer wmu.Unlock()
				return ws.WriteMessage(websocket.BinaryMessage, b)
			},
			recv: func(ctx context.Context) (uint64, error) {
				_, b, err := ws.ReadMessage()
				if err != nil {
					return 0, err
				}
				var env codec.ClientEnvelope
				if err := proto.Unmarshal(b, &env); err != nil {
					return 0, err
				}
				return env.GetPing().GetClientTimeMs(), nil
			},
			stop: func() { ws.Close() },
		}, time.Since(start), nil
	}
	return runEcho(ctx, "baseline", usage, dial, opts)
}

func runEcho(ctx context.Context, scenario string, usage func() ProcUsage, dial func(context.Context, int) (*echoSession, time.Duration, error), opts EchoOptions) (EchoReport, error) {
	rep := EchoReport{Scenario: scenario, Transport: opts.Transport, Sessions: opts.Sessions}
	if opts.DialWorkers <= 0 {
		opts.DialWorkers = 32
	}
	before := usage()
	rep.RSSBefore = before.RSSBytes

	sessions := make([]*echoSession, opts.Sessions)
	var hs Latencies
	var errMu sync.Mutex
	var firstErrs []string
	var connErrs atomic.Int64
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for w := 0; w < opts.DialWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= opts.Sessions || ctx.Err() != nil {
					return
				}
				dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				s, d, err := dial(dctx, i)
				cancel()
				if err != nil {
					connErrs.Add(1)
					errMu.Lock()
					if len(firstErrs) < 5 {
						firstErrs = append(firstErrs, err.Error())
					}
					errMu.Unlock()
					continue
				}
				hs.Add(d)
				sessions[i] = s
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, s := range sessions {
			if s != nil {
				s.stop()
			}
		}
	}()
	rep.ConnectErrors = int(connErrs.Load())
	rep.Connected = opts.Sessions - rep.ConnectErrors
	rep.Handshake = hs.Summary()
	rep.Errors = firstErrs
	// Let the server settle before reading idle RSS.
	settle := opts.Settle
	if settle <= 0 {
		settle = time.Second
	}
	time.Sleep(settle)
	idle := usage()
	rep.RSSIdle = idle.RSSBytes
	if rep.Connected > 0 {
		rep.RSSPerSession = (idle.RSSBytes - before.RSSBytes) / int64(rep.Connected)
	}
	if opts.Duration <= 0 || opts.Rate <= 0 {
		return rep, nil
	}

	var rtt Latencies
	var sent, received atomic.Int64
	ectx, cancel := context.WithTimeout(ctx, opts.Duration)
	defer cancel()
	cpu0 := usage().CPU
	start := time.Now()
	interval := time.Duration(float64(time.Second) / opts.Rate)
	for i, s := range sessions {
		if s == nil {
			continue
		}
		st := &sentTimes{}
		wg.Add(2)
		go func() { // sender
			defer wg.Done()
			// Spread the sessions' phases over one interval.
			phase := time.Duration(int64(interval) * int64(i) / int64(max(1, opts.Sessions)))
			timer := time.NewTimer(phase)
			defer timer.Stop()
			var id uint64
			for {
				select {
				case <-ectx.Done():
					return
				case <-timer.C:
				}
				id++
				st.mu.Lock()
				st.t[id%uint64(len(st.t))] = time.Now()
				st.mu.Unlock()
				if err := s.send(id); err != nil {
					return
				}
				sent.Add(1)
				timer.Reset(interval)
			}
		}()
		go func() { // receiver
			defer wg.Done()
			for {
				id, err := s.recv(ectx)
				if err != nil {
					return
				}
				st.mu.Lock()
				t0 := st.t[id%uint64(len(st.t))]
				st.mu.Unlock()
				rtt.Add(time.Since(t0))
				received.Add(1)
			}
		}()
	}
	<-ectx.Done()
	elapsed := time.Since(start)
	cpu1 := usage().CPU
	// Unblock receivers parked in reads that ignore ctx (gorilla).
	for _, s := range sessions {
		if s != nil {
			s.stop()
		}
	}
	wg.Wait()
	rep.RTT = rtt.Summary()
	rep.Sent, rep.Received = sent.Load(), received.Load()
	rep.Throughput = float64(rep.Received) / elapsed.Seconds()
	rep.ServerCPU = cpu1 - cpu0
	if rep.Received > 0 {
		rep.CPUPerMessage = rep.ServerCPU / time.Duration(rep.Received)
	}
	return rep, nil
}

// ServeBaselineEcho runs a bare gorilla WebSocket echo server: the floor
// the edge's per-message CPU is compared against.
func ServeBaselineEcho(ctx context.Context, srv *http.Server) error {
	up := websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 1024, CheckOrigin: func(*http.Request) bool { return true }}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for {
			mt, b, err := ws.ReadMessage()
			if err != nil {
				return
			}
			if err := ws.WriteMessage(mt, b); err != nil {
				return
			}
		}
	})
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
