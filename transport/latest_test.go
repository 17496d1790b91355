package transport

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/internal/testwait"
)

func TestLatestDropsOldest(t *testing.T) {
	for _, depth := range []int{1, 2, 3} {
		t.Run(strconv.Itoa(depth), func(t *testing.T) {
			q := newLatest(depth)
			buf := []byte("x")
			dropped := 0
			for i := range 7 {
				buf = fmt.Appendf(buf[:0], "m%d", i)
				if q.push(buf) {
					dropped++
				}
			}
			buf = append(buf[:0], "overwritten"...) // push copied: the caller may reuse its buffer
			if want := 7 - depth; dropped != want {
				t.Errorf("dropped %d, want %d", dropped, want)
			}
			var out []byte
			for i := 7 - depth; i < 7; i++ {
				var ok bool
				if out, ok = q.pop(out); !ok || string(out) != fmt.Sprintf("m%d", i) {
					t.Fatalf("pop = %q %v, want m%d (oldest first, newest kept)", out, ok, i)
				}
			}
			if _, ok := q.pop(out); ok || q.len() != 0 {
				t.Fatal("queue not empty")
			}
		})
	}
}

func TestLatestDoesNotKeepLargeBuffers(t *testing.T) {
	q := newLatest(1)
	q.push(make([]byte, latestKeep+1))
	q.pop(nil)
	if cap(q.slots[0]) != 0 {
		t.Errorf("slot kept %d bytes", cap(q.slots[0]))
	}
	q.push(make([]byte, 100))
	q.pop(nil)
	if cap(q.slots[0]) == 0 {
		t.Error("a small slot buffer was not kept for reuse")
	}
}

// Datagrams that arrive while the session's reader is busy: the queue
// keeps the newest two, in order, and counts each one it drops.
func TestWebTransportInboundDropsOldest(t *testing.T) {
	leakCheck(t)
	proceed := make(chan struct{})
	got := make(chan string, 8)
	_, m, base, clientTLS := startWT(t, func(ctx context.Context, c Conn) {
		if _, err := c.Read(ctx); err != nil { // the reliable hello
			return
		}
		<-proceed
		for range 2 {
			msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			got <- fmt.Sprintf("%v:%s", msg.Lane, msg.Data)
		}
		<-ctx.Done()
	})
	sess := dialWT(t, base, clientTLS)
	str, err := sess.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := str.Write([]byte{2, 'h', 'i'}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the hello", func() bool { return counter(m, "messages", "webtransport", "reliable", "in") == 1 })
	for i := 1; i <= 5; i++ {
		if err := sess.SendDatagram([]byte("d" + strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Loopback does not lose them; the edge counts each on arrival.
	testwait.For(t, "five datagrams in", func() bool { return counter(m, "messages", "webtransport", "unreliable", "in") == 5 })
	close(proceed)
	for _, want := range []string{"1:d4", "1:d5"} {
		if g := <-got; g != want {
			t.Fatalf("read %s, want %s", g, want)
		}
	}
	if d := counter(m, "drops", "webtransport", dropRecvQueueFull); d != 3 {
		t.Errorf("recv_queue_full drops = %v, want 3", d)
	}
}

// Unreliable messages written faster than the channel drains: each one
// either leaves or is dropped (counted) for a newer one, never queued
// behind stale ones, and the newest always leaves.
func TestWebRTCUnreliableParksLatest(t *testing.T) {
	leakCheck(t)
	cfg := DefaultWebRTCConfig()
	cfg.UnreliableHighWater = 1 // park whenever anything is in flight
	const n = 50
	wrote := make(chan struct{})
	_, m, url := startRTC(t, cfg, func(ctx context.Context, c Conn) {
		if _, err := c.Read(ctx); err != nil {
			return
		}
		for i := 1; i <= n; i++ {
			if err := c.WriteUnreliable([]byte(strconv.Itoa(i))); err != nil {
				t.Errorf("write %d: %v", i, err)
			}
		}
		close(wrote)
		<-ctx.Done()
	})
	cl := newRTCClient(t)
	cl.connect(t, url, "application/sdp")
	if err := cl.rel.Send([]byte("go")); err != nil {
		t.Fatal(err)
	}
	<-wrote
	last := 0
	received := 0
	for last != n {
		select {
		case b := <-cl.unrIn:
			i, _ := strconv.Atoi(string(b))
			if i <= last {
				t.Fatalf("received %d after %d", i, last)
			}
			last = i
			received++
		case <-time.After(10 * time.Second):
			t.Fatalf("the newest message never left (last received %d)", last)
		}
	}
	drops := counter(m, "drops", "webrtc", dropSendQueueFull)
	if drops == 0 {
		t.Error("nothing was parked and superseded: the test did not exercise the queue")
	}
	out := counter(m, "messages", "webrtc", "unreliable", "out")
	if int(out+drops) != n {
		t.Errorf("sent %v + dropped %v, want %d written", out, drops, n)
	}
	t.Logf("%d received, %v dropped for newer ones", received, drops)
}

// As TestWebTransportInboundDropsOldest, on the unreliable data channel.
func TestWebRTCInboundDropsOldest(t *testing.T) {
	leakCheck(t)
	proceed := make(chan struct{})
	got := make(chan string, 8)
	_, m, url := startRTC(t, DefaultWebRTCConfig(), func(ctx context.Context, c Conn) {
		if _, err := c.Read(ctx); err != nil { // the reliable hello
			return
		}
		<-proceed
		for range 2 {
			msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			got <- fmt.Sprintf("%v:%s", msg.Lane, msg.Data)
		}
		<-ctx.Done()
	})
	cl := newRTCClient(t)
	cl.connect(t, url, "application/sdp")
	if err := cl.rel.Send([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the hello", func() bool { return counter(m, "messages", "webrtc", "reliable", "in") == 1 })
	for i := 1; i <= 5; i++ {
		if err := cl.unrel.Send([]byte("d" + strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, "five messages in", func() bool { return counter(m, "messages", "webrtc", "unreliable", "in") == 5 })
	close(proceed)
	for _, want := range []string{"1:d4", "1:d5"} {
		if g := <-got; g != want {
			t.Fatalf("read %s, want %s", g, want)
		}
	}
	if d := counter(m, "drops", "webrtc", dropRecvQueueFull); d != 3 {
		t.Errorf("recv_queue_full drops = %v, want 3", d)
	}
}
