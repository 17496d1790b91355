package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterNodes = 3
	clusterSlots = 16384
	// SentinelMaster is the master name StartSentinel's Sentinel monitors.
	SentinelMaster = "egbe-test"
)

// StartCluster runs a Redis Cluster of three masters (no replicas) on free
// loopback ports, each with its own temporary directory for its
// cluster-config-file and persistence off, with all 16384 slots assigned;
// it returns once every node reports cluster_state:ok and knows the other
// two. The seeds are the nodes' "127.0.0.1:port" addresses. Everything
// stops, and the directories go, when the test ends.
func StartCluster(tb testing.TB) (seeds []string) {
	tb.Helper()
	nodes := make([]*Server, clusterNodes)
	bus := make([]int, clusterNodes)
	for i := range nodes {
		dir := tb.TempDir() // before the Kill cleanup: removed after the process stops
		s := newServer(tb)
		p, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: pick a cluster bus port: %v", err)
		}
		bus[i] = p
		s.args = []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(p), "--dir", dir}
		s.launch()
		tb.Cleanup(s.Kill)
		nodes[i] = s
		seeds = append(seeds, s.Addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := make([]*redis.Client, clusterNodes)
	for i, s := range nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr})
		defer clients[i].Close()
	}
	// Each node takes a third of the slots and a distinct config epoch (as
	// redis-cli --cluster create does), then the first meets the others.
	per := clusterSlots / clusterNodes
	for i, c := range clients {
		lo, hi := i*per, (i+1)*per-1
		if i == clusterNodes-1 {
			hi = clusterSlots - 1
		}
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			tb.Fatalf("redistest: cluster node %s: ADDSLOTSRANGE %d %d: %v", nodes[i].Addr, lo, hi, err)
		}
		if err := c.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			tb.Fatalf("redistest: cluster node %s: SET-CONFIG-EPOCH: %v", nodes[i].Addr, err)
		}
	}
	for i := 1; i < clusterNodes; i++ {
		_, port, _ := net.SplitHostPort(nodes[i].Addr)
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", port, bus[i]).Err(); err != nil {
			tb.Fatalf("redistest: CLUSTER MEET %s: %v", nodes[i].Addr, err)
		}
	}
	var last string
	for {
		ready := true
		for i, c := range clients {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				last = fmt.Sprintf("%s: %v", nodes[i].Addr, err)
				ready = false
				break
			}
			f := infoFields(info)
			if f["cluster_state"] != "ok" || f["cluster_known_nodes"] != strconv.Itoa(clusterNodes) ||
				f["cluster_slots_ok"] != strconv.Itoa(clusterSlots) {
				last = fmt.Sprintf("%s: state %s, known nodes %s, slots ok %s", nodes[i].Addr,
					f["cluster_state"], f["cluster_known_nodes"], f["cluster_slots_ok"])
				ready = false
				break
			}
		}
		if ready {
			return seeds
		}
		if ctx.Err() != nil {
			tb.Fatalf("redistest: cluster never became ready: %s", last)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
}

// StartSentinel runs one master redis-server and one Sentinel (redis-server
// --sentinel, with a generated config in a temporary directory) monitoring
// it as SentinelMaster with quorum 1 and a short down-after. It returns once
// the Sentinel reports the master, connected and not down.
func StartSentinel(tb testing.TB) (sentinelAddr, masterName string, master *Server) {
	tb.Helper()
	master = StartServer(tb)
	mhost, mport, _ := net.SplitHostPort(master.Addr)
	dir := tb.TempDir() // before the Kill cleanup: removed after the process stops
	conf := filepath.Join(dir, "sentinel.conf")
	body := strings.Join([]string{
		"sentinel monitor " + SentinelMaster + " " + mhost + " " + mport + " 1",
		"sentinel down-after-milliseconds " + SentinelMaster + " 2000",
		"sentinel failover-timeout " + SentinelMaster + " 10000",
		"dir " + dir,
		"",
	}, "\n")
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		tb.Fatalf("redistest: write sentinel config: %v", err)
	}
	s := newServer(tb)
	s.conf = conf
	s.args = []string{"--sentinel"}
	s.launch()
	tb.Cleanup(s.Kill)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer sc.Close()
	var last string
	for {
		m, err := sc.Master(ctx, SentinelMaster).Result()
		switch {
		case err != nil:
			last = err.Error()
		case m["ip"] != mhost || m["port"] != mport:
			last = fmt.Sprintf("master at %s:%s, want %s", m["ip"], m["port"], master.Addr)
		case m["flags"] != "master" || m["role-reported"] != "master":
			last = fmt.Sprintf("flags %q, role reported %q", m["flags"], m["role-reported"])
		default:
			return s.Addr, SentinelMaster, master
		}
		if ctx.Err() != nil {
			tb.Fatalf("redistest: sentinel on %s never reported master %s: %s", s.Addr, master.Addr, last)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
}

// infoFields splits an INFO-style "key:value" reply.
func infoFields(info string) map[string]string {
	out := make(map[string]string)
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}
