package transport

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/quic-go/webtransport-go"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/wsframe"
)

// The per-message path allocates nothing in this package: WebSocket not at
// all (testing.AllocsPerRun == 0, client included), WebTransport and WebRTC
// nothing of their own, with what quic-go and pion allocate attributed by
// the allocating frame and logged.

// clientFrame is a masked client frame carrying payload.
func clientFrame(op byte, payload []byte) []byte {
	key := [4]byte{0x11, 0x22, 0x33, 0x44}
	b := []byte{wsframe.Fin | op}
	switch n := len(payload); {
	case n <= 125:
		b = append(b, wsframe.MaskBit|byte(n))
	case n <= 0xFFFF:
		b = append(b, wsframe.MaskBit|126, byte(n>>8), byte(n))
	default:
		b = append(b, wsframe.MaskBit|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	b = append(b, key[:]...)
	start := len(b)
	b = append(b, payload...)
	wsframe.Unmask(key, 0, b[start:])
	return b
}

// serverConn starts a transport Handler that hands its Conn to the test
// and holds it until the test ends.
func serverConn(t *testing.T) (Handler, func() Conn) {
	conns := make(chan Conn, 1)
	h := func(ctx context.Context, c Conn) {
		conns <- c
		<-ctx.Done()
	}
	return h, func() Conn {
		select {
		case c := <-conns:
			return c
		case <-time.After(15 * time.Second):
			t.Fatal("no connection reached the Handler")
			return nil
		}
	}
}

func TestWebSocketZeroAllocs(t *testing.T) {
	leakCheck(t)
	h, accepted := serverConn(t)
	_, _, url := startWS(t, DefaultWebSocketConfig(), h)
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	nc := ws.NetConn() // the client reads and writes raw frames: it allocates nothing either
	c := accepted()
	ctx := context.Background()

	drained := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, nc); close(drained) }()
	defer func() { ws.Close(); <-drained }()
	for _, size := range []int{64, 1500} {
		msg := make([]byte, size)
		t.Run(fmt.Sprintf("write 8 + flush %dB", size), func(t *testing.T) {
			if a := testing.AllocsPerRun(200, func() {
				for range 8 {
					if err := c.WriteReliable(ctx, msg); err != nil {
						t.Fatal(err)
					}
				}
				if err := c.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}); a != 0 {
				t.Errorf("%v allocations per batch", a)
			}
		})
	}
	for _, size := range []int{64, 3000} { // in place, and assembled
		frame := clientFrame(wsframe.OpBinary, make([]byte, size))
		t.Run(fmt.Sprintf("read %dB", size), func(t *testing.T) {
			if a := testing.AllocsPerRun(200, func() {
				if _, err := nc.Write(frame); err != nil {
					t.Fatal(err)
				}
				m, err := c.Read(ctx)
				if err != nil || len(m.Data) != size {
					t.Fatalf("read %d bytes, %v", len(m.Data), err)
				}
			}); a != 0 {
				t.Errorf("%v allocations per read", a)
			}
		})
	}
	t.Run("read fragmented", func(t *testing.T) {
		var frames []byte
		frames = append(frames, clientFrame(wsframe.OpBinary, make([]byte, 700))...)
		frames[0] &^= wsframe.Fin
		frames = append(frames, clientFrame(wsframe.OpPing, []byte("p"))...)
		frames = append(frames, clientFrame(wsframe.OpContinuation, make([]byte, 700))...)
		if a := testing.AllocsPerRun(200, func() {
			if _, err := nc.Write(frames); err != nil {
				t.Fatal(err)
			}
			m, err := c.Read(ctx)
			if err != nil || len(m.Data) != 1400 {
				t.Fatalf("read %d bytes, %v", len(m.Data), err)
			}
		}); a != 0 {
			t.Errorf("%v allocations per read", a)
		}
	})
}

// allocRuns is how many runs allocSites profiles.
const allocRuns = 200

// allocSites runs f allocRuns times with every allocation profiled and
// returns the allocations (in total) by owner: "transport" (this package's code, tests
// excluded), "test", or the module of the library frame that allocated.
// An allocation's owner is its innermost frame outside the standard
// library, so a make in slices.Grow called from here counts as ours.
func allocSites(t *testing.T, f func()) map[string]int64 {
	t.Helper()
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	for range 10 {
		f() // warm up: buffers reach their working size
	}
	before := memProfile()
	for range allocRuns {
		f()
	}
	after := memProfile()
	out := map[string]int64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[allocOwner(k)] += d
		}
	}
	return out
}

// memProfile is the cumulative allocation count per stack.
func memProfile() map[string]int64 {
	// The profile is published at the end of a GC cycle: two make it
	// current.
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+50)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	m := make(map[string]int64, len(recs))
	for _, r := range recs {
		m[fmt.Sprint(r.Stack())] += r.AllocObjects
	}
	return m
}

func allocOwner(stack string) string {
	var pcs []uintptr
	for _, f := range strings.Fields(strings.Trim(stack, "[]")) {
		var pc uintptr
		_, _ = fmt.Sscan(f, &pc)
		pcs = append(pcs, pc)
	}
	frames := runtime.CallersFrames(pcs)
	for {
		fr, more := frames.Next()
		fn := fr.Function
		first, _, slash := strings.Cut(fn, "/")
		switch {
		case strings.HasSuffix(fr.File, "_test.go"):
			return "test"
		case strings.HasPrefix(fn, "github.com/oshun/egbe-edge/transport."):
			return "transport: " + strings.TrimPrefix(fn, "github.com/oshun/egbe-edge/transport.")
		case slash && strings.Contains(first, "."):
			// A module: owner/name of its path.
			parts := strings.SplitN(fn, "/", 4)
			if len(parts) >= 3 {
				name, _, _ := strings.Cut(parts[2], ".")
				return parts[0] + "/" + parts[1] + "/" + name
			}
			return fn
		}
		if !more {
			return "runtime/std"
		}
	}
}

// oneTime bounds the allocations this package may make in all the runs
// together: a connection allocates its latest-wins queue slots and scratch
// buffers on first use (an idle connection holds none), and a lane first
// used inside the measured runs grows them there, once. Anything per
// message would count allocRuns or more.
const oneTime = 6

// checkOwnRun profiles f's allocations (allocSites), fails if this package
// allocated per op, and logs what the libraries allocated per op.
func checkOwnRun(t *testing.T, what string, f func()) {
	t.Helper()
	sites := allocSites(t, f)
	var lib []string
	var own int64
	for k, v := range sites {
		switch {
		case strings.HasPrefix(k, "transport: "):
			own += v
			t.Logf("%s: %s allocated %d times in %d runs", what, k, v, allocRuns)
		case k != "test":
			lib = append(lib, fmt.Sprintf("%s %.2f", k, float64(v)/allocRuns))
		}
	}
	if own > oneTime {
		t.Errorf("%s: this package allocated %d times in %d runs", what, own, allocRuns)
	}
	slices.Sort(lib)
	t.Logf("%s: library allocations per op (client side included): %s", what, strings.Join(lib, ", "))
}

func TestWebTransportOwnAllocs(t *testing.T) {
	leakCheck(t)
	h, accepted := serverConn(t)
	_, _, base, clientTLS := startWT(t, h)
	sess := dialWT(t, base, clientTLS)
	str, err := sess.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := str.Write(codec.AppendFrame(nil, []byte("hi"))); err != nil {
		t.Fatal(err)
	}
	c := accepted()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if m, err := c.Read(ctx); err != nil || string(m.Data) != "hi" {
		t.Fatalf("first read %q %v", m.Data, err)
	}
	// The client drains everything the edge sends.
	go func() { _, _ = io.Copy(io.Discard, bufio.NewReader(str)) }()
	go func() {
		for {
			if _, err := sess.ReceiveDatagram(ctx); err != nil {
				return
			}
		}
	}()

	msg := make([]byte, 200)
	checkOwnRun(t, "write 8 + flush", func() {
		for range 8 {
			if err := c.WriteReliable(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	})
	for _, size := range []int{64, 3000} {
		frame := codec.AppendFrame(nil, make([]byte, size))
		checkOwnRun(t, fmt.Sprintf("read stream %dB", size), func() {
			if _, err := str.Write(frame); err != nil {
				t.Fatal(err)
			}
			if m, err := c.Read(ctx); err != nil || len(m.Data) != size {
				t.Fatalf("read %d bytes, %v", len(m.Data), err)
			}
		})
	}
	checkOwnRun(t, "write datagram", func() {
		if err := c.WriteUnreliable(msg); err != nil {
			t.Fatal(err)
		}
	})
	// Datagrams may be lost, so the client sends them steadily and each
	// run reads whichever arrives.
	var sent atomic.Int64
	go func() {
		for ctx.Err() == nil {
			if sess.SendDatagram(msg) == nil {
				sent.Add(1)
			}
			time.Sleep(200 * time.Microsecond) // pacing, not synchronisation
		}
	}()
	checkOwnRun(t, "read datagram", func() {
		if m, err := c.Read(ctx); err != nil || m.Lane != Unreliable {
			t.Fatalf("read %v %v", m.Lane, err)
		}
	})
	cancel()
	_ = sess.CloseWithError(0, "")
	var _ *webtransport.Session = sess
}

func TestWebRTCOwnAllocs(t *testing.T) {
	leakCheck(t)
	h, accepted := serverConn(t)
	_, _, url := startRTC(t, DefaultWebRTCConfig(), h)
	cl := newRTCClient(t)
	cl.connect(t, url, "application/sdp")
	c := accepted()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The client drains what the edge sends.
	go func() {
		for {
			select {
			case <-cl.relIn:
			case <-ctx.Done():
				return
			}
		}
	}()
	msg := make([]byte, 200)
	checkOwnRun(t, "write 8 + flush", func() {
		for range 8 {
			if err := c.WriteReliable(ctx, msg); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	})
	checkOwnRun(t, "write unreliable", func() {
		if err := c.WriteUnreliable(msg); err != nil {
			t.Fatal(err)
		}
	})
	for _, size := range []int{64, 1500} {
		in := make([]byte, size)
		checkOwnRun(t, fmt.Sprintf("read reliable %dB", size), func() {
			if err := cl.rel.Send(in); err != nil {
				t.Fatal(err)
			}
			if m, err := c.Read(ctx); err != nil || len(m.Data) != size {
				t.Fatalf("read %d bytes, %v", len(m.Data), err)
			}
		})
	}
	go func() {
		for ctx.Err() == nil {
			_ = cl.unrel.Send(msg)
			time.Sleep(200 * time.Microsecond) // pacing, not synchronisation
		}
	}()
	checkOwnRun(t, "read unreliable", func() {
		if m, err := c.Read(ctx); err != nil || m.Lane != Unreliable {
			t.Fatalf("read %v %v", m.Lane, err)
		}
	})
}
