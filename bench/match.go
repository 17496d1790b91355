package bench

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/oshun/egbe-edge/admission"
	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/signalling/matchmaker"
)

// MatchSplit is how the match scenario spreads 1,000 streamers over the
// seven GA POPs (roughly by capacity), and matchRegions the client
// regions whose requests land on each POP, weighted the same way.
var MatchSplit = map[string]int{
	"us-east-1": 300, "us-west-2": 200, "eu-west-1": 200, "ap-northeast-1": 80,
	"ap-south-1": 80, "ap-southeast-2": 70, "sa-east-1": 70,
}

var matchPOPs = []string{"us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1", "ap-south-1", "ap-southeast-2", "sa-east-1"}

// matchRegions repeats each region in proportion to its home POP's share.
var matchRegions = func() []string {
	home := map[string]string{"us-east-1": "us-east", "us-west-2": "us-west", "eu-west-1": "gb", "ap-northeast-1": "jp",
		"ap-south-1": "in", "ap-southeast-2": "au", "sa-east-1": "br"}
	var out []string
	for _, pop := range matchPOPs {
		for range MatchSplit[pop] / 10 {
			out = append(out, home[pop])
		}
	}
	// Interleave so concurrent workers do not all hit one POP.
	mixed := make([]string, len(out))
	for i := range out {
		mixed[i] = out[(i*37)%len(out)]
	}
	return mixed
}()

// MatchOptions shape the match scenario.
type MatchOptions struct {
	Streamers int // registered per round, spread by MatchSplit
	Decisions int // target successful decisions over HTTP (in rounds)
	Workers   int // concurrent HTTP clients
	// InProcess, when > 0, also runs this many decisions in this process
	// against an in-memory fleet (the decision logic alone).
	InProcess int
}

// MatchReport is what the match scenario measures.
type MatchReport struct {
	Streamers, Rounds        int
	Decisions, Refused, Errs int
	FirstErrs                []string
	Elapsed                  time.Duration // match windows only
	EdgeCPU                  time.Duration // match windows only
	ClientCPU                time.Duration
	Latency                  Summary

	InProcDecisions int
	InProcCPU       time.Duration
	InProcElapsed   time.Duration
}

func (r MatchReport) String() string {
	var b strings.Builder
	if r.Decisions+r.Refused > 0 {
		fmt.Fprintf(&b, "match/http streamers=%d rounds=%d decisions=%d refused=%d errors=%d\n", r.Streamers, r.Rounds, r.Decisions, r.Refused, r.Errs)
		fmt.Fprintf(&b, "  latency   %s\n", r.Latency)
		fmt.Fprintf(&b, "  rate      %.0f decisions/s wall\n", float64(r.Decisions)/r.Elapsed.Seconds())
		if r.Decisions > 0 && r.EdgeCPU > 0 {
			per := r.EdgeCPU / time.Duration(r.Decisions)
			fmt.Fprintf(&b, "  edge cpu  %v = %v per decision = %.0f decisions per edge CPU-second (target 20,000/s/core; includes HTTP)\n",
				r.EdgeCPU.Round(time.Millisecond), per.Round(100*time.Nanosecond), float64(r.Decisions)/r.EdgeCPU.Seconds())
			fmt.Fprintf(&b, "  client cpu %v per decision\n", (r.ClientCPU / time.Duration(r.Decisions)).Round(100*time.Nanosecond))
		}
		for _, e := range r.FirstErrs {
			fmt.Fprintf(&b, "  error: %s\n", e)
		}
	}
	if r.InProcDecisions > 0 {
		fmt.Fprintf(&b, "match/in-process streamers=%d decisions=%d (1 goroutine, in-memory fleet, default config)\n", r.Streamers, r.InProcDecisions)
		fmt.Fprintf(&b, "  cpu       %v = %v per decision = %.0f decisions per CPU-second (wall %.0f/s)\n",
			r.InProcCPU.Round(time.Millisecond), (r.InProcCPU / time.Duration(r.InProcDecisions)).Round(100*time.Nanosecond),
			float64(r.InProcDecisions)/r.InProcCPU.Seconds(), float64(r.InProcDecisions)/r.InProcElapsed.Seconds())
	}
	return b.String()
}

// RunMatch runs the match scenario over HTTP against t (when t is not
// nil) and, with opts.InProcess, in this process.
func RunMatch(ctx context.Context, t *Target, opts MatchOptions) (MatchReport, error) {
	rep := MatchReport{Streamers: opts.Streamers}
	if opts.InProcess > 0 {
		if err := runMatchInProcess(ctx, opts, &rep); err != nil {
			return rep, err
		}
	}
	if t != nil && opts.Decisions > 0 {
		if err := runMatchHTTP(ctx, t, opts, &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// splitN scales MatchSplit to n streamers.
func splitN(n int) map[string]int {
	out := make(map[string]int, len(MatchSplit))
	for pop, k := range MatchSplit {
		out[pop] = k * n / 1000
	}
	return out
}

// runMatchHTTP: each round registers opts.Streamers lightweight streamers
// (drop-in mode: ?pop=&codecs= on the streamer URL, then endpointId), runs
// matches until 90 % of them are leased, and disconnects them, which
// drops their leases. Edge CPU is read around the match windows only.
func runMatchHTTP(ctx context.Context, t *Target, opts MatchOptions, rep *MatchReport) error {
	if t.StreamerWS == "" {
		return errors.New("bench: match needs the edge's --streamer-ws")
	}
	workers := max(1, opts.Workers)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}}
	url := t.HTTPBase + matchmaker.PathMatch
	pd := newPxDialer(1024)
	var lat Latencies
	var seq atomic.Int64
	for round := 0; rep.Decisions < opts.Decisions && ctx.Err() == nil; round++ {
		conns, err := registerStreamers(ctx, pd, t, opts.Streamers, round)
		if err != nil {
			return err
		}
		quota := opts.Streamers * 9 / 10
		var ok, refused, errs atomic.Int64
		var errMu sync.Mutex
		var wg sync.WaitGroup
		e0, c0 := t.Usage().CPU, clientCPU()
		start := time.Now()
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ok.Load() < int64(quota) && refused.Load() < int64(quota)/4 && ctx.Err() == nil {
					i := seq.Add(1)
					body := `{"user_id":"bench-` + strconv.FormatInt(i, 10) + `","client_region":"` + matchRegions[int(i)%len(matchRegions)] +
						`","codecs":["H264"],"entitlement":"paid"}`
					t0 := time.Now()
					status, err := postMatch(ctx, client, url, body)
					switch {
					case err != nil:
						errs.Add(1)
						errMu.Lock()
						if len(rep.FirstErrs) < 5 {
							rep.FirstErrs = append(rep.FirstErrs, err.Error())
						}
						errMu.Unlock()
						if errs.Load() > 100 {
							return
						}
					case status == http.StatusOK:
						lat.Add(time.Since(t0))
						ok.Add(1)
					default:
						refused.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		rep.Elapsed += time.Since(start)
		e1, c1 := t.Usage().CPU, clientCPU()
		rep.EdgeCPU += e1 - e0
		rep.ClientCPU += c1 - c0
		rep.Decisions += int(ok.Load())
		rep.Refused += int(refused.Load())
		rep.Errs += int(errs.Load())
		rep.Rounds++
		for _, c := range conns {
			c.Close()
		}
		if errs.Load() > 100 {
			break
		}
		// Let the registry see the streamers go before the next round.
		time.Sleep(500 * time.Millisecond)
	}
	rep.Latency = lat.Summary()
	return nil
}

func postMatch(ctx context.Context, c *http.Client, url, body string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable {
		return resp.StatusCode, fmt.Errorf("match: HTTP %d", resp.StatusCode)
	}
	if resp.StatusCode >= 400 && resp.StatusCode < 500 {
		return resp.StatusCode, fmt.Errorf("match: HTTP %d", resp.StatusCode)
	}
	return resp.StatusCode, nil
}

// registerStreamers connects n streamers spread over the POPs (32 dials at
// a time) and waits for each endpointIdConfirm.
func registerStreamers(ctx context.Context, pd *pxDialer, t *Target, n, round int) ([]*websocket.Conn, error) {
	type job struct{ pop, id string }
	var jobs []job
	for _, pop := range matchPOPs {
		for i := range splitN(n)[pop] {
			jobs = append(jobs, job{pop, fmt.Sprintf("M%dr%s-%dx", round, pop, i)})
		}
	}
	conns := make([]*websocket.Conn, len(jobs))
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				j := jobs[i]
				ws, err := pd.dial(ctx, "ws://"+t.StreamerWS+"/?pop="+j.pop+"&codecs=H264,AV1")
				if err == nil {
					c := &pxConn{ws: ws}
					if _, err = c.expect("identify"); err == nil {
						if _, err = c.expect("config"); err == nil {
							if err = c.write([]byte(`{"type":"endpointId","id":"` + j.id + `"}`)); err == nil {
								_, err = c.expect("endpointIdConfirm")
							}
						}
					}
					if err != nil {
						ws.Close()
					}
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("bench: register streamer %s: %w", j.id, err)
					}
					mu.Unlock()
					continue
				}
				conns[i] = ws
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, firstErr
	}
	return conns, nil
}

// memFleet is an in-memory matchmaker.Fleet for the in-process run.
type memFleet struct {
	mu       sync.Mutex
	all      []matchmaker.Streamer
	bySess   map[string]int
	idleByPO map[string][]int // idle indexes per POP
}

var _ matchmaker.Fleet = (*memFleet)(nil)

func newMemFleet(n int) *memFleet {
	f := &memFleet{bySess: map[string]int{}, idleByPO: map[string][]int{}}
	for _, pop := range matchPOPs {
		for i := range splitN(n)[pop] {
			f.idleByPO[pop] = append(f.idleByPO[pop], len(f.all))
			f.all = append(f.all, matchmaker.Streamer{ID: fmt.Sprintf("%s-%d", pop, i), POP: pop, Codecs: []string{"H264", "AV1"}, State: matchmaker.StateIdle})
		}
	}
	return f
}

func (f *memFleet) Streamers() []matchmaker.Streamer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]matchmaker.Streamer(nil), f.all...)
}

func (f *memFleet) LeaseIdle(pop, codec, sessionID string, until time.Time) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	idle := f.idleByPO[pop]
	if len(idle) == 0 {
		return "", matchmaker.ErrNoIdleStreamer
	}
	i := idle[len(idle)-1]
	f.idleByPO[pop] = idle[:len(idle)-1]
	f.all[i].State = matchmaker.StateLeased
	f.bySess[sessionID] = i
	return f.all[i].ID, nil
}

func (f *memFleet) Release(sessionID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.bySess[sessionID]
	if !ok {
		return
	}
	delete(f.bySess, sessionID)
	f.all[i].State = matchmaker.StateIdle
	f.idleByPO[f.all[i].POP] = append(f.idleByPO[f.all[i].POP], i)
}

// runMatchInProcess: the edge's matchmaker configuration and topology
// over an in-memory fleet, one goroutine, each match released again so
// the pool stays at opts.Streamers (as BenchmarkMatch does).
func runMatchInProcess(ctx context.Context, opts MatchOptions, rep *MatchReport) error {
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	signer, err := auth.New(secret, time.Now)
	if err != nil {
		return err
	}
	fleet := newMemFleet(opts.Streamers)
	m, err := matchmaker.New(matchmaker.Default(), matchmaker.Deps{Fleet: fleet, Signer: signer, Logger: discardLogger()})
	if err != nil {
		return err
	}
	run := func(n int) error {
		for i := range n {
			req := matchmaker.Request{UserID: "bench", Subject: "bench", ClientRegion: matchRegions[i%len(matchRegions)],
				Codecs: []string{"H264"}, Entitlement: matchmaker.EntitlementPaid}
			res, err := m.Match(ctx, req)
			if err != nil {
				return fmt.Errorf("bench: in-process match %d (%s): %w", i, req.ClientRegion, err)
			}
			m.Release(res.SessionID)
		}
		return nil
	}
	if err := run(min(opts.InProcess, 2000)); err != nil { // warm-up
		return err
	}
	c0, start := clientCPU(), time.Now()
	if err := run(opts.InProcess); err != nil {
		return err
	}
	rep.InProcElapsed = time.Since(start)
	rep.InProcCPU = clientCPU() - c0
	rep.InProcDecisions = opts.InProcess
	return nil
}

// MatchCommand is `egbe-bench match`.
func MatchCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("match", flag.ContinueOnError)
	var ef pxEdgeFlags
	ef.register(fs)
	var opts MatchOptions
	fs.IntVar(&opts.Streamers, "streamers", 1000, "streamers registered (spread over the 7 GA POPs)")
	fs.IntVar(&opts.Decisions, "decisions", 5000, "successful decisions over HTTP (rounds of 90% of --streamers; 0: skip)")
	fs.IntVar(&opts.Workers, "workers", 16, "concurrent HTTP clients")
	fs.IntVar(&opts.InProcess, "in-process", 200000, "also run this many decisions in this process (0: skip)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var t *Target
	if opts.Decisions > 0 {
		pinHint(os.Stderr, "match", ef.taskset)
		if ef.bin != "" && !strings.Contains(ef.extra, "--policy") {
			// Every bench request comes from 127.0.0.0/24, which the shipped
			// per-network cap (8 sessions) would refuse after 8 matches:
			// lift that cap; admission still runs on every decision.
			path, err := benchPolicy()
			if err != nil {
				return err
			}
			defer os.Remove(path)
			ef.extra += " --policy " + path
		}
		var err error
		if t, err = ef.target(ctx); err != nil {
			return err
		}
		defer t.Stop()
	}
	rep, err := RunMatch(ctx, t, opts)
	fmt.Print(rep)
	return err
}

// benchPolicy writes the shipped admission policy with the per-network
// caps lifted to a temporary file.
func benchPolicy() (string, error) {
	p := admission.DefaultPolicy()
	p.Pxstream.NetworkCap = 1 << 20
	p.Pxstream.InstitutionNetworkCap = 1 << 20
	b, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "egbe-bench-policy-*.json")
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return "", err
	}
	return f.Name(), nil
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
