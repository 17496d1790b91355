package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

// ueOfferSDP is a real UE5.5 streamer offer (H.264 video, Opus audio, data
// channel; 3.8 KiB), the size that dominates a handshake's bytes.
//
//go:embed ue_offer.sdp
var ueOfferSDP string

// PxOptions shape the pxstream scenario.
type PxOptions struct {
	Pairs      int // concurrent player/streamer pairs
	Handshakes int // measured handshakes (a warm-up of Pairs*2 runs first)
	// Idle, when > 0, connects this many idle players after the
	// handshakes and reports the edge's RSS per idle player.
	Idle        int
	DialWorkers int // concurrent dials for Idle
	// Settle is how long Idle waits for the edge's RSS to settle before
	// and after connecting (0: 3 s).
	Settle time.Duration
}

// PxReport is what the pxstream scenario measures.
type PxReport struct {
	Pairs, Handshakes int
	Errors            int
	FirstErrs         []string
	Elapsed           time.Duration
	Latency           Summary // dial to pong, per handshake
	EdgeCPU           time.Duration
	ClientCPU         time.Duration
	RSSBefore         int64 // edge, streamers connected, before the warm-up
	RSSAfter          int64 // edge, after the measured handshakes

	IdleWanted, IdleConnected int
	IdleErrors                int
	IdleFirstErrs             []string
	IdleConnect               Summary
	IdleRSSBefore, IdleRSS    int64
	IdleEdgeCPU               time.Duration
	NoFile                    uint64 // RLIMIT_NOFILE in force
}

// HandshakesPerSec is the measured phase's rate.
func (r PxReport) HandshakesPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Handshakes) / r.Elapsed.Seconds()
}

// EdgeCPUPer1k is edge CPU-seconds per 1,000 handshakes.
func (r PxReport) EdgeCPUPer1k() float64 {
	if r.Handshakes == 0 {
		return 0
	}
	return r.EdgeCPU.Seconds() * 1000 / float64(r.Handshakes)
}

func (r PxReport) String() string {
	var b strings.Builder
	if r.Handshakes > 0 {
		fmt.Fprintf(&b, "pxstream pairs=%d handshakes=%d errors=%d elapsed=%v\n", r.Pairs, r.Handshakes, r.Errors, r.Elapsed.Round(time.Millisecond))
		fmt.Fprintf(&b, "  rate      %.0f handshakes/s\n", r.HandshakesPerSec())
		fmt.Fprintf(&b, "  latency   %s  (dial to pong)\n", r.Latency)
		fmt.Fprintf(&b, "  edge cpu  %v = %.3f CPU-s per 1,000 handshakes (%v each; target <= 0.150)\n",
			r.EdgeCPU.Round(time.Millisecond), r.EdgeCPUPer1k(), (r.EdgeCPU / time.Duration(r.Handshakes)).Round(time.Microsecond))
		fmt.Fprintf(&b, "  client cpu %v = %v per handshake\n", r.ClientCPU.Round(time.Millisecond), (r.ClientCPU / time.Duration(r.Handshakes)).Round(time.Microsecond))
		fmt.Fprintf(&b, "  edge rss  before=%.1f MiB after=%.1f MiB\n", mib(r.RSSBefore), mib(r.RSSAfter))
		for _, e := range r.FirstErrs {
			fmt.Fprintf(&b, "  error: %s\n", e)
		}
	}
	if r.IdleWanted > 0 {
		fmt.Fprintf(&b, "pxstream idle players wanted=%d connected=%d errors=%d (RLIMIT_NOFILE %d)\n", r.IdleWanted, r.IdleConnected, r.IdleErrors, r.NoFile)
		fmt.Fprintf(&b, "  connect   %s\n", r.IdleConnect)
		fmt.Fprintf(&b, "  edge cpu  %v for the connects\n", r.IdleEdgeCPU.Round(time.Millisecond))
		per := int64(0)
		if r.IdleConnected > 0 {
			per = (r.IdleRSS - r.IdleRSSBefore) / int64(r.IdleConnected)
		}
		fmt.Fprintf(&b, "  edge rss  before=%.1f MiB idle=%.1f MiB per-player=%.1f KiB (50,000 would need %.0f MiB)\n",
			mib(r.IdleRSSBefore), mib(r.IdleRSS), float64(per)/1024, mib(r.IdleRSSBefore+per*50000))
		for _, e := range r.IdleFirstErrs {
			fmt.Fprintf(&b, "  error: %s\n", e)
		}
	}
	return b.String()
}

// pxDialer dials loopback WebSockets from rotating source addresses
// (127.0.0.1-127.0.0.32), so TIME_WAIT sockets and tens of thousands of
// idle connections do not exhaust one address's ephemeral ports.
type pxDialer struct {
	next atomic.Uint32
	d    websocket.Dialer
}

func newPxDialer(bufSize int) *pxDialer {
	pd := &pxDialer{}
	pd.d = websocket.Dialer{
		HandshakeTimeout: 20 * time.Second,
		ReadBufferSize:   bufSize,
		WriteBufferSize:  bufSize,
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			n := pd.next.Add(1)
			src := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+n%32))}
			d := net.Dialer{LocalAddr: src}
			return d.DialContext(ctx, network, addr)
		},
	}
	return pd
}

func (pd *pxDialer) dial(ctx context.Context, url string) (*websocket.Conn, error) {
	ws, resp, err := pd.d.DialContext(ctx, url, nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	return ws, err
}

// pxConn reads frames into a reused buffer (the client's own CPU is part
// of what the scenario reports, so it stays lean).
type pxConn struct {
	ws  *websocket.Conn
	buf []byte
}

func (c *pxConn) write(b []byte) error { return c.ws.WriteMessage(websocket.TextMessage, b) }

// read returns the next text frame; it is valid until the next read.
func (c *pxConn) read() ([]byte, error) {
	mt, r, err := c.ws.NextReader()
	if err != nil {
		return nil, err
	}
	c.buf = c.buf[:0]
	for {
		if len(c.buf) == cap(c.buf) {
			c.buf = append(c.buf, 0)[:len(c.buf)]
		}
		n, err := r.Read(c.buf[len(c.buf):cap(c.buf)])
		c.buf = c.buf[:len(c.buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if mt != websocket.TextMessage {
		return nil, fmt.Errorf("bench: frame type %d", mt)
	}
	return c.buf, nil
}

// expect reads a frame and checks its type.
func (c *pxConn) expect(typ string) ([]byte, error) {
	b, err := c.read()
	if err != nil {
		return nil, fmt.Errorf("want %s: %w", typ, err)
	}
	if !bytes.Contains(b, []byte(`"type":"`+typ+`"`)) {
		return nil, fmt.Errorf("want %s, got %.80s", typ, b)
	}
	return b, nil
}

// pxMessages are a pair's precomposed frames.
type pxMessages struct {
	endpointID, list, subscribe, answer, ping []byte
	playerICE                                 [4][]byte
}

func newPxMessages(streamerID string) pxMessages {
	m := pxMessages{
		endpointID: []byte(`{"type":"endpointId","id":"` + streamerID + `","protocolVersion":"1.1.0"}`),
		list:       []byte(`{"type":"listStreamers"}`),
		subscribe:  []byte(`{"type":"subscribe","streamerId":"` + streamerID + `"}`),
		answer: []byte(`{"type":"answer","sdp":"v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1 2\r\n` +
			`m=video 9 UDP/TLS/RTP/SAVPF 96\r\na=fmtp:96 x-google-start-bitrate=10000;x-google-max-bitrate=100000\r\n","minBitrateBps":0,"maxBitrateBps":0}`),
		ping: []byte(`{"type":"ping","time":1733150000125}`),
	}
	for i := range m.playerICE {
		m.playerICE[i] = []byte(`{"type":"iceCandidate","candidate":{"candidate":"candidate:` + strconv.Itoa(i) +
			` 1 udp 2122260223 192.168.1.9 6100` + strconv.Itoa(i) + ` typ host","sdpMid":"0","sdpMLineIndex":0,"usernameFragment":"abcd"}}`)
	}
	return m
}

// streamerFrames are the streamer's offer and ICE candidates for playerID.
func streamerFrames(playerID string, offerSDP []byte) (offer []byte, ice [4][]byte) {
	pid := strconv.Quote(playerID)
	offer = make([]byte, 0, len(offerSDP)+128)
	offer = append(offer, `{"type":"offer","playerId":`...)
	offer = append(offer, pid...)
	offer = append(offer, `,"sdp":`...)
	offer = append(offer, offerSDP...)
	offer = append(offer, `,"multiplex":true,"sfu":false}`...)
	for i := range ice {
		ice[i] = []byte(`{"type":"iceCandidate","playerId":` + pid + `,"candidate":{"candidate":"candidate:` + strconv.Itoa(i) +
			` 1 udp 2122260223 10.0.0.5 5000` + strconv.Itoa(i) + ` typ host","sdpMid":"0","sdpMLineIndex":0}}`)
	}
	return offer, ice
}

// pxPair is one streamer connection and the players it serves in turn.
type pxPair struct {
	pd        *pxDialer
	t         *Target
	id        string
	msgs      pxMessages
	offerJSON []byte // the SDP as a JSON string
	st        *pxConn
	pl        pxConn // reused buffer across players
}

func (p *pxPair) connectStreamer(ctx context.Context) error {
	ws, err := p.pd.dial(ctx, "ws://"+p.t.StreamerWS+"/?pop=local&codecs=H264")
	if err != nil {
		return fmt.Errorf("streamer dial: %w", err)
	}
	ws.SetReadLimit(-1)
	p.st = &pxConn{ws: ws}
	if _, err := p.st.expect("identify"); err != nil {
		return err
	}
	if _, err := p.st.expect("config"); err != nil {
		return err
	}
	if err := p.st.write(p.msgs.endpointID); err != nil {
		return err
	}
	b, err := p.st.expect("endpointIdConfirm")
	if err != nil {
		return err
	}
	if !bytes.Contains(b, []byte(`"committedId":"`+p.id+`"`)) {
		return fmt.Errorf("streamer id not kept: %s", b)
	}
	return nil
}

// handshake runs one full Epic handshake and returns dial-to-pong time.
func (p *pxPair) handshake(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	ws, err := p.pd.dial(ctx, "ws://"+p.t.PlayerWS+"/")
	if err != nil {
		return 0, fmt.Errorf("player dial: %w", err)
	}
	defer ws.Close()
	p.pl.ws = ws
	pl := &p.pl
	if _, err := pl.expect("config"); err != nil {
		return 0, err
	}
	if err := pl.write(p.msgs.list); err != nil {
		return 0, err
	}
	if _, err := pl.expect("streamerList"); err != nil {
		return 0, err
	}
	if err := pl.write(p.msgs.subscribe); err != nil {
		return 0, err
	}
	b, err := p.st.expect("playerConnected")
	if err != nil {
		return 0, err
	}
	playerID, ok := jsonStringField(b, "playerId")
	if !ok {
		return 0, fmt.Errorf("playerConnected without playerId: %s", b)
	}
	offer, ice := streamerFrames(playerID, p.offerJSON)
	if err := p.st.write(offer); err != nil {
		return 0, err
	}
	for _, c := range ice {
		if err := p.st.write(c); err != nil {
			return 0, err
		}
	}
	if b, err = pl.expect("offer"); err != nil {
		return 0, err
	}
	if bytes.Contains(b, []byte(`"playerId"`)) {
		return 0, errors.New("offer reached the player with playerId")
	}
	for range 4 {
		if _, err := pl.expect("iceCandidate"); err != nil {
			return 0, err
		}
	}
	if err := pl.write(p.msgs.answer); err != nil {
		return 0, err
	}
	for _, c := range p.msgs.playerICE {
		if err := pl.write(c); err != nil {
			return 0, err
		}
	}
	if _, err := p.st.expect("answer"); err != nil {
		return 0, err
	}
	for range 4 {
		if _, err := p.st.expect("iceCandidate"); err != nil {
			return 0, err
		}
	}
	if err := pl.write(p.msgs.ping); err != nil {
		return 0, err
	}
	if _, err := pl.expect("pong"); err != nil {
		return 0, err
	}
	lat := time.Since(start)
	// Close as the frontend does; the streamer hears playerDisconnected.
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(5*time.Second))
	if _, err := pl.read(); err == nil {
		return 0, errors.New("player: frame after close")
	}
	// The close frame came back: close TCP as a browser does once the
	// server ends the connection (Epic's server reports the player gone
	// only when its socket has closed; the edge already did on the close
	// frame).
	_ = ws.Close()
	if _, err := p.st.expect("playerDisconnected"); err != nil {
		return 0, err
	}
	return lat, nil
}

// jsonStringField finds "key":"value" in a frame the broker composed.
func jsonStringField(b []byte, key string) (string, bool) {
	k := []byte(`"` + key + `":"`)
	i := bytes.Index(b, k)
	if i < 0 {
		return "", false
	}
	rest := b[i+len(k):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return "", false
	}
	return string(rest[:j]), true
}

// clientCPU is this process's CPU time.
func clientCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// RunPxstream runs the pxstream scenario against t (drop-in auth; t must
// have StreamerWS and PlayerWS).
func RunPxstream(ctx context.Context, t *Target, opts PxOptions) (PxReport, error) {
	rep := PxReport{Pairs: opts.Pairs, IdleWanted: opts.Idle}
	rep.NoFile, _ = RaiseNoFile()
	if t.StreamerWS == "" || t.PlayerWS == "" {
		return rep, errors.New("bench: pxstream needs the edge's --streamer-ws and --player-ws")
	}
	if opts.Handshakes > 0 {
		if opts.Pairs <= 0 {
			return rep, errors.New("bench: --pairs must be > 0")
		}
		if err := runHandshakes(ctx, t, opts, &rep); err != nil {
			return rep, err
		}
	}
	if opts.Idle > 0 {
		runIdle(ctx, t, opts, &rep)
	}
	return rep, nil
}

func runHandshakes(ctx context.Context, t *Target, opts PxOptions, rep *PxReport) error {
	offerJSON, _ := json.Marshal(ueOfferSDP)
	pd := newPxDialer(4096)
	pairs := make([]*pxPair, opts.Pairs)
	for i := range pairs {
		id := "BenchStreamer" + strconv.Itoa(i) + "x" // no trailing digit: ids stay as sent
		pairs[i] = &pxPair{pd: pd, t: t, id: id, msgs: newPxMessages(id), offerJSON: offerJSON}
		if err := pairs[i].connectStreamer(ctx); err != nil {
			return fmt.Errorf("bench: streamer %d: %w", i, err)
		}
	}
	defer func() {
		for _, p := range pairs {
			if p.st != nil {
				p.st.ws.Close()
			}
		}
	}()
	rep.RSSBefore = t.Usage().RSSBytes

	var errMu sync.Mutex
	var errs atomic.Int64
	phase := func(n int, lat *Latencies) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for _, p := range pairs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(n) && ctx.Err() == nil {
					d, err := p.handshake(ctx)
					if err == nil {
						if lat != nil {
							lat.Add(d)
						}
						continue
					}
					errs.Add(1)
					errMu.Lock()
					if len(rep.FirstErrs) < 5 {
						rep.FirstErrs = append(rep.FirstErrs, err.Error())
					}
					errMu.Unlock()
					// The streamer's view may be out of step: start it afresh.
					p.st.ws.Close()
					if err := p.connectStreamer(ctx); err != nil {
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	phase(2*opts.Pairs, nil) // warm-up: pools, stacks, TCP
	errs.Store(0)
	rep.FirstErrs = nil

	var lat Latencies
	e0, c0 := t.Usage().CPU, clientCPU()
	start := time.Now()
	phase(opts.Handshakes, &lat)
	rep.Elapsed = time.Since(start)
	e1, c1 := t.Usage().CPU, clientCPU()
	rep.Latency = lat.Summary()
	rep.Handshakes = rep.Latency.N
	rep.Errors = int(errs.Load())
	rep.EdgeCPU, rep.ClientCPU = e1-e0, c1-c0
	rep.RSSAfter = t.Usage().RSSBytes
	return ctx.Err()
}

// runIdle connects opts.Idle players that each read config and then sit
// idle, and reads the edge's RSS.
func runIdle(ctx context.Context, t *Target, opts PxOptions, rep *PxReport) {
	workers := opts.DialWorkers
	if workers <= 0 {
		workers = 64
	}
	pd := newPxDialer(1024)
	settle := opts.Settle
	if settle <= 0 {
		settle = 3 * time.Second
	}
	// Let the handshake phase's sockets drain and the heap settle.
	time.Sleep(settle)
	u0 := t.Usage()
	rep.IdleRSSBefore = u0.RSSBytes
	conns := make([]*websocket.Conn, opts.Idle)
	var lat Latencies
	var errMu sync.Mutex
	var errs, next atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf pxConn
			for !stop.Load() && ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= opts.Idle {
					return
				}
				start := time.Now()
				ws, err := pd.dial(ctx, "ws://"+t.PlayerWS+"/")
				if err == nil {
					buf.ws = ws
					if _, err = buf.expect("config"); err != nil {
						ws.Close()
					}
				}
				if err != nil {
					if errs.Add(1) > 100 {
						stop.Store(true) // out of descriptors or ports: stop here
					}
					errMu.Lock()
					if len(rep.IdleFirstErrs) < 3 {
						rep.IdleFirstErrs = append(rep.IdleFirstErrs, err.Error())
					}
					errMu.Unlock()
					continue
				}
				lat.Add(time.Since(start))
				conns[i] = ws
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	rep.IdleConnect = lat.Summary()
	rep.IdleConnected = rep.IdleConnect.N
	rep.IdleErrors = int(errs.Load())
	// Settle, then take the larger of two readings a second apart (RSS
	// grows as deferred page faults land).
	time.Sleep(settle)
	u1 := t.Usage()
	time.Sleep(settle / 3)
	if u2 := t.Usage(); u2.RSSBytes > u1.RSSBytes {
		u1.RSSBytes = u2.RSSBytes
	}
	rep.IdleRSS = u1.RSSBytes
	rep.IdleEdgeCPU = u1.CPU - u0.CPU
}

// CPUAffinity is this process's allowed CPU list (from /proc), for the
// pinning hint.
func CPUAffinity() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// pxEdgeFlags are the edge flags the pxstream and match commands share.
type pxEdgeFlags struct {
	bin, extra, taskset  string
	streamerWS, playerWS string
	httpBase, adminBase  string
	pid                  int
}

func (f *pxEdgeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.bin, "edge-bin", "", "start this egbe-edge binary on free loopback ports (dev mode, drop-in auth)")
	fs.StringVar(&f.extra, "edge-args", "--dev-shard=false", "extra flags for --edge-bin, space separated")
	fs.StringVar(&f.taskset, "edge-taskset", "", "pin the started edge to these CPUs (taskset -c LIST), e.g. 1")
	fs.StringVar(&f.httpBase, "edge", "", "or attach: the running edge's HTTP origin (http://127.0.0.1:8080)")
	fs.StringVar(&f.adminBase, "edge-admin", "", "the running edge's admin origin")
	fs.StringVar(&f.streamerWS, "edge-streamer-ws", "", "the running edge's streamer listener (host:port)")
	fs.StringVar(&f.playerWS, "edge-player-ws", "", "the running edge's player listener (host:port)")
	fs.IntVar(&f.pid, "edge-pid", 0, "the running edge's pid, for CPU and RSS")
}

func (f *pxEdgeFlags) target(ctx context.Context) (*Target, error) {
	if f.bin != "" {
		return StartEdgeWith(ctx, EdgeOptions{Bin: f.bin, Extra: strings.Fields(f.extra), Taskset: f.taskset})
	}
	if f.httpBase == "" {
		return nil, errors.New("give --edge-bin or --edge/--edge-admin/--edge-streamer-ws/--edge-player-ws")
	}
	t := &Target{HTTPBase: f.httpBase, AdminBase: f.adminBase, StreamerWS: f.streamerWS, PlayerWS: f.playerWS, PID: f.pid}
	if f.adminBase != "" {
		if err := t.waitReady(ctx); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// pinHint tells how to pin client and edge apart when they are not.
func pinHint(w io.Writer, scenario, edgeTaskset string) {
	aff := CPUAffinity()
	if edgeTaskset == "" || aff == "" || strings.ContainsAny(aff, ",-") {
		fmt.Fprintf(w, "hint: pin client and edge to different cores and compare CPU time, not wall time:\n"+
			"  taskset -c 0 egbe-bench %s --edge-bin PATH --edge-taskset 1 ...   (client on CPUs %q now)\n", scenario, aff)
	}
}

// PxstreamCommand is `egbe-bench pxstream`.
func PxstreamCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pxstream", flag.ContinueOnError)
	var ef pxEdgeFlags
	ef.register(fs)
	var opts PxOptions
	fs.IntVar(&opts.Pairs, "pairs", 200, "concurrent player/streamer pairs")
	fs.IntVar(&opts.Handshakes, "handshakes", 20000, "measured full handshakes (0: skip)")
	fs.IntVar(&opts.Idle, "idle", 0, "then connect this many idle players and report edge RSS per player (bounded by RLIMIT_NOFILE)")
	fs.IntVar(&opts.DialWorkers, "dial-workers", 64, "concurrent dials for --idle")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	pinHint(os.Stderr, "pxstream", ef.taskset)
	t, err := ef.target(ctx)
	if err != nil {
		return err
	}
	defer t.Stop()
	fmt.Fprintf(os.Stderr, "edge pid=%d admin=%s (pprof: %s/debug/pprof/profile)\n", t.PID, t.AdminBase, t.AdminBase)
	rep, err := RunPxstream(ctx, t, opts)
	fmt.Print(rep)
	return err
}
