// Package redistest runs a real redis-server for tests: on a free loopback
// port, with persistence off, stopped when the test ends; also a three-node
// Redis Cluster (StartCluster) and a master watched by a Sentinel
// (StartSentinel). A missing redis-server fails the test loudly; it is never
// skipped (STYLE.md: real Redis, no mock of something that can run here).
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process. Kill and Restart let fault tests lose
// the data set the way a crash or an empty failover would.
type Server struct {
	tb   testing.TB
	bin  string
	Addr string   // immutable after Start: "127.0.0.1:port" survives Restart
	conf string   // immutable: config file given first ("" = none)
	args []string // immutable: extra arguments after the common ones

	mu      sync.Mutex    // guards cmd and exited
	cmd     *exec.Cmd     // nil while stopped
	exited  chan struct{} // closed once cmd has been reaped
	started bool          // the first launch succeeded: Addr is fixed
}

// Start launches redis-server and returns its address and a stop function
// (also registered with t.Cleanup, so calling it is optional).
func Start(tb testing.TB) (addr string, stop func()) {
	s := StartServer(tb)
	return s.Addr, s.Kill
}

// StartServer is Start returning the Server, for Kill/Restart.
func StartServer(tb testing.TB) *Server {
	tb.Helper()
	s := newServer(tb)
	s.launch()
	tb.Cleanup(s.Kill)
	return s
}

// newServer picks a port; the caller sets conf and args, then launches.
func newServer(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redistest: redis-server not found on PATH (install redis-server; these tests need a real Redis): %v", err)
	}
	port, err := freePort()
	if err != nil {
		tb.Fatalf("redistest: pick a port: %v", err)
	}
	return &Server{tb: tb, bin: bin, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// launch starts redis-server on s.Addr and waits until it answers. The
// port was picked free and handed over, so another process can take it in
// between (tests run packages in parallel): a first launch whose server
// exits, or whose address answers from another process, moves to a fresh
// port; a Restart keeps its address.
func (s *Server) launch() {
	s.tb.Helper()
	for attempt := 1; ; attempt++ {
		err := s.launchOnce()
		if err == nil {
			s.started = true
			return
		}
		if s.started || attempt == 3 {
			s.tb.Fatalf("redistest: redis-server on %s: %v", s.Addr, err)
		}
		port, perr := freePort()
		if perr != nil {
			s.tb.Fatalf("redistest: pick a port: %v", perr)
		}
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
}

func (s *Server) launchOnce() error {
	_, port, _ := net.SplitHostPort(s.Addr)
	var argv []string
	if s.conf != "" {
		argv = append(argv, s.conf)
	}
	argv = append(argv, "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	cmd := exec.Command(s.bin, append(argv, s.args...)...)
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("redistest: start redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pid, err := serverPID(s.Addr)
		switch {
		case err == nil && pid == cmd.Process.Pid:
			return nil
		case err == nil:
			s.Kill()
			return fmt.Errorf("another redis-server (pid %d) answers on the port", pid)
		case time.Now().After(deadline):
			s.Kill()
			return fmt.Errorf("never answered: %w", err)
		}
		select {
		case <-exited:
			s.Kill()
			return fmt.Errorf("exited before answering (port taken?): %w", err)
		case <-time.After(10 * time.Millisecond): // polling a condition, not waiting for sync
		}
	}
}

// serverPID asks the server at addr for its process id (INFO server).
func serverPID(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(head, "$") {
		return 0, fmt.Errorf("unexpected reply %q", head)
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || n < 0 || n > 64<<10 {
		return 0, fmt.Errorf("unexpected reply %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no process_id in INFO server")
}

// Kill stops the server (SIGKILL: no shutdown save) and waits for it.
// Safe to call more than once.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Restart kills the server and starts a fresh, empty one on the same
// address: what a crash without persistence or an empty failover looks
// like to clients.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	s.launch()
}

// Freeze stops the server (SIGSTOP) without closing its sockets: clients
// connect and write but get no answer, as with a hung or partitioned
// Redis. Thaw resumes it; Kill works on a frozen server too.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.tb.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		s.tb.Fatalf("redistest: %v to a stopped server", sig)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: %v: %v", sig, err)
	}
}
