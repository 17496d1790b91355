package signalling

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
)

// TestPeerConnectionOptionsFor: with the hook set, every connection's
// config message carries what the hook built for it, from what its token
// says (players, streamers, SFUs), and the other keys are the hook's to
// keep; without a token (drop-in) it gets the connection's id; a hook
// that gives no JSON object falls back to the static options.
func TestPeerConnectionOptionsFor(t *testing.T) {
	clk := newFakeClock()
	signer := mustSigner(t, secret, clk.Now)
	var mu sync.Mutex
	var seen []Peer
	hook := func(p Peer) json.RawMessage {
		mu.Lock()
		seen = append(seen, p)
		n := len(seen)
		mu.Unlock()
		if p.Subject == "broken" {
			return json.RawMessage(`[1]`)
		}
		return json.RawMessage(fmt.Sprintf(`{ "iceServers": [{"urls":["turn:h:3478"],"username":"%d:%s%s"}], "bundlePolicy": "max-bundle" }`,
			n, p.Subject, p.ID))
	}
	cfg := Default()
	cfg.Auth = AuthToken
	cfg.PeerConnectionOptions = json.RawMessage(`{"iceServers":[{"urls":["stun:static:3478"]}]}`)
	cfg.PeerConnectionOptionsFor = hook
	h := newHarness(t, cfg, Deps{Signer: signer, Now: clk.Now})

	s := h.dialStreamer("S", streamerToken(t, signer, "ue-1", "eu-west-1"))
	s.expect("identify")
	s.expectRaw(`{"type":"config","peerConnectionOptions":{"iceServers":[{"urls":["turn:h:3478"],"username":"1:ue-1"}],"bundlePolicy":"max-bundle"},"protocolVersion":"1.3.0"}`)
	p := h.dialPlayer("P", sessionToken(t, signer, "s1", "ue-1"))
	p.expectRaw(`{"type":"config","peerConnectionOptions":{"iceServers":[{"urls":["turn:h:3478"],"username":"2:user-s1Player0"}],"bundlePolicy":"max-bundle"},"protocolVersion":"1.3.0"}`)
	sfuTok, err := signer.IssueSFU(auth.SFU{SFUID: "sfu-1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f := h.dialSFU("F", "/?token="+url.QueryEscape(sfuTok))
	f.expect("identify")
	f.expectRaw(`{"type":"config","peerConnectionOptions":{"iceServers":[{"urls":["turn:h:3478"],"username":"3:sfu-1Player1"}],"bundlePolicy":"max-bundle"},"protocolVersion":"1.3.0"}`)
	brokenTok, err := signer.IssueStreamer(auth.Streamer{StreamerID: "broken"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b := h.dialStreamer("B", "/?token="+url.QueryEscape(brokenTok))
	b.expect("identify")
	b.expectRaw(`{"type":"config","peerConnectionOptions":{"iceServers":[{"urls":["stun:static:3478"]}]},"protocolVersion":"1.3.0"}`)

	mu.Lock()
	got := append([]Peer(nil), seen...)
	mu.Unlock()
	want := []struct {
		role, subject, id string
		ttl               time.Duration
	}{{RoleStreamer, "ue-1", "", time.Hour}, {RolePlayer, "user-s1", "Player0", 2 * time.Minute}, {RoleSFU, "sfu-1", "Player1", time.Hour}, {RoleStreamer, "broken", "", time.Hour}}
	if len(got) != len(want) {
		t.Fatalf("hook saw %+v", got)
	}
	for i, w := range want {
		g := got[i]
		if g.Role != w.role || g.Subject != w.subject || g.ID != w.id || !g.Expires.Equal(clk.Now().Add(w.ttl).Truncate(time.Second)) ||
			!strings.HasPrefix(g.Host, "127.0.0.1:") {
			t.Errorf("peer %d: %+v, want %+v expiring %v", i, g, w, clk.Now().Add(w.ttl))
		}
	}

	// Drop-in: no token, the player's id, no expiry.
	mu.Lock()
	seen = nil
	mu.Unlock()
	dcfg := Default()
	dcfg.PeerConnectionOptionsFor = hook
	d := newHarness(t, dcfg, Deps{})
	d.dialPlayer("P", "/").expectRaw(`{"type":"config","peerConnectionOptions":{"iceServers":[{"urls":["turn:h:3478"],"username":"1:Player0"}],"bundlePolicy":"max-bundle"},"protocolVersion":"1.3.0"}`)
	ds := d.dialStreamer("S", "/")
	ds.expect("identify")
	ds.expectRaw(`{"type":"config","peerConnectionOptions":{"iceServers":[{"urls":["turn:h:3478"],"username":"2:"}],"bundlePolicy":"max-bundle"},"protocolVersion":"1.3.0"}`)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0].Role != RolePlayer || !seen[0].Expires.IsZero() || seen[1].Role != RoleStreamer || seen[1].Subject != "" {
		t.Errorf("drop-in peers %+v", seen)
	}
}
