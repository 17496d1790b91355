package edge

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/oshun/egbe-edge/internal/egbeclient"
)

// TestWebRTCClientFromAnotherLoopbackNetwork: with every pending WebRTC
// handshake slot of 127.0.0.0/24 taken (offers that never connect), a
// client from that network is refused busy, while a client whose
// egbeclient.Options.LocalIP puts it on another loopback network connects
// and says hello. The load harness spreads its WebRTC clients over
// 127.0.0.0/8 this way, so it measures the edge and not the per-network
// cap.
func TestWebRTCClientFromAnotherLoopbackNetwork(t *testing.T) {
	te := startEdge(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// One offer, posted until the network's slots are full: each answered
	// one is a server peer that waits for ICE that never comes.
	sdp := dataChannelOffer(t)
	busy := false
	for i := 0; i < 64 && !busy; i++ {
		resp, err := http.Post(te.httpURL("/v6/realtime/webrtc"), "application/sdp", strings.NewReader(sdp))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), `"busy"`):
			busy = true
		case resp.StatusCode != http.StatusCreated:
			t.Fatalf("offer %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if !busy {
		t.Fatal("64 pending offers from 127.0.0.1 and none refused busy")
	}
	http.DefaultClient.CloseIdleConnections()

	dial := func(local netip.Addr) (*egbeclient.Conn, error) {
		return egbeclient.Dial(ctx, egbeclient.Options{Kind: "webrtc", HTTPBase: te.httpURL(""), LocalIP: local})
	}
	if c, err := dial(netip.Addr{}); err == nil || !strings.Contains(err.Error(), "busy") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a client from 127.0.0.1 while its network's slots are full: %v, want refused busy", err)
	}
	c, err := dial(netip.MustParseAddr("127.0.77.1"))
	if err != nil {
		t.Fatalf("a client from 127.0.77.1: %v", err)
	}
	defer c.Close()
	if _, err := c.Hello(ctx, helloFor(te.devToken(t, "other-network"))); err != nil {
		t.Fatalf("hello from 127.0.77.1: %v", err)
	}
}

// dataChannelOffer is a complete (gathered) offer of a pion peer with the
// realtime reliable data channel; the peer lives until the test ends.
func dataChannelOffer(t *testing.T) string {
	t.Helper()
	pc, err := webrtc.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	if _, err := pc.CreateDataChannel("egbe-reliable", nil); err != nil {
		t.Fatal(err)
	}
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		t.Fatal(err)
	}
	<-gathered
	return pc.LocalDescription().SDP
}
