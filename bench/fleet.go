package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/shard/shardsim"
)

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

// Helpers the fleet scenarios share.

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
