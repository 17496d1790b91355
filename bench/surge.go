package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oshun/egbe-edge/admission"
)

// SurgeOptions shape the surge scenario: an arrival storm against the
// waiting room (armed globally by an operator) in front of
// POST /api/v3/lilith/launch.
type SurgeOptions struct {
	// Rate is new users per minute (the reference's 3,300 auth
	// requests/min). Each joins, polls every PollEvery until admitted,
	// then launches with the admission ticket; at the end of Duration the
	// users still waiting leave.
	Rate     float64
	Duration time.Duration
	// Max drives the room as fast as it goes instead: Workers loops, each
	// joining, polling back to back up to MaxPolls times, then launching
	// (admitted) or leaving (not yet).
	Max       bool
	Workers   int
	MaxPolls  int
	PollEvery time.Duration // paced mode; 0: 1 s
	// ClientRegions are spread round-robin over the arrivals.
	ClientRegions []string
	// Policy gives the bucket ceilings the admits are checked against
	// (nil: admission.DefaultPolicy()).
	Policy *admission.Policy
}

// DefaultSurgeRegions covers every POP bucket of the default policy
// ("fr" has no mapping and lands on the default region).
var DefaultSurgeRegions = []string{"us-ca", "de", "gb", "in", "br", "kr", "gcc", "fr"}

// SurgeReport is what the surge scenario measures.
type SurgeReport struct {
	Mode                       string
	Elapsed                    time.Duration
	Users                      int64
	Joins, Polls, Leaves       int64
	Launches                   int64
	Admits                     int64
	Errors                     int64
	FirstErrs                  []string
	Join, Poll, Leave, Launch  Summary
	QueueOps                   Summary // joins + polls + leaves together
	EdgeCPU, RedisCPU, SelfCPU time.Duration
	// OverAdmits is, per bucket ("global" or a POP region), the largest
	// excess of admits in any window over burst + rate x window (must
	// be 0).
	OverAdmits map[string]int
	PeakAdmits map[string]int // largest admit count in any 60 s window
}

// QueueOpsPerSec is joins + polls + leaves per second.
func (r SurgeReport) QueueOpsPerSec() float64 {
	return float64(r.Joins+r.Polls+r.Leaves) / max(r.Elapsed.Seconds(), 1e-9)
}

// AdmitsPerSec is admits per second over the run.
func (r SurgeReport) AdmitsPerSec() float64 {
	return float64(r.Admits) / max(r.Elapsed.Seconds(), 1e-9)
}

// TotalOverAdmits sums OverAdmits.
func (r SurgeReport) TotalOverAdmits() int {
	n := 0
	for _, v := range r.OverAdmits {
		n += v
	}
	return n
}

func (r SurgeReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "surge/%s elapsed=%v users=%d admits=%d (%.1f/s) launches=%d errors=%d\n", r.Mode, r.Elapsed.Round(time.Millisecond),
		r.Users, r.Admits, r.AdmitsPerSec(), r.Launches, r.Errors)
	fmt.Fprintf(&b, "  queue ops=%d (%.0f/s): joins=%d polls=%d leaves=%d\n", r.Joins+r.Polls+r.Leaves, r.QueueOpsPerSec(), r.Joins, r.Polls, r.Leaves)
	fmt.Fprintf(&b, "  queue op  %s\n", r.QueueOps)
	fmt.Fprintf(&b, "  join      %s\n  poll      %s\n  leave     %s\n  launch    %s\n", r.Join, r.Poll, r.Leave, r.Launch)
	keys := make([]string, 0, len(r.OverAdmits))
	for k := range r.OverAdmits {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintf(&b, "  over-admissions=%d\n", r.TotalOverAdmits())
	for _, k := range keys {
		fmt.Fprintf(&b, "    %-15s over=%d peak/60s=%d\n", k, r.OverAdmits[k], r.PeakAdmits[k])
	}
	el := max(r.Elapsed.Seconds(), 1e-9)
	fmt.Fprintf(&b, "  cpu edge=%v (%.2f cores) redis=%v (%.2f cores) client=%v (%.2f cores)\n",
		r.EdgeCPU.Round(time.Millisecond), r.EdgeCPU.Seconds()/el, r.RedisCPU.Round(time.Millisecond), r.RedisCPU.Seconds()/el,
		r.SelfCPU.Round(time.Millisecond), r.SelfCPU.Seconds()/el)
	for _, e := range r.FirstErrs {
		fmt.Fprintf(&b, "  error: %s\n", e)
	}
	return b.String()
}

// surgeLaunchBody is a valid launch request (the guard in front of it is
// what the scenario exercises).
const surgeLaunchBody = `{"v1UserId":null,"tenantId":"tara-studio","clientRegion":"de","nativeClient":{"installed":false},` +
	`"browser":{"webRtc":true,"codecs":["H264","AV1"],"webGpu":true,"webGl2":true},` +
	`"network":{"sustainedDownlinkMbps":20,"probeDurationMs":3000},"region":{"pixelStreamingRestricted":false},` +
	`"pops":[{"popId":"eu-west-1","rttMs":12,"availableWorkers":3,"programmingPriority":1,"codecs":["H264"]}]}`

// surgeRun is the shared state of one run.
type surgeRun struct {
	t      *Target
	hc     *http.Client
	policy *admission.Policy
	opts   SurgeOptions

	joins, polls, leaves, launches, users, errs atomic.Int64
	join, poll, leave, launch, ops              Latencies

	mu        sync.Mutex
	firstErrs []string           // guarded by mu
	admits    map[string][]int64 // guarded by mu: POP region -> admit times (server ms)
}

func (s *surgeRun) fail(format string, args ...any) {
	s.errs.Add(1)
	s.mu.Lock()
	if len(s.firstErrs) < 5 {
		s.firstErrs = append(s.firstErrs, fmt.Sprintf(format, args...))
	}
	s.mu.Unlock()
}

// post sends a JSON body and decodes a JSON answer into out (when not nil).
func (s *surgeRun) post(ctx context.Context, path string, body []byte, hdr map[string]string, out any) (int, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.t.HTTPBase+path, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	d := time.Since(start)
	if err != nil {
		return resp.StatusCode, d, err
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, d, fmt.Errorf("%s: HTTP %d %s", path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, d, fmt.Errorf("%s: %w", path, err)
		}
	}
	return resp.StatusCode, d, nil
}

type surgeStatus struct {
	Status          string `json:"status"`
	Region          string `json:"region"`
	Ticket          string `json:"ticket"`
	AdmissionTicket string `json:"admissionTicket"`
	JoinBy          string `json:"joinBy"`
}

// user runs one arrival. pace is the wait between polls (0: back to back),
// maxPolls bounds them (0: until admitted or ctx ends). It returns when the
// user launched or left.
func (s *surgeRun) user(ctx context.Context, clientRegion string, pace time.Duration, maxPolls int) {
	s.users.Add(1)
	var st surgeStatus
	_, d, err := s.post(ctx, "/api/v1/queue/join", []byte(`{"clientRegion":"`+clientRegion+`"}`), nil, &st)
	if err != nil {
		if ctx.Err() == nil {
			s.fail("join: %v", err)
		}
		return
	}
	s.joins.Add(1)
	s.join.Add(d)
	s.ops.Add(d)
	for polls := 0; st.Status != "admitted"; polls++ {
		if st.Status != "queued" {
			s.fail("join/status: unexpected status %q", st.Status)
			return
		}
		if (maxPolls > 0 && polls >= maxPolls) || ctx.Err() != nil {
			s.leaveWith(st.Ticket)
			return
		}
		if pace > 0 {
			select {
			case <-ctx.Done():
				s.leaveWith(st.Ticket)
				return
			case <-time.After(pace):
			}
		}
		tok := st.Ticket
		st = surgeStatus{}
		_, d, err := s.post(ctx, "/api/v1/queue/status", []byte(`{"ticket":"`+tok+`"}`), nil, &st)
		if err != nil {
			if ctx.Err() != nil {
				s.leaveWith(tok)
			} else {
				s.fail("status: %v", err)
			}
			return
		}
		s.polls.Add(1)
		s.poll.Add(d)
		s.ops.Add(d)
	}
	// Admitted: the server admitted at joinBy - join window.
	jb, err := time.Parse(time.RFC3339Nano, st.JoinBy)
	if err != nil {
		s.fail("joinBy %q: %v", st.JoinBy, err)
		return
	}
	at := jb.UnixMilli() - s.policy.WaitingRoom.JoinWindowMs
	s.mu.Lock()
	s.admits[st.Region] = append(s.admits[st.Region], at)
	s.mu.Unlock()
	// Use the admission on a launch (past the guard), even if the run just
	// ended: the admit happened.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, d, err = s.post(lctx, "/api/v3/lilith/launch", []byte(surgeLaunchBody),
		map[string]string{admission.HeaderAdmission: st.AdmissionTicket, admission.HeaderClientRegion: clientRegion}, nil)
	if err != nil {
		s.fail("launch: %v", err)
		return
	}
	s.launches.Add(1)
	s.launch.Add(d)
}

// leaveWith gives up a place, on a fresh context (the run may be over).
func (s *surgeRun) leaveWith(ticket string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, d, err := s.post(ctx, "/api/v1/queue/leave", []byte(`{"ticket":"`+ticket+`"}`), nil, nil)
	if err != nil {
		s.fail("leave: %v", err)
		return
	}
	s.leaves.Add(1)
	s.leave.Add(d)
	s.ops.Add(d)
}

// ArmRoom arms the waiting room globally as an operator.
func ArmRoom(ctx context.Context, t *Target) error {
	body, _ := json.Marshal(map[string]any{"sub": "surge-operator", "tenant": "tara-studio", "region": "gb", "roles": []string{"operator"}})
	resp, err := http.Post(t.HTTPBase+"/v6/dev/token", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	var tok struct{ Token string }
	err = json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if err != nil || tok.Token == "" {
		return fmt.Errorf("bench: operator token: HTTP %d %v", resp.StatusCode, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.HTTPBase+"/api/v1/queue/arm", strings.NewReader(`{"region":"","armed":true}`))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+tok.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: arm: HTTP %d %s", resp.StatusCode, b)
	}
	return nil
}

// RunSurge arms the room and runs the storm against t. redisPID, when not
// 0, is read for Redis's CPU.
func RunSurge(ctx context.Context, t *Target, redisPID int, opts SurgeOptions) (SurgeReport, error) {
	if opts.Policy == nil {
		opts.Policy = admission.DefaultPolicy()
	}
	if len(opts.ClientRegions) == 0 {
		opts.ClientRegions = DefaultSurgeRegions
	}
	if opts.PollEvery <= 0 {
		opts.PollEvery = time.Second
	}
	if opts.Workers <= 0 {
		opts.Workers = 64
	}
	if opts.MaxPolls <= 0 {
		opts.MaxPolls = 4
	}
	if !opts.Max && opts.Rate <= 0 {
		return SurgeReport{}, errors.New("bench: surge: --rate must be > 0")
	}
	if err := ArmRoom(ctx, t); err != nil {
		return SurgeReport{}, err
	}
	tr := &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext}
	defer tr.CloseIdleConnections()
	s := &surgeRun{t: t, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}, policy: opts.Policy, opts: opts,
		admits: map[string][]int64{}}

	redisUsage := func() time.Duration {
		if redisPID == 0 {
			return 0
		}
		u, _ := ReadProc(redisPID)
		return u.CPU
	}
	self0, _ := ReadProc(os.Getpid())
	edge0, redis0 := t.Usage().CPU, redisUsage()
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, opts.Duration)
	defer cancel()
	var wg sync.WaitGroup
	var next atomic.Int64
	region := func() string {
		return opts.ClientRegions[int(next.Add(1)-1)%len(opts.ClientRegions)]
	}
	if opts.Max {
		for w := 0; w < opts.Workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for rctx.Err() == nil {
					s.user(rctx, region(), 0, opts.MaxPolls)
				}
			}()
		}
	} else {
		// Arrivals follow the clock, not the ticker: a late tick releases
		// every user due by now, so a loaded client does not lower the rate.
		interval := time.Duration(float64(time.Minute) / opts.Rate)
		tick := time.NewTicker(min(interval, 10*time.Millisecond))
		launched := 0
	arrivals:
		for {
			for due := int(time.Since(start).Minutes()*opts.Rate) + 1; launched < due; launched++ {
				wg.Add(1)
				go func() { defer wg.Done(); s.user(rctx, region(), opts.PollEvery, 0) }()
			}
			select {
			case <-rctx.Done():
				break arrivals
			case <-tick.C:
			}
		}
		tick.Stop()
	}
	<-rctx.Done()
	elapsed := time.Since(start)
	edge1, redis1 := t.Usage().CPU, redisUsage()
	self1, _ := ReadProc(os.Getpid())
	wg.Wait() // waiting users leave; admitted ones finish their launch

	rep := SurgeReport{Mode: "paced", Elapsed: elapsed, Users: s.users.Load(), Joins: s.joins.Load(), Polls: s.polls.Load(),
		Leaves: s.leaves.Load(), Launches: s.launches.Load(), Errors: s.errs.Load(), FirstErrs: s.firstErrs,
		Join: s.join.Summary(), Poll: s.poll.Summary(), Leave: s.leave.Summary(), Launch: s.launch.Summary(), QueueOps: s.ops.Summary(),
		EdgeCPU: edge1 - edge0, RedisCPU: redis1 - redis0, SelfCPU: self1.CPU - self0.CPU}
	if opts.Max {
		rep.Mode = "max"
	}
	rep.OverAdmits, rep.PeakAdmits = overAdmits(opts.Policy, s.admits)
	for _, ts := range s.admits {
		rep.Admits += int64(len(ts))
	}
	return rep, nil
}

// overAdmits checks admit times (ms) against the token buckets: a bucket of
// burst B refilled at r per ms admits at most B + r x (t_j - t_i) in any
// window [t_i, t_j]. It returns, per bucket, the largest excess in any
// window (floored; 0 when the ceiling held) and the peak count in a 60 s
// window.
func overAdmits(p *admission.Policy, byRegion map[string][]int64) (over, peak map[string]int) {
	over, peak = map[string]int{}, map[string]int{}
	var all []int64
	check := func(name string, b admission.Bucket, ts []int64) {
		slices.Sort(ts)
		over[name], peak[name] = bucketExcess(b, ts), peakWindow(ts, 60_000)
	}
	for reg, ts := range byRegion {
		all = append(all, ts...)
		b, ok := p.WaitingRoom.Regions[reg]
		if !ok {
			b = p.WaitingRoom.Regions[p.WaitingRoom.DefaultRegion]
		}
		check(reg, b, slices.Clone(ts))
	}
	check("global", p.WaitingRoom.Global, all)
	return over, peak
}

// bucketExcess is max over i <= j of (j-i+1) - B - r(t_j - t_i), floored
// at 0, on sorted times: one pass keeping the best (i - r t_i).
func bucketExcess(b admission.Bucket, ts []int64) int {
	rate := b.PerMinute / 60_000 // per ms
	worst, best := math.Inf(-1), math.Inf(1)
	for j, t := range ts {
		best = math.Min(best, float64(j)-rate*float64(t))
		worst = math.Max(worst, float64(j)-rate*float64(t)-best+1-b.Burst)
	}
	if worst <= 0 {
		return 0
	}
	return int(math.Floor(worst + 1e-9))
}

// peakWindow is the largest number of sorted times within any span of w.
func peakWindow(ts []int64, w int64) int {
	peak, i := 0, 0
	for j := range ts {
		for ts[j]-ts[i] >= w {
			i++
		}
		peak = max(peak, j-i+1)
	}
	return peak
}

// StartRedis runs redis-server on a free loopback port without
// persistence and waits until it answers. stop ends it.
func StartRedis(ctx context.Context) (url string, pid int, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", 0, nil, fmt.Errorf("bench: redis-server not on PATH: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return "", 0, nil, err
	}
	p := strconv.Itoa(port)
	cmd := exec.Command(bin, "--port", p, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	cmd.Stdout = io.Discard
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	addr := "127.0.0.1:" + p
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_, _ = c.Write([]byte("PING\r\n"))
			buf := make([]byte, 7)
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			n, _ := io.ReadFull(c, buf)
			c.Close()
			if string(buf[:n]) == "+PONG\r\n" {
				break
			}
		}
		if i == 100 || ctx.Err() != nil {
			stop()
			return "", 0, nil, errors.New("bench: redis-server did not answer")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "redis://" + addr + "/0", cmd.Process.Pid, stop, nil
}

// SurgeCommand is `egbe-bench surge`: it starts redis-server and the edge
// with it, then runs RunSurge and prints the report.
func SurgeCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("surge", flag.ContinueOnError)
	bin := fs.String("edge-bin", "", "egbe-edge binary (started in dev mode with its own redis-server)")
	extra := fs.String("edge-args", "", "extra flags for the edge, space separated")
	taskset := fs.String("edge-taskset", "", "pin the edge to these CPUs (taskset -c)")
	var o SurgeOptions
	fs.Float64Var(&o.Rate, "rate", 3300, "new users per minute (paced mode)")
	fs.DurationVar(&o.Duration, "duration", 30*time.Second, "length of the storm")
	fs.BoolVar(&o.Max, "max", false, "as fast as it goes: --workers loops of join, back-to-back polls, launch or leave")
	fs.IntVar(&o.Workers, "workers", 64, "concurrent users with --max")
	fs.IntVar(&o.MaxPolls, "max-polls", 4, "polls before a --max user leaves")
	fs.DurationVar(&o.PollEvery, "poll", time.Second, "poll cadence (paced mode)")
	regions := fs.String("regions", strings.Join(DefaultSurgeRegions, ","), "client regions, round-robin")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *bin == "" {
		return errors.New("surge: --edge-bin is required")
	}
	o.ClientRegions = strings.Split(*regions, ",")
	url, redisPID, stopRedis, err := StartRedis(ctx)
	if err != nil {
		return err
	}
	defer stopRedis()
	t, err := StartEdgeWith(ctx, EdgeOptions{Bin: *bin, Taskset: *taskset,
		Extra: append([]string{"--redis-url", url}, strings.Fields(*extra)...)})
	if err != nil {
		return err
	}
	defer t.Stop()
	rep, err := RunSurge(ctx, t, redisPID, o)
	if err != nil {
		return err
	}
	fmt.Print(rep)
	if n := rep.TotalOverAdmits(); n > 0 {
		return fmt.Errorf("surge: %d over-admissions", n)
	}
	return nil
}
