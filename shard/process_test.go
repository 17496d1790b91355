package shard

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/shard/shardsim"
)

// childShardEnv makes the test binary run as a reference shard process
// (see TestMain), so a test can kill a shard with SIGKILL: no QUIC
// CONNECTION_CLOSE, only silence.
const childShardEnv = "EGBE_TEST_CHILD_SHARD"

func runChildShard(addr string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	s, err := shardsim.Start(ctx, shardsim.Config{Listen: addr, ShardID: "proc", Instances: []string{"far-isle"}, Agents: 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ADDR", s.Addr())
	<-ctx.Done()
	_ = s.Close()
	return 0
}

// startChildShard runs a shard process on addr and returns its address.
func startChildShard(t *testing.T, addr string) (*exec.Cmd, string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childShardEnv+"="+addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ADDR ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child shard: %q %v", line, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, strings.TrimSpace(strings.TrimPrefix(line, "ADDR "))
}

// TestShardProcessKilled kills a shard process outright (SIGKILL): its
// sessions get shard_unavailable with a resume token once heartbeats stop,
// another shard's session is untouched, and when the process comes back
// the link reconnects and the session resumes.
func TestShardProcessKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	cmd, addr := startChildShard(t, "127.0.0.1:0")
	e := newTestEnv(t, func(c *Config) {
		c.Shards["proc"] = addr
		c.Instances["far-isle"] = "proc"
		c.HeartbeatInterval, c.HeartbeatTimeout = 100*time.Millisecond, 500*time.Millisecond
		c.ReconnectMin, c.ReconnectMax = 20*time.Millisecond, 200*time.Millisecond
	}, shardSpec{id: "local", instances: []string{"orun-grove"}, agents: 10})
	testwait.For(t, "process link up", func() bool { return e.g.LinkUp("proc") })

	victim := e.serve("webtransport", true)
	vh := victim.handshake(e.hello("ada", "far-isle"))
	bystander := e.serve("websocket", false)
	bystander.handshake(e.hello("bea", "orun-grove"))

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	got, _ := victim.expectError()
	if codec.Code(got.Code) != codec.CodeShardUnavailable || got.ResumeToken == "" {
		t.Fatalf("got %+v", got)
	}
	t.Logf("killed shard process detected by its sessions in %s (heartbeat timeout 500ms)", time.Since(start))

	bystander.send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Ping{Ping: &codec.Ping{ClientTimeMs: 1}}})
	bystander.until("pong", func(env *codec.ServerEnvelope) bool { return env.GetPong() != nil })

	startChildShard(t, addr)
	testwait.For(t, "link back", func() bool { return e.g.LinkUp("proc") })
	c := e.serve("webrtc", true)
	h := e.hello("ada", "")
	h.ResumeToken = got.ResumeToken
	if rh := c.handshake(h); rh.SessionId != vh.SessionId || rh.ShardId != "proc" {
		t.Fatalf("resume: %+v", rh)
	}
}
