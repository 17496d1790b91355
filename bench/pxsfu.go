package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oshun/egbe-edge/internal/epicplayer"
	"github.com/oshun/egbe-edge/signalling/streamer"
)

// The pxsfu scenario (issue 14): one synthetic streamer, three simulcast
// layers of I_PCM H.264 (256x128, 128x64, 64x32 at 12 fps: about 6 Mbit/s
// in all), fanned out to N players by the Go SFU inside the edge
// (--pxsfu 1), and, in the same run, by a bare pion forwarder (the
// canonical pion broadcast: default interceptors, one TrackLocalStaticRTP
// per layer written for every player) in its own process. The players are
// pion receivers speaking Epic's player protocol (internal/epicplayer) in
// a child process, so their CPU is charged to neither forwarder; player i
// asks for layer Layers[i % len(Layers)].

// PxSFUOptions shape the scenario.
type PxSFUOptions struct {
	Players  []int         // player counts, one run each per forwarder
	Duration time.Duration // measured window
	Warmup   time.Duration // after every player plays, before the window
	Layers   []int         // round robin per player
	FPS      int
	Self     string   // this binary (children: pxsfu-receivers, pxsfu-bare)
	ChildEnv []string // added to the children's environment
	Bare     bool     // also run the bare pion forwarder
}

// PxSFURun is one forwarder at one player count.
type PxSFURun struct {
	Kind               string // "pxsfu" or "bare"
	Players, Playing   int
	Window             time.Duration
	Forwarded          int64 // the forwarder's writes in the window
	Received           int64 // the players' packets in the window
	CPU                time.Duration
	IdleCPU            time.Duration // the forwarder's CPU over a window of the same length before any player
	RSSBefore, RSSWith int64
	KeyRequests        float64 // PLIs sent upstream while the players joined
	DelayP99           float64 // seconds, from the forwarder's histogram (bucket bound)
	Err                string
}

// PerCPU is forwarded packets per forwarder CPU-second, net of the CPU
// the forwarder spent over a window of the same length with its streamer
// and no player (upstream receive, RTCP, timers).
func (r PxSFURun) PerCPU() float64 {
	if d := r.CPU - r.IdleCPU; d > 0 {
		return float64(r.Forwarded) / d.Seconds()
	}
	return 0
}

// GrossPerCPU is forwarded packets per forwarder CPU-second, all of it.
func (r PxSFURun) GrossPerCPU() float64 {
	if r.CPU <= 0 {
		return 0
	}
	return float64(r.Forwarded) / r.CPU.Seconds()
}

// Loss is the share of forwarded packets the players did not receive.
func (r PxSFURun) Loss() float64 {
	if r.Forwarded == 0 {
		return 0
	}
	return math.Max(0, 1-float64(r.Received)/float64(r.Forwarded))
}

// RSSPerPlayer is the forwarder's resident memory per player.
func (r PxSFURun) RSSPerPlayer() int64 {
	if r.Playing == 0 {
		return 0
	}
	return (r.RSSWith - r.RSSBefore) / int64(r.Playing)
}

// PxSFUReport is every run.
type PxSFUReport struct {
	Runs []PxSFURun
}

func (r PxSFUReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-6s %7s %7s %9s %11s %11s %9s %12s %10s %7s %11s %10s %9s\n", "sfu", "players", "playing", "window",
		"forwarded", "cpu", "idle cpu", "fwd/cpu-s", "(gross)", "loss", "rss/player", "pli/join", "delay p99")
	for _, x := range r.Runs {
		if x.Err != "" {
			fmt.Fprintf(&b, "%-6s %7d error: %s\n", x.Kind, x.Players, x.Err)
			continue
		}
		key := "-"
		if x.Kind == "pxsfu" {
			key = fmt.Sprintf("%.3f", x.KeyRequests/float64(max(x.Players, 1)))
		}
		fmt.Fprintf(&b, "%-6s %7d %7d %9v %11d %11v %9v %12.0f %10.0f %6.2f%% %7.1f KiB %10s %7.2fms\n", x.Kind, x.Players, x.Playing,
			x.Window.Round(time.Millisecond), x.Forwarded, x.CPU.Round(time.Millisecond), x.IdleCPU.Round(time.Millisecond),
			x.PerCPU(), x.GrossPerCPU(), 100*x.Loss(), float64(x.RSSPerPlayer())/1024, key, 1000*x.DelayP99)
	}
	for _, n := range r.players() {
		var ours, bare *PxSFURun
		for i := range r.Runs {
			if r.Runs[i].Players == n && r.Runs[i].Err == "" {
				if r.Runs[i].Kind == "pxsfu" {
					ours = &r.Runs[i]
				} else {
					bare = &r.Runs[i]
				}
			}
		}
		if ours != nil && bare != nil && bare.PerCPU() > 0 {
			fmt.Fprintf(&b, "players=%d: Go SFU / bare pion = %.2fx forwarded packets per CPU-second net of idle (%.2fx gross; target >= 2x)\n",
				n, ours.PerCPU()/bare.PerCPU(), ours.GrossPerCPU()/max(bare.GrossPerCPU(), 1e-9))
		}
	}
	return b.String()
}

func (r PxSFUReport) players() []int {
	var ns []int
	for _, x := range r.Runs {
		if len(ns) == 0 || ns[len(ns)-1] != x.Players {
			ns = append(ns, x.Players)
		}
	}
	return ns
}

// RunPxSFU runs the scenario against t (an edge with --pxsfu 1 and an
// SFU port).
func RunPxSFU(ctx context.Context, t *Target, opts PxSFUOptions) (PxSFUReport, error) {
	var rep PxSFUReport
	if t.StreamerWS == "" || t.PlayerWS == "" || t.SFUWS == "" {
		return rep, errors.New("bench: pxsfu needs the edge's streamer, player and SFU listeners")
	}
	if opts.FPS == 0 {
		opts.FPS = 12
	}
	if len(opts.Layers) == 0 {
		opts.Layers = []int{0, 1, 2}
	}
	scfg := streamer.Default()
	scfg.URL, scfg.ID = "ws://"+t.StreamerWS, "DefaultStreamer"
	scfg.IncludeLoopback, scfg.Simulcast = true, true
	scfg.Width, scfg.Height, scfg.FPS = 256, 128, opts.FPS
	sctx, stopStreamer := context.WithCancel(ctx)
	sdone := make(chan error, 1)
	go func() { sdone <- streamer.Run(sctx, scfg) }()
	defer func() { stopStreamer(); <-sdone }()
	if err := waitMetric(ctx, t, `egbe_pxsfu_upstream_connected{sfu="SFU"} 1`); err != nil {
		return rep, err
	}
	var bare *child
	if opts.Bare {
		var err error
		bare, err = startChild(ctx, opts.Self, opts.ChildEnv, "pxsfu-bare", "--url", "ws://"+t.SFUWS, "--id", "BARE",
			"--layers", joinInts(opts.Layers))
		if err != nil {
			return rep, err
		}
		defer bare.stop()
		if _, err := bare.await("ready"); err != nil {
			return rep, fmt.Errorf("bare forwarder: %w", err)
		}
	}
	for _, n := range opts.Players {
		kinds := []string{"pxsfu"}
		if bare != nil {
			kinds = append(kinds, "bare")
		}
		for _, kind := range kinds {
			run := PxSFURun{Kind: kind, Players: n}
			var err error
			if kind == "pxsfu" {
				err = runPxSFUOnce(ctx, t, opts, &run, nil)
			} else {
				err = runPxSFUOnce(ctx, t, opts, &run, bare)
			}
			if err != nil {
				run.Err = err.Error()
			}
			rep.Runs = append(rep.Runs, run)
			fmt.Fprintf(os.Stderr, "%s players=%d playing=%d forwarded/cpu-s=%.0f %s\n", kind, n, run.Playing, run.PerCPU(), run.Err)
		}
	}
	return rep, nil
}

// forwarderStats is what one forwarder reports: its counters (the SFU's
// from /metrics, the bare one's over its pipe), CPU and RSS.
type forwarderStats struct {
	forwarded, keySent float64
	hist               []bucket
	cpu                time.Duration
	rss                int64
}

func (t *Target) pxsfuStats() (forwarderStats, error) {
	var s forwarderStats
	resp, err := http.Get(t.AdminBase + "/metrics")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok || !strings.Contains(name, `sfu="SFU"`) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(name, "egbe_pxsfu_packets_forwarded_total"):
			s.forwarded = v
		case strings.HasPrefix(name, "egbe_pxsfu_keyframe_requests_sent_total"):
			s.keySent = v
		case strings.HasPrefix(name, "egbe_pxsfu_forward_delay_seconds_bucket"):
			if le := labelValue(name, "le"); le != "" {
				bound, _ := strconv.ParseFloat(le, 64)
				if le == "+Inf" {
					bound = math.Inf(1)
				}
				s.hist = append(s.hist, bucket{bound, v})
			}
		}
	}
	u, err := ReadProc(t.PID)
	s.cpu, s.rss = u.CPU, u.RSSBytes
	return s, err
}

func runPxSFUOnce(ctx context.Context, t *Target, opts PxSFUOptions, run *PxSFURun, bare *child) error {
	stats := func() (forwarderStats, error) {
		if bare == nil {
			return t.pxsfuStats()
		}
		return bare.stats()
	}
	streamerID := "SFU"
	if bare != nil {
		streamerID = "BARE"
	}
	idle0, err := stats()
	if err != nil {
		return err
	}
	time.Sleep(opts.Duration)
	idle1, err := stats()
	if err != nil {
		return err
	}
	run.IdleCPU = idle1.cpu - idle0.cpu
	run.RSSBefore = idle1.rss
	rc, err := startChild(ctx, opts.Self, opts.ChildEnv, "pxsfu-receivers", "--url", "ws://"+t.PlayerWS, "--streamer", streamerID,
		"--players", strconv.Itoa(run.Players), "--layers", joinInts(opts.Layers))
	if err != nil {
		return err
	}
	defer rc.stop()
	ready, err := rc.await("ready")
	if err != nil {
		return err
	}
	run.Playing = int(ready["playing"].(float64))
	joined, err := stats()
	if err != nil {
		return err
	}
	run.KeyRequests = joined.keySent - idle1.keySent
	time.Sleep(opts.Warmup)
	c0, err := rc.count()
	if err != nil {
		return err
	}
	s0, err := stats()
	if err != nil {
		return err
	}
	t0 := time.Now()
	time.Sleep(opts.Duration)
	c1, err := rc.count()
	if err != nil {
		return err
	}
	s1, err := stats()
	if err != nil {
		return err
	}
	run.Window = time.Since(t0)
	run.Received = c1 - c0
	run.Forwarded = int64(s1.forwarded - s0.forwarded)
	run.CPU = s1.cpu - s0.cpu
	run.RSSWith = s1.rss
	run.DelayP99 = histQuantile(diffBuckets(s1.hist, s0.hist), 0.99)
	return nil
}

// bucket is one cumulative histogram bucket.
type bucket struct{ le, n float64 }

func diffBuckets(a, b []bucket) []bucket {
	out := make([]bucket, len(a))
	for i := range a {
		out[i] = a[i]
		if i < len(b) {
			out[i].n -= b[i].n
		}
	}
	return out
}

// histQuantile is the upper bound of the bucket holding quantile q.
func histQuantile(h []bucket, q float64) float64 {
	if len(h) == 0 || h[len(h)-1].n == 0 {
		return 0
	}
	want := q * h[len(h)-1].n
	for _, b := range h {
		if b.n >= want {
			return b.le
		}
	}
	return h[len(h)-1].le
}

func labelValue(name, label string) string {
	_, rest, ok := strings.Cut(name, label+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

func waitMetric(ctx context.Context, t *Target, want string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(t.AdminBase + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), want) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("bench: %s not seen on /metrics", want)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// child is a helper process speaking JSON lines: it prints events, and
// answers "count" / "stats" requests on stdin.
type child struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
	mu  sync.Mutex
}

func startChild(ctx context.Context, self string, env []string, args ...string) (*child, error) {
	cmd := exec.CommandContext(ctx, self, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return &child{cmd: cmd, in: in, out: sc}, nil
}

// await reads lines until one with "event": ev.
func (c *child) await(ev string) (map[string]any, error) {
	for c.out.Scan() {
		var m map[string]any
		if json.Unmarshal(c.out.Bytes(), &m) != nil {
			continue
		}
		if m["event"] == ev {
			return m, nil
		}
		if m["event"] == "error" {
			return nil, fmt.Errorf("%s: %v", c.cmd.Args[1], m["error"])
		}
	}
	return nil, fmt.Errorf("%s ended before %q", c.cmd.Args[1], ev)
}

func (c *child) ask(cmd string) (map[string]any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := fmt.Fprintln(c.in, cmd); err != nil {
		return nil, err
	}
	return c.await(cmd)
}

func (c *child) count() (int64, error) {
	m, err := c.ask("count")
	if err != nil {
		return 0, err
	}
	return int64(m["packets"].(float64)), nil
}

// stats asks the bare forwarder for its counters.
func (c *child) stats() (forwarderStats, error) {
	var s forwarderStats
	m, err := c.ask("stats")
	if err != nil {
		return s, err
	}
	s.forwarded = m["forwarded"].(float64)
	if hs, ok := m["hist"].([]any); ok {
		for _, x := range hs {
			p := x.([]any)
			le := p[0].(float64)
			if le < 0 {
				le = math.Inf(1)
			}
			s.hist = append(s.hist, bucket{le, p[1].(float64)})
		}
	}
	u, err := ReadProc(c.cmd.Process.Pid)
	s.cpu, s.rss = u.CPU, u.RSSBytes
	return s, err
}

func (c *child) stop() {
	_ = c.in.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// emit prints one JSON line (children).
func emit(w *bufio.Writer, mu *sync.Mutex, v map[string]any) {
	mu.Lock()
	defer mu.Unlock()
	b, _ := json.Marshal(v)
	_, _ = w.Write(append(b, '\n'))
	_ = w.Flush()
}

// PxSFUReceiversCommand is the receivers' child process: --players pion
// players of --streamer on the player port, player i asking for layer
// Layers[i % len]; it prints {"event":"ready","playing":k} once each plays
// (or after a minute), then answers "count" with the packets received, and
// exits when stdin closes.
func PxSFUReceiversCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pxsfu-receivers", flag.ContinueOnError)
	url := fs.String("url", "", "player port")
	sid := fs.String("streamer", "SFU", "streamer (SFU) id")
	n := fs.Int("players", 100, "players")
	layersF := fs.String("layers", "0,1,2", "layer per player, round robin")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	_, _ = RaiseNoFile()
	layers, err := parseInts(*layersF)
	if err != nil || len(layers) == 0 {
		return fmt.Errorf("--layers: %v", err)
	}
	out := bufio.NewWriter(os.Stdout)
	var omu sync.Mutex
	players := make([]*epicplayer.Player, *n)
	var wg sync.WaitGroup
	var failed atomic.Int64
	jobs := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				p, err := epicplayer.Dial(ctx, epicplayer.Config{URL: *url, StreamerID: *sid, Layer: layers[i%len(layers)]})
				if err != nil {
					failed.Add(1)
					continue
				}
				players[i] = p
			}
		}()
	}
	for i := range *n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	deadline := time.Now().Add(time.Minute)
	playing := 0
	for time.Now().Before(deadline) {
		playing = 0
		for _, p := range players {
			if p != nil && p.Packets() > 0 {
				playing++
			}
		}
		if playing+int(failed.Load()) >= *n {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	emit(out, &omu, map[string]any{"event": "ready", "playing": playing, "failed": failed.Load()})
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "count" {
			var total int64
			for _, p := range players {
				if p != nil {
					total += p.Packets()
				}
			}
			emit(out, &omu, map[string]any{"event": "count", "packets": total})
		}
	}
	var cw sync.WaitGroup
	for _, p := range players {
		if p != nil {
			cw.Add(1)
			go func() { defer cw.Done(); p.Close() }()
		}
	}
	cw.Wait()
	return nil
}

// PxSFUCommand is `egbe-bench pxsfu`.
func PxSFUCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pxsfu", flag.ContinueOnError)
	bin := fs.String("edge-bin", "", "egbe-edge binary (started with --pxsfu 1 on free loopback ports)")
	playersF := fs.String("players", "100,200,500", "player counts")
	layersF := fs.String("layers", "0,1,2", "layer per player, round robin")
	taskset := fs.String("edge-taskset", "", "pin the edge (taskset -c LIST)")
	var opts PxSFUOptions
	fs.DurationVar(&opts.Duration, "duration", 10*time.Second, "measured window per run")
	fs.DurationVar(&opts.Warmup, "warmup", 3*time.Second, "after the players play, before the window")
	fs.IntVar(&opts.FPS, "fps", 12, "streamer frames per second (12: about 6 Mbit/s over the three layers)")
	fs.BoolVar(&opts.Bare, "bare", true, "also measure the bare pion forwarder")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *bin == "" {
		return errors.New("pxsfu: --edge-bin is required")
	}
	var err error
	if opts.Players, err = parseInts(*playersF); err != nil {
		return err
	}
	if opts.Layers, err = parseInts(*layersF); err != nil {
		return err
	}
	if opts.Self, err = os.Executable(); err != nil {
		return err
	}
	_, _ = RaiseNoFile()
	// No dev shard: its simulated world would be charged to the SFU.
	t, err := StartEdgeWith(ctx, EdgeOptions{Bin: *bin, Extra: []string{"--pxsfu", "1", "--dev-shard=false"}, Taskset: *taskset})
	if err != nil {
		return err
	}
	defer t.Stop()
	fmt.Fprintf(os.Stderr, "edge pid=%d admin=%s (pprof: %s/debug/pprof/profile)\n", t.PID, t.AdminBase, t.AdminBase)
	rep, err := RunPxSFU(ctx, t, opts)
	fmt.Print(rep)
	return err
}
