package bench

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Target is an edge under load: its URLs and, when known, its pid (for CPU
// and RSS).
type Target struct {
	HTTPBase  string // http://127.0.0.1:PORT
	H3Base    string // https://127.0.0.1:PORT
	AdminBase string
	// StreamerWS and PlayerWS are the Epic streamer and player listeners
	// (host:port); empty when attached to an edge without them.
	StreamerWS, PlayerWS string
	// SFUWS is the Epic SFU listener (--sfu-ws), when the edge has one.
	SFUWS    string
	PID      int
	CertHash [32]byte

	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has been reaped (started edges only)
	log    *edgeLogTail  // the started edge's stderr, its last bytes
}

// freePort asks the kernel for a free TCP port that is also free on UDP.
func freePort() (int, error) {
	for i := 0; i < 16; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		ln.Close()
		if err == nil {
			pc.Close()
			return port, nil
		}
	}
	return 0, errors.New("bench: no free port")
}

// StartEdge runs the edge binary at bin in dev mode on free loopback ports,
// with extra flags, and waits until it is ready.
func StartEdge(ctx context.Context, bin string, extra ...string) (*Target, error) {
	return StartEdgeWith(ctx, EdgeOptions{Bin: bin, Extra: extra})
}

// EdgeOptions say how StartEdgeWith runs the edge.
type EdgeOptions struct {
	Bin   string
	Extra []string // extra flags
	// Taskset, when set, pins the edge to these CPUs (taskset -c LIST), so
	// the load client can run on the others.
	Taskset string
	// Env is added to this process's environment for the edge (a fleet
	// shares EGBE_JWT_SECRET this way).
	Env []string
}

// StartEdgeWith is StartEdge with options. The edge inherits this
// process's RLIMIT_NOFILE, which RaiseNoFile lifts to the hard limit first
// (Go restores the original soft limit in children unless the program
// set it itself).
func StartEdgeWith(ctx context.Context, o EdgeOptions) (*Target, error) {
	_, _ = RaiseNoFile()
	// The ports are picked free and handed to the edge, so another process
	// can take one in between (tests run packages in parallel): an edge
	// that exits before it is ready is started again on fresh ports.
	var err error
	for range 3 {
		var t *Target
		if t, err = startEdgeOnce(ctx, o); err == nil || !errors.Is(err, errEdgeExited) {
			return t, err
		}
	}
	return nil, err
}

// errEdgeExited: the edge process ended before it was ready.
var errEdgeExited = errors.New("bench: the edge exited before it was ready")

func startEdgeOnce(ctx context.Context, o EdgeOptions) (*Target, error) {
	bin, extra := o.Bin, o.Extra
	ports := make([]int, 7)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	args := append([]string{"--http", addr(ports[0]), "--https", addr(ports[1]), "--ice-udp", addr(ports[2]),
		"--streamer-ws", addr(ports[3]), "--admin", addr(ports[4]), "--player-ws", addr(ports[5]),
		"--turn", "127.0.0.1:0", "--sfu-ws", addr(ports[6])}, extra...)
	if o.Taskset != "" {
		// taskset execs bin, so the pid stays the edge's.
		args = append([]string{"-c", o.Taskset, bin}, args...)
		bin = "taskset"
	}
	cmd := exec.Command(bin, args...)
	if len(o.Env) > 0 {
		cmd.Env = append(os.Environ(), o.Env...)
	}
	cmd.Stdout = io.Discard
	logTail := newEdgeLogTail()
	cmd.Stderr = logTail
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	t := &Target{HTTPBase: "http://" + addr(ports[0]), H3Base: "https://" + addr(ports[1]), AdminBase: "http://" + addr(ports[4]),
		StreamerWS: addr(ports[3]), PlayerWS: addr(ports[5]), SFUWS: addr(ports[6]), PID: cmd.Process.Pid, cmd: cmd, exited: make(chan struct{}), log: logTail}
	go func() { _ = cmd.Wait(); close(t.exited) }()
	if err := t.waitReady(ctx); err != nil {
		t.Stop()
		return nil, fmt.Errorf("%w; the edge's log ends:\n%s", err, logTail)
	}
	return t, t.loadCertHash(ctx)
}

// RaiseNoFile lifts this process's RLIMIT_NOFILE soft limit to its hard
// limit and returns the limit now in force.
func RaiseNoFile() (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	// Always set it: Go raised the soft limit at start-up but would hand
	// children the original one unless the program sets it itself.
	rl.Cur = rl.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, err
	}
	return rl.Cur, nil
}

// Attach uses an edge that is already running.
func Attach(ctx context.Context, httpBase, h3Base, adminBase string, pid int) (*Target, error) {
	t := &Target{HTTPBase: httpBase, H3Base: h3Base, AdminBase: adminBase, PID: pid}
	if err := t.waitReady(ctx); err != nil {
		return nil, err
	}
	return t, t.loadCertHash(ctx)
}

func (t *Target) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(t.AdminBase + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.exited: // nil (never ready) when attached
			return errEdgeExited
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New("bench: edge did not become ready in 30 s")
}

func (t *Target) loadCertHash(ctx context.Context) error {
	resp, err := http.Get(t.HTTPBase + "/v6/realtime/cert-hash")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct{ Value string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err
	}
	b, err := base64.StdEncoding.DecodeString(body.Value)
	if err != nil || len(b) != 32 {
		return fmt.Errorf("bench: bad cert hash %q", body.Value)
	}
	copy(t.CertHash[:], b)
	return nil
}

// Token mints a dev access token for sub.
func (t *Target) Token(sub string) (string, error) {
	body, _ := json.Marshal(map[string]any{"sub": sub, "tenant": "tara-studio", "region": "gb", "entitlement": "free"})
	resp, err := http.Post(t.HTTPBase+"/v6/dev/token", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Token == "" {
		return "", fmt.Errorf("bench: dev token: HTTP %d %v", resp.StatusCode, err)
	}
	return out.Token, nil
}

// Usage reads the target's CPU and RSS (zero without a pid).
func (t *Target) Usage() ProcUsage {
	if t.PID == 0 {
		return ProcUsage{}
	}
	u, _ := ReadProc(t.PID)
	return u
}

// Kill ends a target started by StartEdge with SIGKILL, as a crash would:
// no drain, no goodbye to its clients or to shared state. Stop still
// reaps it.
func (t *Target) Kill() error {
	if t.cmd == nil || t.cmd.Process == nil {
		return errors.New("bench: kill: the edge was not started by this process")
	}
	return t.cmd.Process.Kill()
}

// Stop ends a target started by StartEdge (SIGTERM, then kill).
func (t *Target) Stop() {
	if t.cmd == nil || t.cmd.Process == nil {
		return
	}
	_ = t.cmd.Process.Signal(os.Interrupt)
	select {
	case <-t.exited:
	case <-time.After(15 * time.Second):
		_ = t.cmd.Process.Kill()
		<-t.exited
	}
}

// clientSource is the source address of load client i on transport:
// WebRTC clients each come from a loopback network of their own
// (127.a.b.1, a distinct /24 for every i below 65,024; Linux answers on
// the whole of 127.0.0.0/8), so the edge's per-network limit on pending
// WebRTC handshakes (32 per /24) sees a population of clients, as it
// would in the field, and the bench measures the edge rather than the
// cap. Other transports keep the kernel's choice (127.0.0.1): the
// invalid Addr.
func clientSource(transport string, i int) netip.Addr {
	if transport != "webrtc" || i < 0 {
		return netip.Addr{}
	}
	i %= 254 * 256
	return netip.AddrFrom4([4]byte{127, byte(1 + i/256), byte(i % 256), 1})
}
