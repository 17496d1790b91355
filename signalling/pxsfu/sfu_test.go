package pxsfu

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/oshun/egbe-edge/internal/epicplayer"
	"github.com/oshun/egbe-edge/internal/pxmux"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/signalling/streamer"
)

func itoa(i int) string { return strconv.Itoa(i) }

func decodeUI(msg []byte) (string, error) { return pxmux.DecodeString(pxmux.UIInteraction, msg) }

// TestSimulcastLayersAndInput: the synthetic streamer sends three RID
// layers (64, 128 and 256 pixels wide) through the edge's SFU port to the
// Go SFU; three players ask for the highest. One asks for the lowest and
// gets it while the others keep theirs; each player's input reaches the
// streamer tagged with its own id and the echo comes back to it alone.
// Both data-channel modes.
func TestSimulcastLayersAndInput(t *testing.T) {
	for _, mode := range []struct {
		name      string
		multiplex bool
		ssrc      bool
	}{{"per-player channels", false, false}, {"multiplexed", true, false}, {"ssrc simulcast", false, true}} {
		t.Run(mode.name, func(t *testing.T) {
			s := newStack(t, nil)
			s.startStreamer(func(c *streamer.Config) { c.Multiplex, c.SimulcastSSRC = mode.multiplex, mode.ssrc })
			ps := []*epicplayer.Player{s.player(2), s.player(2), s.player(2)}
			for _, p := range ps {
				testwait.Within(t, failsafe, "offer", func() bool { ok, _, _ := p.Offered(); return ok })
				if _, sfu, sm := p.Offered(); !sfu || sm != "L1T1" {
					t.Fatalf("offer sfu=%v scalabilityMode=%q", sfu, sm)
				}
				waitSize(t, p, 256)
			}
			if got := len(s.sfu.up.video); got != 3 {
				t.Fatalf("%d layers", got)
			}
			// One player goes to the lowest layer; the others keep the highest.
			if err := ps[0].SetLayer(0); err != nil {
				t.Fatal(err)
			}
			waitSize(t, ps[0], 64)
			for _, p := range ps[1:] {
				waitSize(t, p, 256)
			}
			if err := ps[1].SetLayer(1); err != nil {
				t.Fatal(err)
			}
			waitSize(t, ps[1], 128)
			waitSize(t, ps[0], 64)
			waitSize(t, ps[2], 256)

			// Input: each player's text reaches the streamer under its own
			// id; the echo reaches that player only.
			ids := s.sfu.Players()
			slices.Sort(ids)
			if len(ids) != 3 {
				t.Fatalf("SFU players %v", ids)
			}
			seen := map[string]bool{}
			for i, p := range ps {
				text := fmt.Sprintf(`"input from player %d"`, i)
				testwait.Within(t, failsafe, "data channel open", p.ChannelsOpen)
				testwait.Within(t, failsafe, "echo of "+text, func() bool {
					_ = p.SendInput(text) // again until it arrives: the streamer's channel may open after ours
					time.Sleep(20 * time.Millisecond)
					return p.HasResponse(text)
				})
				var pid string
				for _, id := range ids {
					if s.inputFrom(id, text) {
						pid = id
					}
				}
				if pid == "" || seen[pid] {
					t.Fatalf("input %q reached the streamer as player %q (ids %v)", text, pid, ids)
				}
				seen[pid] = true
				if !p.HasResponse("echo " + pid + " " + text) {
					t.Fatalf("echo %v, want one for %s", p.Responses(), pid)
				}
				for j, q := range ps {
					if j != i && q.HasResponse(text) {
						t.Fatalf("player %d got player %d's echo", j, i)
					}
				}
			}
			// Three players joining and two switching cost the streamer a
			// handful of key-frame requests at most.
			if sent := testutil.ToFloat64(s.sfu.met.keySent); sent > 6 {
				t.Errorf("%v key-frame requests sent upstream", sent)
			}
		})
	}
}

// TestStreamerLeavesAndReturns: section 6 against the edge's broker. The
// streamer leaves: the SFU's players are closed, the SFU stops streaming
// (unlisted), and resubscribes when the streamer returns.
func TestStreamerLeavesAndReturns(t *testing.T) {
	s := newStack(t, nil)
	s.startStreamer(nil)
	p := s.player(2)
	waitSize(t, p, 256)

	s.stopStreamerNow()
	select {
	case <-p.Done(): // the broker closes the SFU's players
	case <-time.After(failsafe):
		t.Fatal("player of the SFU not closed when the streamer left")
	}
	testwait.Within(t, failsafe, "SFU unlisted", func() bool { return !s.listed("SFU") })
	testwait.Within(t, failsafe, "SFU players dropped", func() bool { return len(s.sfu.Players()) == 0 })

	s.startStreamer(nil)
	q := s.player(2) // waits until the SFU is listed again (startStreaming)
	waitSize(t, q, 256)
	r := s.player(1)
	waitSize(t, r, 128)
}
