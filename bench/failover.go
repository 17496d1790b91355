package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/egbeclient"
)

// The failover scenario (egbe-bench failover): edge 0 of a fleet is
// SIGKILLed under load and every session must resume elsewhere.

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
