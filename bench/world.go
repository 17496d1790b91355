package bench

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/egbeclient"
)

//go:embed loadtest-policy.json
var loadtestPolicy []byte

// BudgetKbps is the per-client downstream budget (issue 3, fan-out).
const BudgetKbps = 256

// worldCapabilities are what a game client asks for.
var worldCapabilities = []string{"deltas", "unreliable-lane", "world-events", "action-acks"}

// worldShardName names the one reference shard on both sides of the link.
const worldShardName = "bench-shard"

// WorldOptions shape the world scenario: one reference shard process with
// Instances instances of Agents agents (no bot players), an edge linked to
// it, and Clients clients spread round-robin over the instances, each
// sending presence at Rate Hz and acking every snapshot or delta it applied.
type WorldOptions struct {
	EdgeBin, ShardBin string
	EdgeTaskset       string // optional: pin the edge (taskset -c LIST)
	Transport         string // websocket | webtransport | webrtc
	Clients           int
	Instances         int
	Agents            int
	Rate              float64       // presence Hz per client (default 20)
	Warmup            time.Duration // connected but not measured (default 2 s)
	Duration          time.Duration // measured phase
	DialWorkers       int           // concurrent dials (default 32)
	// Idle sessions are connected first, to instances of a second shard
	// with an empty world (one instance per 100 sessions): hello, then
	// only read. They measure what idle sessions cost beside active ones.
	Idle int
	// Profile, if set, is where the edge's CPU profile of the measured
	// phase is written (pprof from its admin listener).
	Profile string
	// ClientProfile, if set, is where this process's (the load client's)
	// CPU profile of the measured phase is written.
	ClientProfile string
	// BenchBin is the egbe-bench binary RunWorldBaseline starts as the
	// bare relay (default: this executable).
	BenchBin string
}

// WorldReport is what the world scenario measures.
type WorldReport struct {
	Transport                    string
	Clients, Instances, Agents   int
	Connected, ConnectErrors     int
	Idle, IdleConnected          int
	ConnectTime                  time.Duration
	Elapsed                      time.Duration
	Latency                      Summary // receive time minus server_time_ms (ms resolution)
	Snapshots, Deltas            int64   // received in the measured phase
	PerClientHz                  float64 // (snapshots+deltas) per client per second
	MeanKbps, MaxKbps            float64 // per client, over the measured phase
	MaxWindowKbps                float64 // worst one-second window of any client
	OverBudget, OverBudgetWin    int     // clients over BudgetKbps (whole phase / any second)
	MaxEntities                  int     // most entities any client held
	BaseMissing                  int64   // deltas against a state the client never had
	EdgeErrors                   int64   // Error envelopes from the edge
	Disconnects                  int64   // connections that ended during the phase
	InboxDrops                   int64   // unreliable messages the client inbox dropped
	EdgeCPU, ShardCPU, ClientCPU time.Duration
	EdgeRSS, ShardRSS            int64
	Errors                       []string
	// Baseline: the server was the bare relay (ServeBaselineWorld), whose
	// figures fill the Edge fields.
	Baseline bool
}

// CPUPerUpdate is the server's CPU per delivered update (0 without any).
func (r WorldReport) CPUPerUpdate() time.Duration {
	if n := r.Snapshots + r.Deltas; n > 0 {
		return r.EdgeCPU / time.Duration(n)
	}
	return 0
}

func (r WorldReport) String() string {
	var b strings.Builder
	sec := r.Elapsed.Seconds()
	fmt.Fprintf(&b, "world/%s clients=%d instances=%d agents=%d connected=%d connect_errors=%d (connect phase %v) measured=%v\n",
		r.Transport, r.Clients, r.Instances, r.Agents, r.Connected, r.ConnectErrors, r.ConnectTime.Round(time.Millisecond), r.Elapsed.Round(time.Millisecond))
	if r.Idle > 0 {
		fmt.Fprintf(&b, "  idle sessions (empty world, hello only): %d of %d connected\n", r.IdleConnected, r.Idle)
	}
	fmt.Fprintf(&b, "  snapshot latency shard->client %s\n", r.Latency)
	fmt.Fprintf(&b, "  received snapshots=%d deltas=%d  per client %.1f/s\n", r.Snapshots, r.Deltas, r.PerClientHz)
	fmt.Fprintf(&b, "  bytes per client: mean=%.1f kbit/s max=%.1f kbit/s worst 1s window=%.1f kbit/s (budget %d): over budget %d clients (any second: %d)\n",
		r.MeanKbps, r.MaxKbps, r.MaxWindowKbps, BudgetKbps, r.OverBudget, r.OverBudgetWin)
	fmt.Fprintf(&b, "  max entities held=%d  errors: edge=%d disconnects=%d delta_base_missing=%d inbox_drops=%d\n",
		r.MaxEntities, r.EdgeErrors, r.Disconnects, r.BaseMissing, r.InboxDrops)
	if sec > 0 {
		server := "edge"
		if r.Baseline {
			server = "bare relay"
		}
		fmt.Fprintf(&b, "  %s cpu=%v (%.2f cores) rss=%.1f MiB\n", server, r.EdgeCPU.Round(10*time.Millisecond), r.EdgeCPU.Seconds()/sec, mib(r.EdgeRSS))
		if n := r.Snapshots + r.Deltas; n > 0 {
			fmt.Fprintf(&b, "  %s cpu per delivered update (with that client's presence and ack): %.1f µs\n", server, r.CPUPerUpdate().Seconds()*1e6)
		}
		if !r.Baseline {
			fmt.Fprintf(&b, "  shard cpu=%v (%.2f cores) rss=%.1f MiB\n", r.ShardCPU.Round(10*time.Millisecond), r.ShardCPU.Seconds()/sec, mib(r.ShardRSS))
		}
		fmt.Fprintf(&b, "  load client cpu=%v (%.2f cores)\n", r.ClientCPU.Round(10*time.Millisecond), r.ClientCPU.Seconds()/sec)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "  error: %s\n", e)
	}
	return b.String()
}

// shardProc is a running egbe-shard.
type shardProc struct {
	cmd  *exec.Cmd
	addr string
	logs sync.WaitGroup // the stderr reader
}

// startShard runs bin on a free loopback UDP port and waits for its
// "listening" log line.
func startShard(ctx context.Context, bin, id string, instances []string, agents int) (*shardProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := exec.Command(bin, "--listen", addr, "--instances", strings.Join(instances, ","),
		"--agents", strconv.Itoa(agents), "--players", "0", "--id", id)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &shardProc{cmd: cmd, addr: addr}
	ready := make(chan struct{})
	s.logs.Add(1)
	go func() {
		defer s.logs.Done()
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			if strings.Contains(sc.Text(), "egbe-shard listening") {
				once.Do(func() { close(ready) })
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case <-ready:
		return s, nil
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	case <-time.After(20 * time.Second):
		s.stop()
		return nil, errors.New("bench: egbe-shard did not start in 20 s")
	}
}

func (s *shardProc) usage() ProcUsage { u, _ := ReadProc(s.cmd.Process.Pid); return u }

func (s *shardProc) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { s.logs.Wait(); _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// worldClient is one connected client and what it measured.
type worldClient struct {
	c        *egbeclient.Conn // WebTransport, WebRTC
	lean     *leanWS          // WebSocket
	instance string

	// owned by the receiver goroutine until it returns
	lat         []time.Duration
	snaps, dels int64
	bytes       int64   // every envelope received, protobuf size (no framing)
	perSec      []int64 // bytes by second of the measured phase
	maxEnt      int
	baseMissing int64
	edgeErrs    int64
	firstErr    string
	ended       bool
}

// heldState is one applied snapshot, kept so a later delta can name it as
// its base.
type heldState struct {
	seq uint64
	ent []*codec.EntityState
}

// withDefaults fills o's unset fields.
func (o WorldOptions) withDefaults() WorldOptions {
	if o.Rate <= 0 {
		o.Rate = 20
	}
	if o.Warmup <= 0 {
		o.Warmup = 2 * time.Second
	}
	if o.DialWorkers <= 0 {
		o.DialWorkers = 32
	}
	if o.Transport == "" {
		o.Transport = "websocket"
	}
	return o
}

// worldTickHz is the reference shard's tick (egbe-shard's default): how
// often each client is sent a state when its window changes.
const worldTickHz = codec.GroundReplicationHz

// RunWorld runs the world scenario.
func RunWorld(ctx context.Context, o WorldOptions) (WorldReport, error) {
	o = o.withDefaults()
	if o.Clients <= 0 || o.Instances <= 0 || o.Duration <= 0 {
		return WorldReport{}, errors.New("bench: world needs clients, instances and duration > 0")
	}
	rep := WorldReport{Transport: o.Transport, Clients: o.Clients, Instances: o.Instances, Agents: o.Agents}
	instances := make([]string, o.Instances)
	for i := range instances {
		instances[i] = fmt.Sprintf("world-%d", i)
	}

	sh, err := startShard(ctx, o.ShardBin, worldShardName, instances, o.Agents)
	if err != nil {
		return rep, err
	}
	defer sh.stop()
	var idleInstances []string
	for i := range (o.Idle + 99) / 100 {
		idleInstances = append(idleInstances, fmt.Sprintf("idle-%d", i))
	}
	var idleShard *shardProc
	if len(idleInstances) > 0 {
		if idleShard, err = startShard(ctx, o.ShardBin, idleShardName, idleInstances, 0); err != nil {
			return rep, err
		}
		defer idleShard.stop()
	}

	pf, err := os.CreateTemp("", "egbe-world-policy-*.json")
	if err != nil {
		return rep, err
	}
	defer os.Remove(pf.Name())
	if _, err := pf.Write(loadtestPolicy); err != nil {
		pf.Close()
		return rep, err
	}
	pf.Close()
	extra := []string{"--dev-shard=false", "--policy", pf.Name(), "--shard", worldShardName + "=" + sh.addr}
	for _, in := range instances {
		extra = append(extra, "--instance", in+"="+worldShardName)
	}
	if idleShard != nil {
		extra = append(extra, "--shard", idleShardName+"="+idleShard.addr)
		for _, in := range idleInstances {
			extra = append(extra, "--instance", in+"="+idleShardName)
		}
	}
	t, err := StartEdgeWith(ctx, EdgeOptions{Bin: o.EdgeBin, Extra: extra, Taskset: o.EdgeTaskset})
	if err != nil {
		return rep, err
	}
	defer t.Stop()

	var idleWG sync.WaitGroup
	idleCtx, idleCancel := context.WithCancel(ctx)
	defer idleWG.Wait()
	defer idleCancel()
	if o.Idle > 0 {
		rep.Idle = o.Idle
		rep.IdleConnected = connectIdle(idleCtx, t, o, idleInstances, &idleWG)
	}
	dial := func(ctx context.Context, i int) (*worldClient, error) {
		return dialWorld(ctx, t, o.Transport, i, instances[i%len(instances)])
	}
	err = driveWorld(ctx, o, &rep, dial, t.Usage, sh.usage, t.AdminBase)
	return rep, err
}

// driveWorld connects o.Clients clients with dial, runs them through the
// warm-up and the measured phase, and fills rep from what they measured
// and from the server's (and shard's) usage; admin, if set, is where the
// server's CPU profile is fetched from.
func driveWorld(ctx context.Context, o WorldOptions, rep *WorldReport, dial func(context.Context, int) (*worldClient, error),
	serverUsage, shardUsage func() ProcUsage, admin string) error {
	// Connect; each client starts sending presence and reading (and
	// acking) as soon as it is in, so early clients are never slow readers
	// while later ones dial. Samples are taken only while measuring.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var measureStart atomic.Int64 // unix nanos; 0 = not measuring
	var measureEnd atomic.Int64
	seconds := int(math.Ceil(o.Duration.Seconds())) + 1
	interval := time.Duration(float64(time.Second) / o.Rate)
	clients := make([]*worldClient, o.Clients)
	errCounts := map[string]int{}
	var errMu sync.Mutex
	addErr := func(s string) {
		errMu.Lock()
		errCounts[s]++
		errMu.Unlock()
	}
	var connErrs atomic.Int64
	var run, dials sync.WaitGroup // run: per-client goroutines; dials: dial workers
	defer run.Wait()
	defer cancel()
	var next atomic.Int64
	for range o.DialWorkers {
		dials.Add(1)
		go func() {
			defer dials.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= o.Clients || ctx.Err() != nil {
					return
				}
				wc, err := dial(ctx, i)
				if err != nil {
					connErrs.Add(1)
					addErr("connect: " + err.Error())
					continue
				}
				wc.perSec = make([]int64, seconds)
				clients[i] = wc
				run.Add(2)
				go func() { // presence sender
					defer run.Done()
					worldPresence(rctx, wc.presenceSender(), i, o.Clients, interval)
				}()
				go func() { // receiver and acker
					defer run.Done()
					if wc.lean != nil {
						wc.receiveLean(rctx, &measureStart, &measureEnd)
						return
					}
					wc.receive(rctx, &measureStart, &measureEnd)
				}()
			}
		}()
	}
	connStart := time.Now()
	dials.Wait()
	rep.ConnectTime = time.Since(connStart)
	defer func() {
		for _, wc := range clients {
			if wc != nil {
				wc.close()
			}
		}
	}()
	rep.ConnectErrors = int(connErrs.Load())
	rep.Connected = o.Clients - rep.ConnectErrors
	if rep.Connected == 0 {
		cancel()
		run.Wait()
		rep.Errors = errList(errCounts)
		return errors.New("bench: no client connected")
	}
	select {
	case <-time.After(o.Warmup):
	case <-ctx.Done():
	}
	var prof sync.WaitGroup
	if o.Profile != "" && admin != "" {
		prof.Add(1)
		go func() {
			defer prof.Done()
			if err := fetchProfile(ctx, admin, o.Duration, o.Profile); err != nil {
				addErr("profile: " + err.Error())
			}
		}()
	}
	if o.ClientProfile != "" {
		f, err := os.Create(o.ClientProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	self := os.Getpid()
	e0, s0 := serverUsage(), shardUsage()
	c0, _ := ReadProc(self)
	start := time.Now()
	measureStart.Store(start.UnixNano())
	select {
	case <-time.After(o.Duration):
	case <-ctx.Done():
	}
	end := time.Now()
	measureEnd.Store(end.UnixNano())
	if o.ClientProfile != "" {
		pprof.StopCPUProfile()
	}
	e1, s1 := serverUsage(), shardUsage()
	c1, _ := ReadProc(self)
	cancel()
	run.Wait()
	prof.Wait()

	rep.Elapsed = end.Sub(start)
	rep.EdgeCPU, rep.ShardCPU, rep.ClientCPU = e1.CPU-e0.CPU, s1.CPU-s0.CPU, c1.CPU-c0.CPU
	rep.EdgeRSS, rep.ShardRSS = e1.RSSBytes, s1.RSSBytes
	var lat Latencies
	var sumKbps float64
	n := 0
	sec := rep.Elapsed.Seconds()
	for _, wc := range clients {
		if wc == nil {
			continue
		}
		n++
		for _, d := range wc.lat {
			lat.Add(d)
		}
		rep.Snapshots += wc.snaps
		rep.Deltas += wc.dels
		kbps := float64(wc.bytes*8) / 1000 / sec
		sumKbps += kbps
		rep.MaxKbps = max(rep.MaxKbps, kbps)
		if kbps > BudgetKbps {
			rep.OverBudget++
		}
		over := false
		// Whole seconds only: the last bucket is partial.
		for s := 0; s < len(wc.perSec) && float64(s+1) <= sec; s++ {
			w := float64(wc.perSec[s]*8) / 1000
			rep.MaxWindowKbps = max(rep.MaxWindowKbps, w)
			over = over || w > BudgetKbps
		}
		if over {
			rep.OverBudgetWin++
		}
		rep.MaxEntities = max(rep.MaxEntities, wc.maxEnt)
		rep.BaseMissing += wc.baseMissing
		rep.EdgeErrors += wc.edgeErrs
		if wc.c != nil {
			rep.InboxDrops += wc.c.Dropped()
		}
		if wc.ended {
			rep.Disconnects++
		}
		if wc.firstErr != "" {
			addErr(wc.firstErr)
		}
	}
	rep.Errors = errList(errCounts)
	rep.Latency = lat.Summary()
	rep.MeanKbps = sumKbps / float64(n)
	rep.PerClientHz = float64(rep.Snapshots+rep.Deltas) / float64(n) / sec
	return nil
}

// errList renders error counts, most frequent first, at most eight.
func errList(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return m[b] - m[a] })
	out := make([]string, 0, min(8, len(keys)))
	for _, k := range keys[:min(8, len(keys))] {
		out = append(out, fmt.Sprintf("%dx %s", m[k], k))
	}
	return out
}

func dialWorld(ctx context.Context, t *Target, transport string, i int, instance string) (*worldClient, error) {
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tok, err := t.Token(fmt.Sprintf("world-%d", i))
	if err != nil {
		return nil, err
	}
	if transport == "websocket" {
		c, err := dialLeanWS(dctx, t, &codec.ClientHello{AccessToken: tok, InstanceId: instance, AuthorityKind: codec.AuthorityKind_UE_CLIENT,
			ProtocolVersion: codec.ProtocolVersion, Capabilities: worldCapabilities})
		if err != nil {
			return nil, err
		}
		return &worldClient{lean: c, instance: instance}, nil
	}
	c, err := egbeclient.Dial(dctx, egbeclient.Options{Kind: transport, HTTPBase: t.HTTPBase, H3Base: t.H3Base, CertHash: t.CertHash, Inbox: 256,
		LocalIP: clientSource(transport, i)})
	if err != nil {
		return nil, err
	}
	if _, err := c.Hello(dctx, &codec.ClientHello{AccessToken: tok, InstanceId: instance, AuthorityKind: codec.AuthorityKind_UE_CLIENT,
		ProtocolVersion: codec.ProtocolVersion, Capabilities: worldCapabilities}); err != nil {
		c.Close()
		return nil, err
	}
	return &worldClient{c: c, instance: instance}, nil
}

// presenceSender sends one presence packet (seq, x, y, client time).
type presenceSender func(seq uint64, x, y int32, clientMs uint64) error

// presenceSender is how wc sends presence: on the unreliable lane where
// it has one.
func (wc *worldClient) presenceSender() presenceSender {
	if wc.lean != nil {
		return wc.lean.sendPresence
	}
	return egbePresence(wc.c)
}

// egbePresence sends presence through an egbeclient connection.
func egbePresence(c *egbeclient.Conn) presenceSender {
	var buf []byte
	return func(seq uint64, x, y int32, clientMs uint64) error {
		buf = appendPresenceEnvelope(buf[:0], seq, x, y, clientMs)
		return c.SendRaw(buf, true)
	}
}

func (wc *worldClient) close() {
	if wc.lean != nil {
		wc.lean.close()
		return
	}
	wc.c.Close()
}

// worldPresence sends presence at one per interval, walking a circle of
// 20-80 m radius around the plane's centre; phases are spread over one
// interval so clients do not send in lockstep.
func worldPresence(ctx context.Context, send presenceSender, i, n int, interval time.Duration) {
	phase := time.Duration(int64(interval) * int64(i) / int64(max(1, n)))
	timer := time.NewTimer(phase)
	defer timer.Stop()
	radius := 20_000 + float64(i%7)*10_000 // mm
	angle := float64(i) * 2 * math.Pi / float64(max(1, n))
	step := 1.5 * interval.Seconds() * 1000 / radius // 1.5 m/s walking speed
	var seq uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		seq++
		angle += step
		if err := send(seq, int32(radius*math.Cos(angle)), int32(radius*math.Sin(angle)), uint64(time.Now().UnixMilli())); err != nil {
			return
		}
		timer.Reset(interval)
	}
}

// receive applies snapshots and deltas, acks each applied one, and records
// latency and bytes while the measured phase runs.
func (wc *worldClient) receive(ctx context.Context, measureStart, measureEnd *atomic.Int64) {
	var held [64]heldState // ring of applied states by sequence
	var last uint64
	ack := &codec.ClientEnvelope{}
	ackMsg := &codec.Ack{}
	ack.Msg = &codec.ClientEnvelope_Ack{Ack: ackMsg}
	find := func(seq uint64) *heldState {
		for k := range held {
			if held[k].seq == seq && seq != 0 {
				return &held[k]
			}
		}
		return nil
	}
	for {
		env, err := wc.c.Recv(ctx)
		if err != nil {
			if ctx.Err() == nil {
				wc.ended = true
				if wc.firstErr == "" {
					wc.firstErr = "recv: " + err.Error()
				}
			}
			return
		}
		now := time.Now()
		ms, me := measureStart.Load(), measureEnd.Load()
		measuring := ms != 0 && (me == 0 || now.UnixNano() <= me)
		if measuring {
			size := int64(proto.Size(env))
			wc.bytes += size
			if s := int((now.UnixNano() - ms) / int64(time.Second)); s >= 0 && s < len(wc.perSec) {
				wc.perSec[s] += size
			}
		}
		var seq, stMs uint64
		var ent []*codec.EntityState
		switch m := env.Msg.(type) {
		case *codec.ServerEnvelope_Snapshot:
			seq, stMs, ent = m.Snapshot.GetSequence(), m.Snapshot.GetServerTimeMs(), m.Snapshot.GetEntities()
		case *codec.ServerEnvelope_Delta:
			d := m.Delta
			seq, stMs = d.GetSequence(), d.GetServerTimeMs()
			var base []*codec.EntityState
			if b := d.GetBaseSequence(); b != 0 {
				h := find(b)
				if h == nil {
					if measuring {
						wc.baseMissing++
					}
					continue
				}
				base = h.ent
			}
			ent = applyDelta(base, d)
		case *codec.ServerEnvelope_Error:
			wc.edgeErrs++
			if wc.firstErr == "" {
				wc.firstErr = "edge error: " + m.Error.GetCode() + " " + m.Error.GetMessage()
			}
			continue
		default:
			continue
		}
		if seq > last {
			last = seq
			held[seq%uint64(len(held))] = heldState{seq: seq, ent: ent}
			ackMsg.SnapshotSequence = seq
			if err := wc.c.Send(ack, false); err != nil {
				continue
			}
		}
		wc.maxEnt = max(wc.maxEnt, len(ent))
		if !measuring {
			continue
		}
		wc.lat = append(wc.lat, now.Sub(time.UnixMilli(int64(stMs))))
		if _, ok := env.Msg.(*codec.ServerEnvelope_Snapshot); ok {
			wc.snaps++
		} else {
			wc.dels++
		}
	}
}

// applyDelta returns base with d's upserts and removals applied (base is
// not modified).
func applyDelta(base []*codec.EntityState, d *codec.AgentStateDelta) []*codec.EntityState {
	out := make([]*codec.EntityState, 0, len(base)+len(d.GetUpserts()))
	removed := d.GetRemovedIds()
	upserts := d.GetUpserts()
	for _, e := range base {
		gone := false
		for _, id := range removed {
			if id == e.GetId() {
				gone = true
				break
			}
		}
		for _, u := range upserts {
			if u.GetId() == e.GetId() {
				gone = true // replaced below
				break
			}
		}
		if !gone {
			out = append(out, e)
		}
	}
	return append(out, upserts...)
}

// idleShardName names the idle sessions' shard (an empty world).
const idleShardName = "idle-shard"

// connectIdle connects o.Idle sessions that say hello and then only read
// (discarding), spread over instances; it returns how many connected.
// Their readers run under wg until ctx is done.
func connectIdle(ctx context.Context, t *Target, o WorldOptions, instances []string, wg *sync.WaitGroup) int {
	var next, ok atomic.Int64
	var dials sync.WaitGroup
	for range o.DialWorkers {
		dials.Add(1)
		go func() {
			defer dials.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= o.Idle || ctx.Err() != nil {
					return
				}
				dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				tok, err := t.Token(fmt.Sprintf("idle-%d", i))
				if err != nil {
					cancel()
					continue
				}
				c, err := egbeclient.Dial(dctx, egbeclient.Options{Kind: o.Transport, HTTPBase: t.HTTPBase, H3Base: t.H3Base, CertHash: t.CertHash, Inbox: 16,
					LocalIP: clientSource(o.Transport, o.Clients+i)})
				if err != nil {
					cancel()
					continue
				}
				_, err = c.Hello(dctx, &codec.ClientHello{AccessToken: tok, InstanceId: instances[i%len(instances)], AuthorityKind: codec.AuthorityKind_UE_CLIENT,
					ProtocolVersion: codec.ProtocolVersion, Capabilities: worldCapabilities})
				cancel()
				if err != nil {
					c.Close()
					continue
				}
				ok.Add(1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.Close()
					for {
						if _, err := c.Recv(ctx); err != nil {
							return
						}
					}
				}()
			}
		}()
	}
	dials.Wait()
	return int(ok.Load())
}

// fetchProfile writes the edge's CPU profile over d to path.
func fetchProfile(ctx context.Context, adminBase string, d time.Duration, path string) error {
	secs := max(1, int(d.Seconds()))
	return fetchPprof(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", adminBase, secs), path)
}

// fetchPprof writes the pprof document at url to path.
func fetchPprof(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("pprof: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WorldCommand is `egbe-bench world`.
func WorldCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("world", flag.ContinueOnError)
	var o WorldOptions
	fs.StringVar(&o.EdgeBin, "edge-bin", "", "egbe-edge binary to start on free loopback ports")
	fs.StringVar(&o.ShardBin, "shard-bin", "", "egbe-shard binary to start on a free loopback port")
	fs.StringVar(&o.EdgeTaskset, "edge-taskset", "", "pin the started edge to these CPUs (taskset -c LIST)")
	fs.StringVar(&o.Transport, "transport", "websocket", "webtransport | webrtc | websocket")
	fs.IntVar(&o.Clients, "clients", 200, "clients, spread round-robin over the instances")
	fs.IntVar(&o.Instances, "instances", 10, "instances on the shard")
	fs.IntVar(&o.Agents, "agents", 500, "simulated agents per instance")
	fs.Float64Var(&o.Rate, "rate", 20, "presence Hz per client")
	fs.DurationVar(&o.Warmup, "warmup", 2*time.Second, "connected but not measured")
	fs.DurationVar(&o.Duration, "duration", 15*time.Second, "measured phase")
	fs.IntVar(&o.DialWorkers, "dial-workers", 32, "concurrent dials")
	fs.IntVar(&o.Idle, "idle", 0, "idle sessions (hello only, empty world on a second shard) connected before the clients")
	fs.StringVar(&o.Profile, "profile", "", "write the edge's CPU profile of the measured phase here")
	fs.StringVar(&o.ClientProfile, "client-profile", "", "write the load client's CPU profile of the measured phase here")
	baseline := fs.Bool("baseline", false, "also drive a bare WebSocket relay (one snapshot per tick to every client, presence and acks read and dropped) with the same clients, pinned like the edge")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.EdgeBin == "" || o.ShardBin == "" {
		return errors.New("world: give --edge-bin and --shard-bin")
	}
	rep, err := RunWorld(ctx, o)
	fmt.Print(rep)
	if err != nil || !*baseline {
		return err
	}
	if o.Transport != "" && o.Transport != "websocket" {
		return errors.New("world: --baseline is a WebSocket relay")
	}
	o.Profile, o.ClientProfile = "", ""
	base, err := RunWorldBaseline(ctx, o)
	fmt.Print(base)
	if err == nil && base.CPUPerUpdate() > 0 {
		fmt.Printf("ratio edge/bare cpu per delivered update: %.2fx\n", float64(rep.CPUPerUpdate())/float64(base.CPUPerUpdate()))
	}
	return err
}
