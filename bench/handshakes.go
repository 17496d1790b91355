package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
)

// The handshakes scenario (egbe-bench handshakes): fresh-session
// handshakes on memory and on Redis state, with Redis round trips counted.

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
