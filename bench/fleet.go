package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/egbeclient"
	"github.com/oshun/egbe-edge/shard/shardsim"
)

// ---------------------------------------------------------------- fleet

// FleetOptions say how StartFleet runs a fleet: edge processes sharing one
// Redis, one JWT secret and reference shards run in this process (so a
// scenario can ask a shard which actions it applied).
type FleetOptions struct {
	EdgeBin string
	Edges   int // edge processes (default 1)
	// RedisURL is the shared state. Empty starts a redis-server without
	// persistence on a free loopback port. (AddEdge can add an edge on
	// memory state beside the fleet.)
	RedisURL  string
	Shards    int      // reference shards (default 2, at most len(Instances))
	Instances []string // spread round-robin over the shards (default fleet-0..fleet-3)
	Agents    int      // simulated agents per instance (default 50)
	TickHz    int      // shard tick rate (default 20)
	Extra     []string // more edge flags
	Taskset   string   // pin the edges to these CPUs (taskset -c LIST)
}

// Fleet is a running fleet. Stop ends it.
type Fleet struct {
	Edges     []*Target
	Shards    []*shardsim.Server
	Instances []string
	RedisURL  string
	RedisPID  int    // 0 unless StartFleet started redis-server
	Secret    string // EGBE_JWT_SECRET shared by every edge

	opts      FleetOptions // immutable after StartFleet
	args      []string     // edge flags without --redis-url; immutable after StartFleet
	policy    string       // policy file, removed by Stop
	stopRedis func()
	stopOnce  sync.Once
}

// StartFleet starts the shards, Redis (unless given) and the
// edges, and waits until every edge is ready.
func StartFleet(ctx context.Context, o FleetOptions) (_ *Fleet, err error) {
	if o.Edges <= 0 {
		o.Edges = 1
	}
	if len(o.Instances) == 0 {
		o.Instances = []string{"fleet-0", "fleet-1", "fleet-2", "fleet-3"}
	}
	if o.Shards <= 0 {
		o.Shards = 2
	}
	o.Shards = min(o.Shards, len(o.Instances))
	if o.Agents <= 0 {
		o.Agents = 50
	}
	if o.TickHz <= 0 {
		o.TickHz = 20
	}
	if _, err := RaiseNoFile(); err != nil {
		return nil, err
	}
	f := &Fleet{Instances: slices.Clone(o.Instances), opts: o}
	defer func() {
		if err != nil {
			f.Stop()
		}
	}()
	var secret [24]byte
	_, _ = rand.Read(secret[:])
	f.Secret = hex.EncodeToString(secret[:])
	f.RedisURL = o.RedisURL
	if f.RedisURL == "" {
		url, pid, stop, err := StartRedis(ctx)
		if err != nil {
			return nil, err
		}
		f.RedisURL, f.RedisPID, f.stopRedis = url, pid, stop
	}
	f.args = []string{"--dev-shard=false"}
	for s := range o.Shards {
		var insts []string
		for i := s; i < len(o.Instances); i += o.Shards {
			insts = append(insts, o.Instances[i])
		}
		id := fmt.Sprintf("s%d", s+1)
		sim, err := shardsim.Start(context.WithoutCancel(ctx), shardsim.Config{Listen: "127.0.0.1:0", ShardID: id,
			Instances: insts, Agents: o.Agents, TickHz: o.TickHz})
		if err != nil {
			return nil, err
		}
		f.Shards = append(f.Shards, sim)
		f.args = append(f.args, "--shard", id+"="+sim.Addr())
		for _, in := range insts {
			f.args = append(f.args, "--instance", in+"="+id)
		}
	}
	pf, err := os.CreateTemp("", "egbe-fleet-policy-*.json")
	if err != nil {
		return nil, err
	}
	f.policy = pf.Name()
	_, werr := pf.Write(loadtestPolicy)
	if cerr := pf.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, werr
	}
	f.args = append(f.args, "--policy", f.policy)
	for range o.Edges {
		if _, err := f.AddEdge(ctx, f.RedisURL); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// AddEdge starts one more edge of the fleet on redisURL ("" = in-memory
// state) and appends it to Edges.
func (f *Fleet) AddEdge(ctx context.Context, redisURL string) (*Target, error) {
	args := slices.Clone(f.args)
	if redisURL != "" {
		args = append(args, "--redis-url", redisURL)
	}
	t, err := StartEdgeWith(ctx, EdgeOptions{Bin: f.opts.EdgeBin, Extra: append(args, f.opts.Extra...),
		Taskset: f.opts.Taskset, Env: []string{"EGBE_JWT_SECRET=" + f.Secret}})
	if err != nil {
		return nil, err
	}
	f.Edges = append(f.Edges, t)
	return t, nil
}

// ShardByID returns the reference shard named id, or nil.
func (f *Fleet) ShardByID(id string) *shardsim.Server {
	for _, s := range f.Shards {
		if s.ID() == id {
			return s
		}
	}
	return nil
}

// RedisCPU is redis-server's CPU time (zero unless the fleet started it).
func (f *Fleet) RedisCPU() time.Duration {
	if f.RedisPID == 0 {
		return 0
	}
	u, _ := ReadProc(f.RedisPID)
	return u.CPU
}

// Stop ends the edges (together), the shards and Redis. Safe to call
// more than once.
func (f *Fleet) Stop() {
	f.stopOnce.Do(func() {
		var wg sync.WaitGroup
		for _, t := range f.Edges {
			wg.Add(1)
			go func() { defer wg.Done(); t.Stop() }()
		}
		wg.Wait()
		for _, s := range f.Shards {
			_ = s.Close()
		}
		if f.stopRedis != nil {
			f.stopRedis()
		}
		if f.policy != "" {
			_ = os.Remove(f.policy)
		}
	})
}

func (f *Fleet) String() string {
	state := f.RedisURL
	if u, err := url.Parse(f.RedisURL); err == nil {
		state = u.Redacted()
	}
	pids := make([]string, len(f.Edges))
	for i, t := range f.Edges {
		pids[i] = strconv.Itoa(t.PID)
	}
	return fmt.Sprintf("fleet: %d edges (pids %s) on redis %s; %d reference shards, instances %s, %d agents each @%d Hz",
		len(f.Edges), strings.Join(pids, ","), state, len(f.Shards), strings.Join(f.Instances, ","), f.opts.Agents, f.opts.TickHz)
}

// RunEchoFleet is RunEcho over several edges: session i opens on
// edges[i % len(edges)]. CPU and RSS are the edges' sums.
func RunEchoFleet(ctx context.Context, edges []*Target, opts EchoOptions) (EchoReport, error) {
	if len(edges) == 0 {
		return EchoReport{}, errors.New("bench: no edges")
	}
	if len(edges) == 1 {
		return RunEcho(ctx, edges[0], opts)
	}
	instances := strings.Split(opts.Instance, ",")
	usage := func() ProcUsage {
		var u ProcUsage
		for _, t := range edges {
			x := t.Usage()
			u.CPU += x.CPU
			u.RSSBytes += x.RSSBytes
		}
		return u
	}
	dial := edgeEchoDial(func(i int) *Target { return edges[i%len(edges)] }, instances, opts)
	return runEcho(ctx, fmt.Sprintf("edge x%d", len(edges)), usage, dial, opts, "")
}

// ---------------------------------------------------------------- shared helpers

var addrRE = regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+|\[[0-9a-f:]+\]):\d+`)

// errKey renders err for counting: addresses and ports vary per
// connection and would split one cause into many.
func errKey(err error) string {
	s := addrRE.ReplaceAllString(err.Error(), "ADDR")
	if len(s) > 160 {
		s = s[:160] + "..."
	}
	return s
}

// metricSum scrapes t's /metrics and sums every sample of the metric
// named name (any labels).
func metricSum(t *Target, name string) (float64, error) {
	resp, err := http.Get(t.AdminBase + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("bench: /metrics: HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var sum float64
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		v, err := strconv.ParseFloat(rest[i+1:], 64)
		if err == nil {
			sum += v
		}
	}
	return sum, sc.Err()
}

// waitShardSessions polls the fleet's shards (in this process, so the
// edges' own work is not disturbed by scrapes: some of their metrics
// read Redis) until they hold want live sessions in all.
func (f *Fleet) waitShardSessions(ctx context.Context, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n := 0
		for _, s := range f.Shards {
			n += s.Sessions()
		}
		if n == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: shards still hold %d sessions (want %d) after %v", n, want, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// machineBusy is the CPU time every core of this machine has spent busy
// (user, nice, system, irq, softirq, steal) since boot, from /proc/stat:
// with the processes' own CPU it shows how much went to other work.
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

func cores(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return cpu.Seconds() / wall.Seconds()
}

// ---------------------------------------------------------------- failover

// FailoverOptions shape the failover scenario: a fleet of Edges edges on
// one Redis; Sessions sessions on edge 0 (the victim) and Bystanders on
// the others, each sending presence at Rate Hz, acking world state and
// having Actions actions acknowledged; then the victim is SIGKILLed and
// every victim session resumes on a surviving edge with its resume token.
type FailoverOptions struct {
	EdgeBin     string
	EdgeTaskset string
	Edges       int    // at least 2 (default 3)
	RedisURL    string // "" starts redis-server
	Transport   string // websocket | webtransport | webrtc
	Sessions    int    // on the victim
	Bystanders  int    // on the survivors, round-robin; they must stay up
	Rate        float64
	Actions     int // acknowledged before the kill, and as many again after the resume (default 2)
	Instances   int // spread over two reference shards (default 10)
	Agents      int // per instance (default 50)
	TickHz      int // shard tick (default 20)
	DialWorkers int
	Warmup      time.Duration // all connected, before the kill (default 3 s)
	Deadline    time.Duration // a session not resumed this long after the kill has failed (default 30 s)
	// ResumeJitter delays each client's first resume attempt by a random
	// part of it (default 0: every client reconnects at once).
	ResumeJitter time.Duration
	// Silence, when set, makes a client treat that long without any
	// message from its edge as the edge's death (world state arrives at
	// TickHz). Over QUIC a dead peer sends no reset, so without it a
	// WebTransport or WebRTC client notices only at its idle timeout.
	Silence time.Duration
}

// FailoverReport is what the failover scenario measures.
type FailoverReport struct {
	Opts                     FailoverOptions
	Fleet                    string
	Connected, ConnectErrors int
	ConnectTime              time.Duration
	PreDisconnects           int // victim sessions that ended before the kill

	Resumed, Failed int
	Noticed         Quantiles // kill -> the client saw its connection end
	Resume          Quantiles // kill -> resumed ServerHello
	LastResumed     time.Duration
	Dial, Hello     Quantiles // the successful attempt
	Attempts        int
	ByHalfSecond    []int // resumes per 0.5 s after the kill

	SameSession, SameShard, ResumedFlag   int
	ActionsExact, ActionsLost, ActionsDup int // sessions
	AppliedUnacked                        int // sessions whose shard applied actions the client never saw acknowledged
	AckedAfter                            int // resumed sessions whose post-resume actions were acknowledged
	BystandersUp                          int
	EdgeErrors                            int64 // Error envelopes received

	PreWindow                            time.Duration
	PreVictimCPU, PreClientCPU, PreRedis time.Duration
	PreSurvivorCPU                       []time.Duration
	PreMachine, Machine                  time.Duration // every process on the machine
	Window                               time.Duration // kill -> the last session resumed or given up
	SurvivorCPU                          []time.Duration
	SurvivorRSS                          []int64
	RedisCPU, ClientCPU                  time.Duration
	RedisKnown                           bool

	HowNoticed, Retries, Failures []string
}

func (r FailoverReport) String() string {
	var b strings.Builder
	o := r.Opts
	fmt.Fprintf(&b, "failover/%s edges=%d sessions=%d (on the victim) bystanders=%d presence=%.0f Hz actions=%d+%d resume-jitter=%v deadline=%v\n",
		o.Transport, o.Edges, o.Sessions, o.Bystanders, o.Rate, o.Actions, o.Actions, o.ResumeJitter, o.Deadline)
	fmt.Fprintf(&b, "  %s\n", r.Fleet)
	fmt.Fprintf(&b, "  connected=%d connect_errors=%d (connect phase %v) ended_before_kill=%d\n",
		r.Connected, r.ConnectErrors, r.ConnectTime.Round(time.Millisecond), r.PreDisconnects)
	pre := func(d time.Duration) string { return fmt.Sprintf("%.2f", cores(d, r.PreWindow)) }
	sv := make([]string, len(r.PreSurvivorCPU))
	for i, c := range r.PreSurvivorCPU {
		sv[i] = pre(c)
	}
	fmt.Fprintf(&b, "  before the kill (%v): victim edge %s cores, survivors %s cores, redis %s, load client+shards %s cores; machine busy %s of %d cores\n",
		r.PreWindow.Round(time.Millisecond), pre(r.PreVictimCPU), strings.Join(sv, "/"), r.redis(r.PreRedis, r.PreWindow), pre(r.PreClientCPU), pre(r.PreMachine), runtime.NumCPU())
	fmt.Fprintf(&b, "  resumed=%d failed=%d of %d\n", r.Resumed, r.Failed, r.Connected-r.Opts.Bystanders)
	fmt.Fprintf(&b, "  noticed (kill -> connection ended) %s\n", r.Noticed)
	fmt.Fprintf(&b, "  resumed (kill -> ServerHello)      %s\n", r.Resume)
	fmt.Fprintf(&b, "  last client resumed %v after the kill\n", r.LastResumed.Round(time.Millisecond))
	fmt.Fprintf(&b, "  successful attempt: dial %s; hello %s\n", r.Dial, r.Hello)
	fmt.Fprintf(&b, "  attempts=%d (retries %d)\n", r.Attempts, r.Attempts-r.Resumed)
	if len(r.ByHalfSecond) > 0 {
		parts := make([]string, len(r.ByHalfSecond))
		for i, n := range r.ByHalfSecond {
			parts[i] = fmt.Sprintf("%.1fs:%d", float64(i+1)/2, n)
		}
		fmt.Fprintf(&b, "  resumed per 0.5 s after the kill (by end of): %s\n", strings.Join(parts, " "))
	}
	fmt.Fprintf(&b, "  checks: same session %d/%d, same shard %d/%d, resumed flag %d/%d, post-resume actions acked %d/%d\n",
		r.SameSession, r.Resumed, r.SameShard, r.Resumed, r.ResumedFlag, r.Resumed, r.AckedAfter, r.Resumed)
	fmt.Fprintf(&b, "  actions: applied exactly as acknowledged %d/%d sessions; acknowledged but lost %d, duplicated %d; applied but the ack never arrived %d\n",
		r.ActionsExact, r.Connected, r.ActionsLost, r.ActionsDup, r.AppliedUnacked)
	fmt.Fprintf(&b, "  bystanders still up %d/%d; Error envelopes received %d\n", r.BystandersUp, r.Opts.Bystanders, r.EdgeErrors)
	fmt.Fprintf(&b, "  resume window (kill -> last resumed, %v):", r.Window.Round(time.Millisecond))
	for i := range r.SurvivorCPU {
		fmt.Fprintf(&b, " edge%d cpu=%v (%.2f cores) rss=%.1f MiB;", i+1, r.SurvivorCPU[i].Round(10*time.Millisecond),
			cores(r.SurvivorCPU[i], r.Window), mib(r.SurvivorRSS[i]))
	}
	fmt.Fprintf(&b, " redis %s; load client+shards %.2f cores; machine busy %.2f of %d cores\n", r.redis(r.RedisCPU, r.Window),
		cores(r.ClientCPU, r.Window), cores(r.Machine, r.Window), runtime.NumCPU())
	for _, s := range r.HowNoticed {
		fmt.Fprintf(&b, "  noticed: %s\n", s)
	}
	for _, s := range r.Retries {
		fmt.Fprintf(&b, "  retry: %s\n", s)
	}
	for _, s := range r.Failures {
		fmt.Fprintf(&b, "  failed: %s\n", s)
	}
	return b.String()
}

func (r FailoverReport) redis(cpu, wall time.Duration) string {
	if !r.RedisKnown {
		return "n/a"
	}
	return fmt.Sprintf("%.2f cores", cores(cpu, wall))
}

// foClient is one failover session.
type foClient struct {
	i         int
	instance  string
	token     string
	bystander bool
	first     *codec.ServerHello // immutable after connect

	acked    atomic.Uint64 // highest action ack seen on any connection
	lastRecv atomic.Int64  // Unix ns of the latest message on any connection
	ackSig   chan struct{} // cap 1: an ack arrived
	edgeErrs atomic.Int64

	// Owned by the connect worker, then by life until it returns.
	conn      *egbeclient.Conn
	noticed   time.Duration
	resumedAt time.Duration
	dial      time.Duration
	hello     time.Duration
	attempts  int
	second    *codec.ServerHello
	how       string // how the connection's end showed
	failure   string
	retries   []string
	ackedPost bool
}

// foRun is one failover run's shared state.
type foRun struct {
	o         FailoverOptions
	survivors []*Target
	interval  time.Duration
	rctx      context.Context // conn goroutines run until it ends
	conns     sync.WaitGroup  // per-connection receivers and presence senders
	killAt    time.Time       // set before the lives start
	// settled counts lives whose resume succeeded or gave up; the last
	// one closes allSettled (the end of the resume window).
	lives      int64
	settledN   atomic.Int64
	allSettled chan struct{}
}

// settle marks one life's resume attempt finished.
func (r *foRun) settle() {
	if r.settledN.Add(1) == r.lives {
		close(r.allSettled)
	}
}

func (r *foRun) hello(fc *foClient) *codec.ClientHello {
	return &codec.ClientHello{AccessToken: fc.token, InstanceId: fc.instance, AuthorityKind: codec.AuthorityKind_UE_CLIENT,
		ProtocolVersion: codec.ProtocolVersion, Capabilities: worldCapabilities}
}

// attach starts c's receiver and presence sender.
func (r *foRun) attach(fc *foClient, c *egbeclient.Conn) {
	r.conns.Add(2)
	go func() { defer r.conns.Done(); fc.receive(r.rctx, c) }()
	go func() {
		defer r.conns.Done()
		worldPresence(r.rctx, egbePresence(c), fc.i, r.o.Sessions+r.o.Bystanders, r.interval)
	}()
}

// receive reads everything c delivers: it records action acks and acks
// each newer world state (so the edge keeps sending deltas).
func (fc *foClient) receive(ctx context.Context, c *egbeclient.Conn) {
	var last uint64
	ackMsg := &codec.Ack{}
	ack := &codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ack{Ack: ackMsg}}
	for {
		env, err := c.Recv(ctx)
		if err != nil {
			return
		}
		fc.lastRecv.Store(time.Now().UnixNano())
		var seq uint64
		switch m := env.Msg.(type) {
		case *codec.ServerEnvelope_ActionAck:
			id := m.ActionAck.GetActionId()
			for {
				old := fc.acked.Load()
				if id <= old || fc.acked.CompareAndSwap(old, id) {
					break
				}
			}
			select {
			case fc.ackSig <- struct{}{}:
			default:
			}
		case *codec.ServerEnvelope_Snapshot:
			seq = m.Snapshot.GetSequence()
		case *codec.ServerEnvelope_Delta:
			seq = m.Delta.GetSequence()
		case *codec.ServerEnvelope_Error:
			fc.edgeErrs.Add(1)
		}
		if seq > last {
			last = seq
			ackMsg.SnapshotSequence = seq
			_ = c.Send(ack, false)
		}
	}
}

func sendActionRange(c *egbeclient.Conn, from, to uint64) error {
	var batch codec.ActionBatch
	for id := from; id <= to; id++ {
		batch.Actions = append(batch.Actions, &codec.Action{ActionId: id, Kind: "wave"})
	}
	return c.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Actions{Actions: &batch}}, false)
}

// waitAck waits until an ack for id (or later) arrived.
func (fc *foClient) waitAck(ctx context.Context, c *egbeclient.Conn, id uint64, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for fc.acked.Load() < id {
		select {
		case <-fc.ackSig:
		case <-c.Done():
			if fc.acked.Load() >= id {
				return nil
			}
			return fmt.Errorf("connection ended before ack %d: %w", id, c.Err())
		case <-t.C:
			return fmt.Errorf("no ack %d in %v", id, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// permanentResume reports a refusal that retrying cannot fix.
func permanentResume(err error) bool {
	var he *egbeclient.HelloError
	if !errors.As(err, &he) {
		return false
	}
	switch codec.Code(he.Err.GetCode()) {
	case codec.CodeResumeInvalid, codec.CodeResumeExpired, codec.CodeTokenInvalid, codec.CodeTokenExpired, codec.CodeTokenAudience:
		return true
	}
	return false
}

// life waits for the victim to drop fc, then resumes it on a survivor
// (round-robin from fc.i, moving on after each failed attempt) with
// jittered exponential backoff until the deadline, and checks that the
// resumed session takes new actions.
func (r *foRun) life(ctx context.Context, fc *foClient) {
	settled := false
	defer func() {
		if !settled {
			r.settle()
		}
	}()
	var silent <-chan time.Time
	if r.o.Silence > 0 {
		t := time.NewTicker(r.o.Silence / 10)
		defer t.Stop()
		silent = t.C
	}
	fc.how = ""
wait:
	for {
		select {
		case <-fc.conn.Done():
			break wait
		case <-silent:
			if time.Since(time.Unix(0, fc.lastRecv.Load())) > r.o.Silence {
				fc.how = fmt.Sprintf("silent for %v", r.o.Silence)
				break wait
			}
		case <-ctx.Done():
			fc.failure = "cancelled before the connection ended"
			return
		}
	}
	fc.noticed = time.Since(r.killAt)
	if fc.how == "" {
		fc.how = errKey(fc.conn.Err())
	}
	_ = fc.conn.Close()
	if r.o.ResumeJitter > 0 {
		sleepCtx(ctx, time.Duration(mrand.Int64N(int64(r.o.ResumeJitter))))
	}
	deadline := r.killAt.Add(r.o.Deadline)
	h := r.hello(fc)
	h.ResumeToken = fc.first.GetResumeToken()
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		to := r.survivors[(fc.i+attempt)%len(r.survivors)]
		until := time.Now().Add(10 * time.Second)
		if deadline.Before(until) {
			until = deadline
		}
		actx, cancel := context.WithDeadline(ctx, until)
		t1 := time.Now()
		c, err := egbeclient.Dial(actx, egbeclient.Options{Kind: r.o.Transport, HTTPBase: to.HTTPBase, H3Base: to.H3Base, CertHash: to.CertHash, Inbox: 256,
			LocalIP: clientSource(r.o.Transport, fc.i)})
		var got *codec.ServerHello
		var dial time.Duration
		if err == nil {
			dial = time.Since(t1)
			got, err = c.Hello(actx, h)
			if err != nil {
				_ = c.Close()
			}
		}
		cancel()
		fc.attempts++
		if err == nil {
			fc.resumedAt = time.Since(r.killAt)
			fc.dial, fc.hello = dial, time.Since(t1)-dial
			fc.conn, fc.second = c, got
			break
		}
		why := errKey(err)
		if permanentResume(err) || ctx.Err() != nil || time.Now().Add(backoff).After(deadline) {
			fc.failure = fmt.Sprintf("after %d attempts: %s", fc.attempts, why)
			return
		}
		fc.retries = append(fc.retries, why)
		sleepCtx(ctx, backoff/2+time.Duration(mrand.Int64N(int64(backoff))))
		backoff = min(2*backoff, time.Second)
	}
	settled = true
	r.settle()
	r.attach(fc, fc.conn)
	a := uint64(r.o.Actions)
	if err := sendActionRange(fc.conn, a+1, 2*a); err != nil {
		fc.failure = "after the resume: send actions: " + errKey(err)
		return
	}
	if err := fc.waitAck(ctx, fc.conn, 2*a, 15*time.Second); err != nil {
		fc.failure = "after the resume: " + errKey(err)
		return
	}
	fc.ackedPost = true
}

// RunFailover runs the failover scenario.
func RunFailover(ctx context.Context, o FailoverOptions) (FailoverReport, error) {
	if o.Edges <= 0 {
		o.Edges = 3
	}
	if o.Transport == "" {
		o.Transport = "websocket"
	}
	if o.Rate <= 0 {
		o.Rate = 5
	}
	if o.Actions <= 0 {
		o.Actions = 2
	}
	if o.Instances <= 0 {
		o.Instances = 10
	}
	if o.DialWorkers <= 0 {
		o.DialWorkers = 32
	}
	if o.Warmup <= 0 {
		o.Warmup = 3 * time.Second
	}
	if o.Deadline <= 0 {
		o.Deadline = 30 * time.Second
	}
	rep := FailoverReport{Opts: o}
	if o.Edges < 2 || o.Sessions <= 0 {
		return rep, errors.New("bench: failover needs at least 2 edges and 1 session")
	}
	limit, err := RaiseNoFile()
	if err != nil {
		return rep, err
	}
	if need := uint64(3*(o.Sessions+o.Bystanders) + 512); limit < need {
		return rep, fmt.Errorf("bench: RLIMIT_NOFILE %d is below the %d this run needs (raise the hard limit: ulimit -Hn)", limit, need)
	}
	instances := make([]string, o.Instances)
	for i := range instances {
		instances[i] = fmt.Sprintf("fo-%d", i)
	}
	fleet, err := StartFleet(ctx, FleetOptions{EdgeBin: o.EdgeBin, Edges: o.Edges, RedisURL: o.RedisURL, Shards: 2,
		Instances: instances, Agents: o.Agents, TickHz: o.TickHz, Taskset: o.EdgeTaskset})
	if err != nil {
		return rep, err
	}
	defer fleet.Stop()
	rep.Fleet = fleet.String()
	rep.RedisKnown = fleet.RedisPID != 0
	victim := fleet.Edges[0]
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	run := &foRun{o: o, survivors: fleet.Edges[1:], interval: time.Duration(float64(time.Second) / o.Rate), rctx: rctx}
	defer run.conns.Wait()
	defer cancel()

	// Connect: victims first, then bystanders.
	total := o.Sessions + o.Bystanders
	clients := make([]*foClient, total)
	connErrs := map[string]int{}
	var errMu sync.Mutex
	var next atomic.Int64
	var dials sync.WaitGroup
	connStart := time.Now()
	for range o.DialWorkers {
		dials.Add(1)
		go func() {
			defer dials.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= total || ctx.Err() != nil {
					return
				}
				fc := &foClient{i: i, instance: instances[i%len(instances)], bystander: i >= o.Sessions,
					ackSig: make(chan struct{}, 1)}
				to := victim
				if fc.bystander {
					to = run.survivors[i%len(run.survivors)]
				}
				if err := run.connect(ctx, fc, to); err != nil {
					errMu.Lock()
					connErrs["connect: "+errKey(err)]++
					errMu.Unlock()
					continue
				}
				clients[i] = fc
			}
		}()
	}
	dials.Wait()
	rep.ConnectTime = time.Since(connStart)
	for _, fc := range clients {
		if fc != nil {
			rep.Connected++
		}
	}
	rep.ConnectErrors = total - rep.Connected
	defer func() {
		for _, fc := range clients {
			if fc != nil && fc.conn != nil {
				_ = fc.conn.Close()
			}
		}
	}()
	if rep.Connected == 0 {
		rep.Failures = errList(connErrs)
		return rep, errors.New("bench: no session connected")
	}

	// Steady state before the kill.
	self := os.Getpid()
	usages := func() ([]ProcUsage, ProcUsage, time.Duration, time.Duration) {
		us := make([]ProcUsage, len(fleet.Edges))
		for i, t := range fleet.Edges {
			us[i] = t.Usage()
		}
		c, _ := ReadProc(self)
		return us, c, fleet.RedisCPU(), machineBusy()
	}
	e0, c0, r0, m0 := usages()
	t0 := time.Now()
	sleepCtx(ctx, o.Warmup)
	e1, c1, r1, m1 := usages()
	rep.PreWindow = time.Since(t0)
	rep.PreVictimCPU, rep.PreClientCPU, rep.PreRedis, rep.PreMachine = e1[0].CPU-e0[0].CPU, c1.CPU-c0.CPU, r1-r0, m1-m0
	for i := 1; i < len(e0); i++ {
		rep.PreSurvivorCPU = append(rep.PreSurvivorCPU, e1[i].CPU-e0[i].CPU)
	}
	for _, fc := range clients {
		if fc != nil && !fc.bystander {
			select {
			case <-fc.conn.Done():
				rep.PreDisconnects++
				fc.failure = "ended before the kill: " + errKey(fc.conn.Err())
			default:
			}
		}
	}
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}

	// Kill the victim; every victim session resumes on a survivor.
	var lives sync.WaitGroup
	var victims []*foClient
	for _, fc := range clients {
		if fc != nil && !fc.bystander && fc.failure == "" {
			victims = append(victims, fc)
		}
	}
	run.lives, run.allSettled = int64(len(victims)), make(chan struct{})
	if len(victims) == 0 {
		close(run.allSettled)
	}
	run.killAt = time.Now()
	if err := victim.Kill(); err != nil {
		return rep, err
	}
	for _, fc := range victims {
		lives.Add(1)
		go func() { defer lives.Done(); run.life(ctx, fc) }()
	}
	// The resume window: kill -> the last session resumed (or given up).
	select {
	case <-run.allSettled:
	case <-ctx.Done():
	}
	rep.Window = time.Since(run.killAt)
	e2, c2, r2, m2 := usages()
	rep.ClientCPU, rep.RedisCPU, rep.Machine = c2.CPU-c1.CPU, r2-r1, m2-m1
	for i := 1; i < len(e2); i++ {
		rep.SurvivorCPU = append(rep.SurvivorCPU, e2[i].CPU-e1[i].CPU)
		rep.SurvivorRSS = append(rep.SurvivorRSS, e2[i].RSSBytes)
	}
	lives.Wait() // post-resume actions and acks

	// Checks.
	var noticed, resumed, dial, hello []time.Duration
	how, retries, failures := map[string]int{}, map[string]int{}, map[string]int{}
	for _, fc := range clients {
		if fc == nil {
			continue
		}
		rep.EdgeErrors += fc.edgeErrs.Load()
		if fc.bystander {
			select {
			case <-fc.conn.Done():
				failures["bystander dropped: "+errKey(fc.conn.Err())]++
			default:
				rep.BystandersUp++
			}
		} else {
			rep.Attempts += fc.attempts
			if fc.how != "" {
				how[fc.how]++
				noticed = append(noticed, fc.noticed)
			}
			for _, s := range fc.retries {
				retries[s]++
			}
			if fc.second == nil {
				rep.Failed++
				failures[fc.failure]++
			} else {
				rep.Resumed++
				resumed = append(resumed, fc.resumedAt)
				dial = append(dial, fc.dial)
				hello = append(hello, fc.hello)
				rep.LastResumed = max(rep.LastResumed, fc.resumedAt)
				if fc.second.GetSessionId() == fc.first.GetSessionId() {
					rep.SameSession++
				}
				if fc.second.GetShardId() == fc.first.GetShardId() {
					rep.SameShard++
				}
				if fc.second.GetResumed() {
					rep.ResumedFlag++
				}
				if fc.ackedPost {
					rep.AckedAfter++
				} else if fc.failure != "" {
					failures[fc.failure]++
				}
				b := int(fc.resumedAt / (500 * time.Millisecond))
				for len(rep.ByHalfSecond) <= b {
					rep.ByHalfSecond = append(rep.ByHalfSecond, 0)
				}
				rep.ByHalfSecond[b]++
			}
		}
		applied := fleet.ShardByID(fc.first.GetShardId()).Applied(fc.first.GetSessionId())
		exact, lost, dup := appliedCheck(applied, fc.acked.Load())
		if !lost && !dup && uint64(len(applied)) > fc.acked.Load() {
			rep.AppliedUnacked++
		}
		if exact {
			rep.ActionsExact++
		}
		if lost {
			rep.ActionsLost++
		}
		if dup {
			rep.ActionsDup++
		}
	}
	rep.Noticed, rep.Resume, rep.Dial, rep.Hello = quantiles(noticed), quantiles(resumed), quantiles(dial), quantiles(hello)
	rep.HowNoticed, rep.Retries = errList(how), errList(retries)
	for k, v := range connErrs {
		failures[k] += v
	}
	rep.Failures = errList(failures)
	return rep, nil
}

// appliedCheck compares the ids a shard applied for a session with the
// highest id the client saw acknowledged: exact when every id 1..acked
// was applied once, in order, and nothing else; lost when an
// acknowledged id is missing; dup when any id was applied twice.
func appliedCheck(applied []uint64, acked uint64) (exact, lost, dup bool) {
	seen := map[uint64]int{}
	for _, id := range applied {
		seen[id]++
		if seen[id] > 1 {
			dup = true
		}
	}
	for id := uint64(1); id <= acked; id++ {
		if seen[id] == 0 {
			lost = true
		}
	}
	exact = !lost && !dup && uint64(len(applied)) == acked && slices.IsSorted(applied)
	return exact, lost, dup
}

// connect opens fc on to, has its first Actions acknowledged, and starts
// its receiver and presence.
func (r *foRun) connect(ctx context.Context, fc *foClient, to *Target) error {
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	tok, err := to.Token(fmt.Sprintf("failover-%d", fc.i))
	if err != nil {
		return err
	}
	fc.token = tok
	c, err := egbeclient.Dial(dctx, egbeclient.Options{Kind: r.o.Transport, HTTPBase: to.HTTPBase, H3Base: to.H3Base, CertHash: to.CertHash, Inbox: 256,
		LocalIP: clientSource(r.o.Transport, fc.i)})
	if err != nil {
		return err
	}
	h, err := c.Hello(dctx, r.hello(fc))
	if err != nil {
		_ = c.Close()
		return err
	}
	fc.first, fc.conn = h, c
	r.attach(fc, c)
	if err := sendActionRange(c, 1, uint64(r.o.Actions)); err != nil {
		_ = c.Close()
		return err
	}
	if err := fc.waitAck(dctx, c, uint64(r.o.Actions), 20*time.Second); err != nil {
		_ = c.Close()
		return err
	}
	return nil
}

// FailoverCommand is `egbe-bench failover`.
func FailoverCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	var o FailoverOptions
	fs.StringVar(&o.EdgeBin, "edge-bin", "", "egbe-edge binary, started --edges times on free loopback ports")
	fs.StringVar(&o.EdgeTaskset, "edge-taskset", "", "pin the edges to these CPUs (taskset -c LIST)")
	fs.IntVar(&o.Edges, "edges", 3, "edges; edge 0 is killed")
	fs.StringVar(&o.RedisURL, "redis-url", "", "shared state (default: start redis-server on a free loopback port)")
	fs.StringVar(&o.Transport, "transport", "websocket", "webtransport | webrtc | websocket")
	fs.IntVar(&o.Sessions, "sessions", 2000, "sessions on the victim edge")
	fs.IntVar(&o.Bystanders, "bystanders", 0, "sessions on the surviving edges (round-robin), which must stay up")
	fs.Float64Var(&o.Rate, "rate", 5, "presence Hz per session")
	fs.IntVar(&o.Actions, "actions", 2, "actions acknowledged before the kill (and as many after the resume)")
	fs.IntVar(&o.Instances, "instances", 10, "instances, over two reference shards")
	fs.IntVar(&o.Agents, "agents", 50, "simulated agents per instance")
	fs.IntVar(&o.TickHz, "tick-hz", 20, "reference shard tick (world state per session per second)")
	fs.IntVar(&o.DialWorkers, "dial-workers", 32, "concurrent dials while connecting")
	fs.DurationVar(&o.Warmup, "warmup", 3*time.Second, "everyone connected, before the kill")
	fs.DurationVar(&o.Deadline, "deadline", 30*time.Second, "a session not resumed this long after the kill has failed")
	fs.DurationVar(&o.ResumeJitter, "resume-jitter", 0, "delay each client's first resume attempt by a random part of this")
	fs.DurationVar(&o.Silence, "silence", 0, "treat this long without a message from the edge as its death (needed over webtransport/webrtc: a dead QUIC or SCTP peer sends no reset); 0: wait for the connection to end")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.EdgeBin == "" {
		return errors.New("failover: give --edge-bin")
	}
	rep, err := RunFailover(ctx, o)
	if rep.Connected > 0 {
		fmt.Print(rep)
	}
	return err
}

// ---------------------------------------------------------------- handshakes

// HandshakeOptions shape the handshake comparison: the same fresh-session
// handshakes (dial, hello, ServerHello, close) against an edge on memory
// state and an edge on Redis state, in alternating rounds.
type HandshakeOptions struct {
	EdgeBin     string
	EdgeTaskset string
	RedisURL    string // "" starts redis-server
	Transport   string
	Sessions    int // handshakes per round (default 2000)
	Concurrency int // default 64
	Rounds      int // per state (default 3)
	// Probe is how many sequential handshakes a third edge makes through a
	// counting proxy in front of Redis, to count round trips (0: skip).
	Probe int
}

// HandshakeRound is one timed round.
type HandshakeRound struct {
	State             string // memory | redis
	OK, Errors        int
	Elapsed           time.Duration // first dial -> the edge reports no session left
	EdgeCPU, RedisCPU time.Duration
	ClientCPU         time.Duration    // this process (load client and reference shard)
	MachineCPU        time.Duration    // every process on the machine
	Window            time.Duration    // over which the CPU figures were taken (Elapsed and a settle)
	Latency           Quantiles        // dial + hello -> ServerHello
	Calls             map[string]int64 // INFO commandstats deltas (redis rounds)
	ErrList           []string
}

// Rate is handshakes per second.
func (h HandshakeRound) Rate() float64 { return float64(h.OK) / h.Elapsed.Seconds() }

// HandshakeReport is what the handshake comparison measures.
type HandshakeReport struct {
	Opts       HandshakeOptions
	Fleet      string
	Rounds     []HandshakeRound
	Background map[string]float64 // Redis calls per second with every edge idle
	RedisKnown bool
	Probe      *ProbeReport
}

// ProbeReport is the round-trip count from the counting proxy.
type ProbeReport struct {
	Handshakes  int
	Open, Close map[string]float64 // round trips per handshake by shape, background subtracted
	OpenCmds    map[string]float64 // client-issued commands per handshake on the open path
	CloseCmds   map[string]float64
	Background  map[string]float64 // round trips per second when idle
	Trace       []string           // round trips of one handshake, in order
	// Resume is the open path of a resume (ClientHello with the session's
	// resume token, on the same edge after the session ended): the
	// failover path.
	Resume, ResumeCmds map[string]float64
	ResumeSum          float64
	ResumeTrace        []string
	OpenSum, CloseSum  float64
}

func (r HandshakeReport) totals(state string) (ok int, el, edge, rds time.Duration, calls map[string]int64) {
	calls = map[string]int64{}
	for _, rd := range r.Rounds {
		if rd.State != state {
			continue
		}
		ok += rd.OK
		el += rd.Elapsed
		edge += rd.EdgeCPU
		rds += rd.RedisCPU
		for k, v := range rd.Calls {
			calls[k] += v
		}
	}
	return ok, el, edge, rds, calls
}

// Rates returns memory and redis handshakes per second over all rounds.
func (r HandshakeReport) Rates() (mem, rds float64) {
	mo, me, _, _, _ := r.totals("memory")
	ro, re, _, _, _ := r.totals("redis")
	if me > 0 {
		mem = float64(mo) / me.Seconds()
	}
	if re > 0 {
		rds = float64(ro) / re.Seconds()
	}
	return mem, rds
}

// PairRatios are redis/memory rates of each round's two adjacent runs:
// what the alternation is for (a noisy neighbour hits a pair about
// equally).
func (r HandshakeReport) PairRatios() []float64 {
	var out []float64
	for i := 0; i+1 < len(r.Rounds); i += 2 {
		a, b := r.Rounds[i], r.Rounds[i+1]
		if a.State == "redis" {
			a, b = b, a
		}
		if a.State == "memory" && b.State == "redis" && a.Rate() > 0 {
			out = append(out, b.Rate()/a.Rate())
		}
	}
	return out
}

// CPURatio is memory's all-in CPU per handshake (edge, client, shard)
// over Redis's (edge, redis-server, client, shard): the throughput ratio
// a CPU-bound machine of our own would show. Zero when Redis's CPU is
// unknown.
func (r HandshakeReport) CPURatio() float64 {
	var mok, rok int
	var mcpu, rcpu time.Duration
	for _, rd := range r.Rounds {
		if rd.State == "memory" {
			mok += rd.OK
			mcpu += rd.EdgeCPU + rd.ClientCPU
		} else {
			rok += rd.OK
			rcpu += rd.EdgeCPU + rd.ClientCPU + rd.RedisCPU
		}
	}
	if !r.RedisKnown || mok == 0 || rok == 0 || rcpu == 0 {
		return 0
	}
	return (mcpu.Seconds() / float64(mok)) / (rcpu.Seconds() / float64(rok))
}

// CallsPerHandshake is Redis commands per handshake (INFO commandstats,
// including commands run inside scripts), background subtracted.
func (r HandshakeReport) CallsPerHandshake() (float64, map[string]float64) {
	ok, el, _, _, calls := r.totals("redis")
	per := map[string]float64{}
	var sum float64
	if ok == 0 {
		return 0, per
	}
	for k, v := range calls {
		x := (float64(v) - r.Background[k]*el.Seconds()) / float64(ok)
		if x < 0.005 {
			continue
		}
		per[k] = x
		sum += x
	}
	return sum, per
}

func sortedKV(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%.2f", k, m[k])
	}
	return strings.Join(parts, " ")
}

func (r HandshakeReport) String() string {
	var b strings.Builder
	o := r.Opts
	fmt.Fprintf(&b, "handshakes/%s sessions=%d per round, concurrency=%d, rounds=%d per state (alternating)\n", o.Transport, o.Sessions, o.Concurrency, o.Rounds)
	fmt.Fprintf(&b, "  %s\n", r.Fleet)
	for i, rd := range r.Rounds {
		fmt.Fprintf(&b, "  round %d %-6s ok=%d errors=%d in %v = %.0f/s  handshake %s\n", i+1, rd.State, rd.OK, rd.Errors,
			rd.Elapsed.Round(time.Millisecond), rd.Rate(), rd.Latency)
		fmt.Fprintf(&b, "    cpu per handshake: edge=%v", perOp(rd.EdgeCPU, rd.OK))
		if rd.State == "redis" && r.RedisKnown {
			fmt.Fprintf(&b, " redis-server=%v", perOp(rd.RedisCPU, rd.OK))
		}
		ours := rd.EdgeCPU + rd.ClientCPU
		if rd.State == "redis" {
			ours += rd.RedisCPU
		}
		fmt.Fprintf(&b, " client+shard=%v; machine busy %.2f cores, of which this run %.2f, other work %.2f\n", perOp(rd.ClientCPU, rd.OK),
			cores(rd.MachineCPU, rd.Window), cores(ours, rd.Window), cores(rd.MachineCPU-ours, rd.Window))
		for _, e := range rd.ErrList {
			fmt.Fprintf(&b, "    error: %s\n", e)
		}
	}
	mem, rds := r.Rates()
	for _, st := range []string{"memory", "redis"} {
		var ok int
		var edge, rcpu, client time.Duration
		for _, rd := range r.Rounds {
			if rd.State == st {
				ok += rd.OK
				edge += rd.EdgeCPU
				client += rd.ClientCPU
				if st == "redis" {
					rcpu += rd.RedisCPU
				}
			}
		}
		rate := mem
		if st == "redis" {
			rate = rds
		}
		all := perOp(edge+rcpu+client, ok)
		ceiling := 0.0
		if all > 0 {
			ceiling = float64(runtime.NumCPU()) / all.Seconds()
		}
		fmt.Fprintf(&b, "  %-6s %.0f handshakes/s; cpu per handshake: edge=%v", st, rate, perOp(edge, ok))
		if st == "redis" && r.RedisKnown {
			fmt.Fprintf(&b, " redis-server=%v", perOp(rcpu, ok))
		}
		fmt.Fprintf(&b, " client+shard=%v all=%v (%d cores / all = %.0f/s if this run had the machine)\n", perOp(client, ok), all, runtime.NumCPU(), ceiling)
	}
	if mem > 0 {
		fmt.Fprintf(&b, "  ratio redis/memory: %.2f over all rounds (target >= 0.70)", rds/mem)
		if pr := r.PairRatios(); len(pr) > 0 {
			parts := make([]string, len(pr))
			for i, x := range pr {
				parts[i] = fmt.Sprintf("%.2f", x)
			}
			sorted := slices.Clone(pr)
			slices.Sort(sorted)
			med := sorted[len(sorted)/2]
			if len(sorted)%2 == 0 {
				med = (sorted[len(sorted)/2-1] + med) / 2
			}
			fmt.Fprintf(&b, "; per round pair %s (median %.2f)", strings.Join(parts, " "), med)
		}
		if c := r.CPURatio(); c > 0 {
			fmt.Fprintf(&b, "; from all-in CPU per handshake %.2f", c)
		}
		b.WriteString("\n")
	}
	sum, per := r.CallsPerHandshake()
	fmt.Fprintf(&b, "  redis commands per handshake (INFO commandstats, open+close, incl. commands inside scripts, background subtracted): %.2f\n    %s\n", sum, sortedKV(per))
	fmt.Fprintf(&b, "  background with every edge idle (calls/s): %s\n", sortedKV(r.Background))
	if p := r.Probe; p != nil {
		fmt.Fprintf(&b, "  round trips (counting proxy, %d sequential handshakes on a third edge, background subtracted):\n", p.Handshakes)
		fmt.Fprintf(&b, "    open path (dial -> ServerHello): %.2f per handshake: %s\n", p.OpenSum, sortedKV(p.Open))
		fmt.Fprintf(&b, "      client-issued commands: %s\n", sortedKV(p.OpenCmds))
		fmt.Fprintf(&b, "    close path (client close -> session gone): %.2f per handshake: %s\n", p.CloseSum, sortedKV(p.Close))
		fmt.Fprintf(&b, "      client-issued commands: %s\n", sortedKV(p.CloseCmds))
		fmt.Fprintf(&b, "    one handshake's open path in order: %s\n", strings.Join(p.Trace, " | "))
		fmt.Fprintf(&b, "    resume open path (resume token, after the close): %.2f per handshake: %s\n", p.ResumeSum, sortedKV(p.Resume))
		fmt.Fprintf(&b, "      client-issued commands: %s\n", sortedKV(p.ResumeCmds))
		fmt.Fprintf(&b, "      one resume in order: %s\n", strings.Join(p.ResumeTrace, " | "))
		fmt.Fprintf(&b, "    idle background (trips/s): %s\n", sortedKV(p.Background))
	}
	return b.String()
}

func perOp(d time.Duration, n int) time.Duration {
	if n == 0 {
		return 0
	}
	return (d / time.Duration(n)).Round(time.Microsecond)
}

// commandStats reads INFO commandstats: calls by command (minus our INFO).
func commandStats(ctx context.Context, rdb *redis.Client) (map[string]int64, error) {
	s, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		if name == "info" {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[name] = n
			}
		}
	}
	return out, nil
}

func diffCounts(a, b map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range b {
		if d := v - a[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// RunHandshakes runs the handshake comparison.
func RunHandshakes(ctx context.Context, o HandshakeOptions) (HandshakeReport, error) {
	if o.Transport == "" {
		o.Transport = "websocket"
	}
	if o.Sessions <= 0 {
		o.Sessions = 2000
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 64
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	rep := HandshakeReport{Opts: o}
	// One reference shard, one instance: sessions close at once, so the
	// world's size barely matters; it is the same for both edges.
	fleet, err := StartFleet(ctx, FleetOptions{EdgeBin: o.EdgeBin, Edges: 1, RedisURL: o.RedisURL, Shards: 1,
		Instances: []string{"hs-0"}, Agents: 20, Taskset: o.EdgeTaskset})
	if err != nil {
		return rep, err
	}
	defer fleet.Stop()
	rep.RedisKnown = fleet.RedisPID != 0
	redisEdge := fleet.Edges[0]
	memEdge, err := fleet.AddEdge(ctx, "")
	if err != nil {
		return rep, err
	}
	rep.Fleet = fleet.String() + " (edge 1: redis state, edge 2: memory state)"
	ropts, err := redis.ParseURL(fleet.RedisURL)
	if err != nil {
		return rep, err
	}
	rdb := redis.NewClient(ropts)
	defer rdb.Close()

	// Tokens are minted before timing: the dev token endpoint is not part
	// of the handshake. One secret: both edges accept them.
	tokens := make([]string, o.Sessions)
	for i := range tokens {
		if tokens[i], err = memEdge.Token(fmt.Sprintf("hs-%d", i)); err != nil {
			return rep, err
		}
	}

	// Background: what the Redis edge does to Redis when idle.
	cs0, err := commandStats(ctx, rdb)
	if err != nil {
		return rep, err
	}
	bt := time.Now()
	sleepCtx(ctx, 2*time.Second)
	cs1, err := commandStats(ctx, rdb)
	if err != nil {
		return rep, err
	}
	rep.Background = map[string]float64{}
	for k, v := range diffCounts(cs0, cs1) {
		rep.Background[k] = float64(v) / time.Since(bt).Seconds()
	}

	for r := range o.Rounds {
		order := []string{"memory", "redis"}
		if r%2 == 1 {
			order = []string{"redis", "memory"}
		}
		for _, st := range order {
			t := memEdge
			if st == "redis" {
				t = redisEdge
			}
			rd, err := handshakeRound(ctx, t, fleet, rdb, tokens, o, st)
			if err != nil {
				return rep, err
			}
			rep.Rounds = append(rep.Rounds, rd)
		}
	}
	if o.Probe > 0 {
		p, err := probeRoundTrips(ctx, fleet, ropts.Addr, tokens, o)
		if err != nil {
			return rep, err
		}
		rep.Probe = p
	}
	return rep, nil
}

// handshakeRound times len(tokens) fresh-session handshakes against t.
func handshakeRound(ctx context.Context, t *Target, fleet *Fleet, rdb *redis.Client, tokens []string, o HandshakeOptions, state string) (HandshakeRound, error) {
	rd := HandshakeRound{State: state}
	var cs0 map[string]int64
	if state == "redis" {
		var err error
		if cs0, err = commandStats(ctx, rdb); err != nil {
			return rd, err
		}
	}
	u0, r0, c0, m0 := t.Usage(), fleet.RedisCPU(), selfCPU(), machineBusy()
	var lat Latencies
	var okN, errN atomic.Int64
	errs := map[string]int{}
	var errMu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(tokens) || ctx.Err() != nil {
					return
				}
				if err := oneHandshake(ctx, t, o.Transport, i, tokens[i], &lat); err != nil {
					errN.Add(1)
					errMu.Lock()
					errs[errKey(err)]++
					errMu.Unlock()
					continue
				}
				okN.Add(1)
			}
		}()
	}
	wg.Wait()
	// The round ends when every session is gone from the shard (the
	// edge's close path is part of a handshake's cost).
	if err := fleet.waitShardSessions(ctx, 0, 30*time.Second); err != nil {
		return rd, err
	}
	rd.Elapsed = time.Since(start)
	// CPU is read once the last close paths have landed (in both states,
	// after a short settle), so it includes them.
	if state == "redis" {
		// Let the last close paths' Redis calls land: wait until the
		// counts hold still for 100 ms (at most 3 s).
		prev, _ := commandStats(ctx, rdb)
		for range 30 {
			sleepCtx(ctx, 100*time.Millisecond)
			cur, err := commandStats(ctx, rdb)
			if err != nil {
				return rd, err
			}
			if len(diffCounts(prev, cur)) == 0 {
				break
			}
			prev = cur
		}
		rd.Calls = diffCounts(cs0, prev)
	} else {
		sleepCtx(ctx, 100*time.Millisecond)
	}
	u1, r1, c1, m1 := t.Usage(), fleet.RedisCPU(), selfCPU(), machineBusy()
	rd.Window = time.Since(start)
	rd.OK, rd.Errors = int(okN.Load()), int(errN.Load())
	rd.EdgeCPU, rd.RedisCPU, rd.ClientCPU, rd.MachineCPU = u1.CPU-u0.CPU, r1-r0, c1-c0, m1-m0
	rd.Latency = quantiles(samples(&lat))
	rd.ErrList = errList(errs)
	return rd, nil
}

// oneHandshake opens a fresh session on t and closes it.
func oneHandshake(ctx context.Context, t *Target, transport string, i int, token string, lat *Latencies) error {
	hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	t1 := time.Now()
	c, err := egbeclient.Dial(hctx, egbeclient.Options{Kind: transport, HTTPBase: t.HTTPBase, H3Base: t.H3Base, CertHash: t.CertHash, Inbox: 64,
		LocalIP: clientSource(transport, i)})
	if err != nil {
		return err
	}
	defer c.Close()
	h, err := c.Hello(hctx, &codec.ClientHello{AccessToken: token, InstanceId: "hs-0", AuthorityKind: codec.AuthorityKind_UE_CLIENT,
		ProtocolVersion: codec.ProtocolVersion, Capabilities: worldCapabilities})
	if err != nil {
		return err
	}
	if lat != nil {
		lat.Add(time.Since(t1))
	}
	if h.GetSessionId() == "" || h.GetResumed() {
		return fmt.Errorf("bench: odd ServerHello %v", h)
	}
	return nil
}

// probeRoundTrips starts a third edge whose Redis traffic passes through a
// counting proxy, and counts round trips on the open and close paths of
// o.Probe sequential handshakes.
func probeRoundTrips(ctx context.Context, fleet *Fleet, redisAddr string, tokens []string, o HandshakeOptions) (*ProbeReport, error) {
	px, err := startRespCounter(redisAddr)
	if err != nil {
		return nil, err
	}
	defer px.Close()
	t, err := fleet.AddEdge(ctx, "redis://"+px.Addr()+"/0")
	if err != nil {
		return nil, err
	}
	defer t.Stop()
	n := min(o.Probe, len(tokens))
	p := &ProbeReport{Handshakes: n, Background: map[string]float64{}}
	// Warm the edge's connection pool, then let it go idle.
	for i := range min(5, n) {
		if err := oneHandshake(ctx, t, o.Transport, i, tokens[i], nil); err != nil {
			return nil, err
		}
	}
	if err := fleet.waitShardSessions(ctx, 0, 10*time.Second); err != nil {
		return nil, err
	}
	sleepCtx(ctx, 300*time.Millisecond)
	b0, _ := px.snapshot()
	bt := time.Now()
	sleepCtx(ctx, 2*time.Second)
	b1, _ := px.snapshot()
	bg := time.Since(bt)
	for k, v := range diffCounts(b0, b1) {
		p.Background[k] = float64(v) / bg.Seconds()
	}
	perHS := func(d map[string]int64, wall time.Duration) map[string]float64 {
		out := map[string]float64{}
		for k, v := range d {
			x := (float64(v) - p.Background[k]*wall.Seconds()) / float64(n)
			if x >= 0.005 {
				out[k] = x
			}
		}
		return out
	}
	sum := func(m map[string]float64) float64 {
		var s float64
		for _, v := range m {
			s += v
		}
		return s
	}

	// Open path: n sessions, one at a time, kept open.
	s0, c0 := px.snapshot()
	t0 := time.Now()
	conns := make([]*egbeclient.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	var traceFrom, traceTo time.Time
	hellos := make([]*codec.ServerHello, 0, n)
	for i := range n {
		hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		from := time.Now()
		c, err := egbeclient.Dial(hctx, egbeclient.Options{Kind: o.Transport, HTTPBase: t.HTTPBase, H3Base: t.H3Base, CertHash: t.CertHash, Inbox: 1024,
			LocalIP: clientSource(o.Transport, i)})
		var h *codec.ServerHello
		if err == nil {
			h, err = c.Hello(hctx, &codec.ClientHello{AccessToken: tokens[i], InstanceId: "hs-0", AuthorityKind: codec.AuthorityKind_UE_CLIENT,
				ProtocolVersion: codec.ProtocolVersion, Capabilities: worldCapabilities})
			conns = append(conns, c)
		}
		cancel()
		if err != nil {
			return nil, fmt.Errorf("bench: probe handshake %d: %w", i, err)
		}
		hellos = append(hellos, h)
		if i == n/2 {
			traceFrom, traceTo = from, time.Now()
		}
	}
	s1, c1 := px.snapshot()
	open := time.Since(t0)
	p.Open, p.OpenCmds = perHS(diffCounts(s0, s1), open), perHS(diffCounts(c0, c1), open)
	p.OpenSum = sum(p.Open)
	p.Trace = px.between(traceFrom, traceTo)

	// Close path, one session at a time (closing all at once would grow
	// the edge's Redis pool and count its dials): the edge stores the final
	// pin and releases the leases.
	t1 := time.Now()
	for i, c := range conns {
		_ = c.Close()
		if err := fleet.waitShardSessions(ctx, len(conns)-i-1, 10*time.Second); err != nil {
			return nil, err
		}
	}
	conns = nil
	prev, _ := px.snapshot()
	for range 30 {
		sleepCtx(ctx, 100*time.Millisecond)
		cur, _ := px.snapshot()
		if len(diffCounts(prev, cur)) == 0 {
			break
		}
		prev = cur
	}
	s2, c2 := px.snapshot()
	cl := time.Since(t1)
	p.Close, p.CloseCmds = perHS(diffCounts(s1, s2), cl), perHS(diffCounts(c1, c2), cl)
	p.CloseSum = sum(p.Close)

	// Resume path: each session comes back with its resume token.
	s3, c3 := px.snapshot()
	t3 := time.Now()
	for i, h := range hellos {
		hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		from := time.Now()
		c, err := egbeclient.Dial(hctx, egbeclient.Options{Kind: o.Transport, HTTPBase: t.HTTPBase, H3Base: t.H3Base, CertHash: t.CertHash, Inbox: 1024,
			LocalIP: clientSource(o.Transport, i)})
		var got *codec.ServerHello
		if err == nil {
			got, err = c.Hello(hctx, &codec.ClientHello{AccessToken: tokens[i], InstanceId: "hs-0", AuthorityKind: codec.AuthorityKind_UE_CLIENT,
				ProtocolVersion: codec.ProtocolVersion, Capabilities: worldCapabilities, ResumeToken: h.GetResumeToken()})
			conns = append(conns, c)
		}
		cancel()
		if err != nil {
			return nil, fmt.Errorf("bench: probe resume %d: %w", i, err)
		}
		if !got.GetResumed() || got.GetSessionId() != h.GetSessionId() {
			return nil, fmt.Errorf("bench: probe resume %d: got session %s resumed=%v, want %s", i, got.GetSessionId(), got.GetResumed(), h.GetSessionId())
		}
		if i == n/2 {
			p.ResumeTrace = px.between(from, time.Now())
		}
	}
	s4, c4 := px.snapshot()
	rs := time.Since(t3)
	p.Resume, p.ResumeCmds = perHS(diffCounts(s3, s4), rs), perHS(diffCounts(c3, c4), rs)
	p.ResumeSum = sum(p.Resume)
	return p, nil
}

// HandshakesCommand is `egbe-bench handshakes`.
func HandshakesCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("handshakes", flag.ContinueOnError)
	var o HandshakeOptions
	fs.StringVar(&o.EdgeBin, "edge-bin", "", "egbe-edge binary (two edges: memory state and redis state; a third for --probe)")
	fs.StringVar(&o.EdgeTaskset, "edge-taskset", "", "pin the edges to these CPUs (taskset -c LIST)")
	fs.StringVar(&o.RedisURL, "redis-url", "", "shared state (default: start redis-server on a free loopback port)")
	fs.StringVar(&o.Transport, "transport", "websocket", "webtransport | webrtc | websocket")
	fs.IntVar(&o.Sessions, "sessions", 2000, "handshakes per round")
	fs.IntVar(&o.Concurrency, "concurrency", 64, "concurrent handshakes")
	fs.IntVar(&o.Rounds, "rounds", 3, "rounds per state, alternating")
	fs.IntVar(&o.Probe, "probe", 200, "sequential handshakes through a Redis round-trip counter (0: skip)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.EdgeBin == "" {
		return errors.New("handshakes: give --edge-bin")
	}
	rep, err := RunHandshakes(ctx, o)
	fmt.Print(rep)
	return err
}

// ---------------------------------------------------------------- Redis round-trip counter

// respCounter is a TCP proxy in front of Redis that counts round trips:
// every batch of commands a client sends at once (one command, a
// pipeline, or MULTI..EXEC) is one. A go-redis connection never sends
// again before it has read the reply, so batches are round trips.
type respCounter struct {
	ln       net.Listener
	upstream string
	wg       sync.WaitGroup

	mu    sync.Mutex
	trips map[string]int64 // guarded by mu: by shape
	cmds  map[string]int64 // guarded by mu: by command name
	log   []tripAt         // guarded by mu: bounded
	conns map[net.Conn]struct{}
}

type tripAt struct {
	at    time.Time
	shape string
}

const tripLogMax = 200_000

func startRespCounter(upstream string) (*respCounter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &respCounter{ln: ln, upstream: upstream, trips: map[string]int64{}, cmds: map[string]int64{}, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go func() { defer p.wg.Done(); p.accept() }()
	return p, nil
}

func (p *respCounter) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and waits for its goroutines.
func (p *respCounter) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *respCounter) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *respCounter) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			p.mu.Lock()
			conns := p.conns
			p.conns = nil
			p.mu.Unlock()
			for c := range conns {
				_ = c.Close()
			}
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c) || !p.track(up) {
			_ = c.Close()
			_ = up.Close()
			continue
		}
		p.wg.Add(2)
		go func() { // replies
			defer p.wg.Done()
			_, _ = io.Copy(c, up)
			_ = c.Close()
		}()
		go func() { // requests
			defer p.wg.Done()
			defer up.Close()
			defer c.Close()
			br := bufio.NewReaderSize(c, 64<<10)
			for {
				raw, names, shape, err := readBatch(br)
				if err != nil {
					return
				}
				p.record(names, shape)
				if _, err := up.Write(raw); err != nil {
					return
				}
			}
		}()
	}
}

func (p *respCounter) record(names []string, shape string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trips[shape]++
	for _, n := range names {
		p.cmds[n]++
	}
	if len(p.log) < tripLogMax {
		p.log = append(p.log, tripAt{time.Now(), shape})
	}
}

// snapshot copies the counts: trips by shape, commands by name.
func (p *respCounter) snapshot() (map[string]int64, map[string]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := make(map[string]int64, len(p.trips))
	for k, v := range p.trips {
		t[k] = v
	}
	c := make(map[string]int64, len(p.cmds))
	for k, v := range p.cmds {
		c[k] = v
	}
	return t, c
}

// between lists the round trips made within [from, to], in order.
func (p *respCounter) between(from, to time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, t := range p.log {
		if !t.at.Before(from) && !t.at.After(to) {
			out = append(out, t.shape)
		}
	}
	return out
}

// readBatch reads every command the client has sent at once.
func readBatch(br *bufio.Reader) (raw []byte, names []string, shape string, err error) {
	var parts []string
	for {
		var args []string
		raw, args, err = readCommand(br, raw)
		if err != nil {
			return nil, nil, "", err
		}
		if len(args) == 0 {
			continue
		}
		name := strings.ToLower(args[0])
		names = append(names, name)
		parts = append(parts, name+keyShape(name, args))
		if br.Buffered() == 0 {
			break
		}
	}
	shape = strings.Join(parts, " + ")
	if len(parts) > 1 {
		shape = "pipeline[" + shape + "]"
	}
	return raw, names, shape, nil
}

// readCommand reads one RESP command (an array of bulk strings, or an
// inline command), appends its bytes to raw, and returns its first few
// arguments.
func readCommand(br *bufio.Reader, raw []byte) ([]byte, []string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return raw, nil, err
	}
	raw = append(raw, line...)
	if !strings.HasPrefix(line, "*") {
		return raw, strings.Fields(line), nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 || n > 1<<20 {
		return raw, nil, fmt.Errorf("bench: bad RESP array header %q", line)
	}
	var args []string
	for range n {
		hdr, err := br.ReadString('\n')
		if err != nil {
			return raw, nil, err
		}
		raw = append(raw, hdr...)
		if !strings.HasPrefix(hdr, "$") {
			return raw, nil, fmt.Errorf("bench: bad RESP bulk header %q", hdr)
		}
		size, err := strconv.Atoi(strings.TrimSpace(hdr[1:]))
		if err != nil || size < 0 || size > 512<<20 {
			return raw, nil, fmt.Errorf("bench: bad RESP bulk size %q", hdr)
		}
		start := len(raw)
		raw = append(raw, make([]byte, size+2)...)
		if _, err := io.ReadFull(br, raw[start:]); err != nil {
			return raw, nil, err
		}
		if len(args) < 4 {
			args = append(args, string(raw[start:start+min(size, 96)]))
		}
	}
	return raw, args, nil
}

// keyShape names the key a command touches with its variable parts
// masked: " egbe:pin:*". Scripts name their first key.
func keyShape(name string, args []string) string {
	key := ""
	switch name {
	case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
		if len(args) > 3 {
			if nk, _ := strconv.Atoi(args[2]); nk > 0 {
				key = args[3]
			}
		}
	case "multi", "exec", "ping", "discard":
	default:
		if len(args) > 1 {
			key = args[1]
		}
	}
	if key == "" {
		return ""
	}
	segs := strings.Split(key, ":")
	for i, s := range segs {
		if strings.ContainsAny(s, "0123456789") || len(s) > 24 {
			segs[i] = "*"
		}
	}
	return " " + strings.Join(segs, ":")
}
