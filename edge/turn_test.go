package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pion/turn/v5"

	"github.com/oshun/egbe-edge/internal/coturntest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/turnrelay"
)

// iceServers is iceServersUntil with a lifetime from now (0:
// turnCredentialTTL).
func (e *Edge) iceServers(subject string, lifetime time.Duration, host string) turnrelay.Options {
	if lifetime <= 0 {
		lifetime = turnCredentialTTL
	}
	return e.iceServersUntil(subject, e.cfg.clock()().Add(lifetime), host)
}

// turnAllocate opens a pion/turn client to the server named by a minted
// TURN URL ("turn:host:port?transport=udp|tcp") and allocates a UDP
// relay; everything closes when the test ends.
func turnAllocate(t *testing.T, url, user, pass string) (net.PacketConn, error) {
	t.Helper()
	rest := strings.TrimPrefix(url, "turn:")
	addr, query, _ := strings.Cut(rest, "?")
	var conn net.PacketConn
	if query == "transport=tcp" {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn = turn.NewSTUNConn(c)
	} else {
		c, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		conn = c
	}
	cl, err := turn.NewClient(&turn.ClientConfig{STUNServerAddr: addr, TURNServerAddr: addr, Conn: conn,
		Username: user, Password: pass, RTO: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(); conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	relay, err := cl.AllocateWithContext(ctx)
	if err == nil {
		t.Cleanup(func() { relay.Close() })
	}
	return relay, err
}

// relayEcho has a loopback peer echo one datagram sent through relay and
// reports whether the echo came back.
func relayEcho(t *testing.T, relay net.PacketConn) bool {
	t.Helper()
	p, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	buf := make([]byte, 1500)
	for try := 0; try < 20; try++ {
		if _, err := relay.WriteTo([]byte("ping"), p.LocalAddr()); err != nil {
			return false
		}
		_ = p.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, from, err := p.ReadFromUDP(buf)
		if err != nil {
			continue
		}
		if _, err := p.WriteToUDP(buf[:n], from); err != nil {
			t.Fatal(err)
		}
		_ = relay.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if n, _, err := relay.ReadFrom(buf); err == nil && string(buf[:n]) == "ping" {
			return true
		}
	}
	return false
}

// scrape reads one sample of the edge's /metrics ("name{labels}" as
// exposed), or -1 when absent.
func (te *testEdge) scrape(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get(te.adminURL("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestEdgeTURN: the edge serves TURN on UDP and TCP from start-up; the
// credentials it mints name that server and open it over both transports;
// a relay reaches a loopback peer (dev mode); the allocations show in
// /metrics; and shutdown closes the TURN port.
func TestEdgeTURN(t *testing.T) {
	te := startEdge(t, nil)
	if te.addrs.TURN == "" {
		t.Fatal("no TURN address")
	}
	opts := te.iceServers("alice", time.Hour, "127.0.0.1:8080")
	b, _ := json.Marshal(opts)
	_, port, _ := net.SplitHostPort(te.addrs.TURN)
	if !bytes.HasPrefix(b, []byte(`{"iceServers":[{"urls":["turn:127.0.0.1:`+port+`?transport=udp","turn:127.0.0.1:`+port+`?transport=tcp"],"username":"`)) {
		t.Fatalf("minted %s", b)
	}
	s := opts.ICEServers[0]
	for _, url := range s.URLs {
		relay, err := turnAllocate(t, url, s.Username, s.Credential)
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		if !relayEcho(t, relay) {
			t.Fatalf("%s: no round trip through the relay", url)
		}
	}
	if got := te.scrape(t, `egbe_turn_allocations{transport="udp"}`); got != 1 {
		t.Errorf("udp allocations %v, want 1", got)
	}
	if got := te.scrape(t, `egbe_turn_allocations{transport="tcp"}`); got != 1 {
		t.Errorf("tcp allocations %v, want 1", got)
	}
	testwait.Within(t, 5*time.Second, "relayed bytes counted", func() bool {
		return te.scrape(t, `egbe_turn_relayed_bytes_total{direction="client_to_peer"}`) > 0
	})
	// A tampered credential is refused and counted.
	if _, err := turnAllocate(t, s.URLs[0], s.Username, "AAAA"+s.Credential[4:]); err == nil {
		t.Error("tampered credential allocated")
	}
	if got := te.scrape(t, `egbe_turn_refusals_total{reason="bad_credential"}`); got < 1 {
		t.Errorf("bad_credential refusals %v", got)
	}

	te.stop(t)
	for _, network := range []string{"tcp", "udp"} {
		var err error
		if network == "tcp" {
			var ln net.Listener
			if ln, err = net.Listen("tcp", te.addrs.TURN); err == nil {
				ln.Close()
			}
		} else {
			var pc net.PacketConn
			if pc, err = net.ListenPacket("udp", te.addrs.TURN); err == nil {
				pc.Close()
			}
		}
		if err != nil {
			t.Errorf("TURN %s port still held after shutdown: %v", network, err)
		}
	}
}

// TestEdgeTURNProdRefusesLoopback: in prod mode a relay to a loopback
// peer is refused and counted.
func TestEdgeTURNProdRefusesLoopback(t *testing.T) {
	te := startProdEdge(t, nil) // prod is ready only with a shard to serve
	s := te.iceServers("alice", time.Hour, "127.0.0.1").ICEServers[0]
	relay, err := turnAllocate(t, s.URLs[0], s.Username, s.Credential)
	if err != nil {
		t.Fatal(err)
	}
	if relayEcho(t, relay) {
		t.Fatal("prod relay reached a loopback peer")
	}
	if got := te.scrape(t, `egbe_turn_refusals_total{reason="peer_forbidden"}`); got < 1 {
		t.Errorf("peer_forbidden refusals %v", got)
	}
}

// TestEdgeTURNURL: with --turn-url the edge mints credentials for the
// external servers too; coturn, sharing EGBE_TURN_SECRET, accepts them,
// and so does the embedded server.
func TestEdgeTURNURL(t *testing.T) {
	secret := "shared-by-the-whole-turn-fleet"
	coturn := coturntest.Start(t, []byte(secret))
	te := startEdge(t, func(c *Config) {
		c.TURNSecret = secret
		c.TURNURLs = []string{"turn:" + coturn + "?transport=udp"}
		c.ICEServers = []ICEServer{{URLs: []string{"stun:stun.example.net:3478"}}}
	})
	opts := te.iceServers("bob", 10*time.Minute, "127.0.0.1")
	if len(opts.ICEServers) != 3 || opts.ICEServers[0].URLs[0] != "stun:stun.example.net:3478" ||
		opts.ICEServers[2].URLs[0] != "turn:"+coturn+"?transport=udp" {
		t.Fatalf("ice servers %+v: want the static one, the embedded TURN, then coturn", opts)
	}
	for _, s := range opts.ICEServers[1:] {
		relay, err := turnAllocate(t, s.URLs[0], s.Username, s.Credential)
		if err != nil {
			t.Fatalf("%s refused the edge's credential: %v", s.URLs[0], err)
		}
		if !relayEcho(t, relay) {
			t.Fatalf("%s: no round trip", s.URLs[0])
		}
	}

	// TURN off, --turn-url only: just the external server.
	off := startEdge(t, func(c *Config) { c.TURN = ""; c.TURNSecret = secret; c.TURNURLs = []string{"turn:" + coturn} })
	if off.addrs.TURN != "" {
		t.Errorf("TURN off but listening on %s", off.addrs.TURN)
	}
	o := off.iceServers("carol", 0, "127.0.0.1")
	if len(o.ICEServers) != 1 || o.ICEServers[0].URLs[0] != "turn:"+coturn {
		t.Fatalf("external only: %+v", o)
	}
	exp, subj, err := turnrelay.ParseUsername(o.ICEServers[0].Username)
	if err != nil || subj != "carol" || exp.Before(time.Now().Add(turnCredentialTTL-time.Minute)) {
		t.Errorf("username %q: %v %q %v", o.ICEServers[0].Username, exp, subj, err)
	}
}

// TestOpsTURNPanel: the operator page draws the TURN panels from the
// edge's metrics: live allocations by transport and refusals by reason.
func TestOpsTURNPanel(t *testing.T) {
	te := startEdge(t, nil)
	s := te.iceServers("alice", time.Hour, "127.0.0.1").ICEServers[0]
	if _, err := turnAllocate(t, s.URLs[0], s.Username, s.Credential); err != nil {
		t.Fatal(err)
	}
	if _, err := turnAllocate(t, s.URLs[0], s.Username, "AAAA"+s.Credential[4:]); err == nil {
		t.Fatal("tampered credential allocated")
	}
	dir, err := filepath.Abs(filepath.Join("..", "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var r struct {
		OK     bool `json:"ok"`
		Detail map[string]struct {
			Series int                `json:"series"`
			Last   map[string]float64 `json:"last"`
		} `json:"detail"`
	}
	runNode(t, "ops.mjs", 90*time.Second, &r, "http://"+te.addrs.Admin, filepath.Join(dir, "ops-turn.png"))
	if !r.OK {
		t.Fatalf("operator page: %+v", r)
	}
	if got := r.Detail["turn"].Last["udp"]; got != 1 {
		t.Errorf("TURN panel: udp allocations %v, want 1 (%+v)", got, r.Detail["turn"])
	}
	if _, ok := r.Detail["turnrefusals"].Last["bad_credential"]; !ok || r.Detail["turnrefusals"].Series != 1 {
		t.Errorf("TURN refusals panel: %+v, want one series, bad_credential", r.Detail["turnrefusals"])
	}
	if r.Detail["turnbytes"].Series != 2 {
		t.Errorf("TURN bytes panel: %+v, want both directions", r.Detail["turnbytes"])
	}
}
