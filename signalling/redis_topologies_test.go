package signalling

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/state/redisstate"
)

// TestClusterRedisTopologies: two edges of a fleet on a real three-master
// Redis Cluster, and on a master found through a real Sentinel. The
// registry scripts (upsert, leaseIdle, release, snapshot), the inbox relay,
// the heartbeat and the membership check all run there; on the Cluster a
// script touching a key outside the {px} slot would be refused. Redis
// losing its scripts (SCRIPT FLUSH on every node) is recovered from.
func TestClusterRedisTopologies(t *testing.T) {
	seeds := redistest.StartCluster(t)
	sentinel, master, _ := redistest.StartSentinel(t)
	for _, tc := range []struct{ name, url string }{
		{"cluster", "redis+cluster://" + strings.Join(seeds, ",") + "/?dial_timeout=300ms"},
		{"sentinel", "redis+sentinel://" + sentinel + "/" + master + "?dial_timeout=300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := redisstate.Open(tc.url, redisstate.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			const ttl = 600 * time.Millisecond
			a, clA := edge(t, conn, "edge-a", Default(), Deps{}, ttl)
			b, _ := edge(t, conn, "edge-b", Default(), Deps{}, ttl)

			s := b.streamerUp("S@B", "/?pop=eu-west-1&codecs=H264", "OnB")
			testwait.For(t, "B's streamer in A's fleet view", func() bool { _, ok := a.srv.Registry().Get("OnB"); return ok })

			// A's matchmaker leases B's streamer and lets it go.
			info, err := a.srv.Registry().LeaseIdle("eu-west-1", "h264", "sess-1", time.Now().Add(time.Minute))
			if err != nil || info.ID != "OnB" || info.State != StateLeased {
				t.Fatalf("LeaseIdle from A: %+v %v", info, err)
			}
			if _, err := b.srv.Registry().LeaseIdle("eu-west-1", "h264", "sess-2", time.Now().Add(time.Minute)); !errors.Is(err, ErrNoIdleStreamer) {
				t.Fatalf("second lease from B: %v, want ErrNoIdleStreamer", err)
			}
			if err := a.srv.Registry().Release("sess-1"); err != nil {
				t.Fatal(err)
			}

			// Redis forgets its scripts: the next registration reloads them.
			if err := conn.Client().ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			b.streamerUp("S2@B", "/?pop=eu-west-1&codecs=H264", "OnB2")
			testwait.For(t, "a registration after SCRIPT FLUSH", func() bool { _, ok := a.srv.Registry().Get("OnB2"); return ok })

			// A player on A signals with the streamer on B through the inboxes.
			p := a.playerUp("P@A", "/")
			p.send(`{"type":"subscribe","streamerId":"OnB"}`)
			pid, _ := s.expect("playerConnected")["playerId"].(string)
			s.send(`{"type":"offer","playerId":"` + pid + `","sdp":"v=0\r\n"}`)
			p.expectRaw(`{"type":"offer","sdp":"v=0\r\n"}`)
			p.send(`{"type":"answer","sdp":"v=0\r\n"}`)
			s.expectRaw(`{"type":"answer","sdp":"v=0\r\n","playerId":"` + pid + `"}`)
			if snap := a.srv.Registry().Snapshot(); len(snap) != 2 {
				t.Fatalf("fleet snapshot from A: %+v", snap)
			}

			// The player's edge dies: B sees its membership lapse.
			clA.crash()
			s.expectRaw(`{"type":"playerDisconnected","playerId":"` + pid + `"}`)
		})
	}
}
