package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartRestart(t *testing.T) {
	s := StartServer(t)
	if err := ping(s.Addr); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if err := ping(s.Addr); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := ping(s.Addr); err == nil {
		t.Fatal("still answering after Kill")
	}
}

// TestStartCluster: the three nodes form one cluster with every slot
// served, and a cluster client writes keys that land on different nodes.
func TestStartCluster(t *testing.T) {
	seeds := StartCluster(t)
	if len(seeds) != 3 {
		t.Fatalf("seeds %q", seeds)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds[:1]})
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil || len(shards) != 3 {
		t.Fatalf("shards: %d %v", len(shards), err)
	}
	masters := map[string]bool{}
	for i := range 30 {
		k := fmt.Sprintf("k%d", i)
		if err := c.Set(ctx, k, i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		n, err := c.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		masters[n.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("30 keys landed on %d masters, want 3", len(masters))
	}
}

// TestStartSentinel: a failover client finds the master through the
// Sentinel and reads what was written on the master directly.
func TestStartSentinel(t *testing.T) {
	sentinel, name, master := StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	direct := redis.NewClient(&redis.Options{Addr: master.Addr})
	t.Cleanup(func() { _ = direct.Close() })
	if err := direct.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: name, SentinelAddrs: []string{sentinel}})
	t.Cleanup(func() { _ = fc.Close() })
	if v, err := fc.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("through the sentinel: %q %v", v, err)
	}
}

// TestLaunchPortTaken: a port taken between picking and binding (here by
// another redis-server) moves the new server to a fresh port instead of
// sharing the other one.
func TestLaunchPortTaken(t *testing.T) {
	other := StartServer(t)
	s := newServer(t)
	s.Addr = other.Addr
	s.launch()
	t.Cleanup(s.Kill)
	if s.Addr == other.Addr {
		t.Fatalf("the new server kept the taken address %s", s.Addr)
	}
	pid, err := serverPID(s.Addr)
	if err != nil || pid != s.cmd.Process.Pid {
		t.Fatalf("server at %s: pid %d err %v, want our process %d", s.Addr, pid, err, s.cmd.Process.Pid)
	}
}

// ping sends PING to addr and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}
