package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"google.golang.org/protobuf/proto"

	"github.com/oshun/egbe-edge/codec"
)

// ServeBaselineWorld runs a bare gorilla WebSocket relay carrying the world
// scenario's traffic: the floor the edge's CPU per delivered update is
// compared against. Each connection's first message (the hello) is
// answered with a ServerHello; then every 1/rate s every connection is
// written one snapshot of entities agents (encoded once per tick, one
// write per connection), and whatever clients send (presence, acks) is
// read and dropped. No projection, no deltas, no shard: only the syscalls
// and framing a relay of the same messages cannot avoid.
func ServeBaselineWorld(ctx context.Context, srv *http.Server, rate float64, entities int) error {
	if rate <= 0 || entities < 0 {
		return errors.New("bench: baseline world needs a rate > 0")
	}
	up := websocket.Upgrader{ReadBufferSize: 1024, WriteBufferSize: 1024, CheckOrigin: func(*http.Request) bool { return true },
		Subprotocols: []string{"egbe.v1"}}
	hello, _ := proto.Marshal(&codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Hello{Hello: &codec.ServerHello{
		SessionId: "baseline", Acceptance: codec.Acceptance_ACCEPTED, ProtocolVersion: codec.ProtocolVersion}}})
	var mu sync.Mutex
	conns := map[*websocket.Conn]struct{}{} // guarded by mu: said hello
	var wg sync.WaitGroup
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		if _, _, err := ws.ReadMessage(); err != nil {
			return
		}
		if err := ws.WriteMessage(websocket.BinaryMessage, hello); err != nil {
			return
		}
		mu.Lock()
		conns[ws] = struct{}{}
		mu.Unlock()
		defer func() {
			mu.Lock()
			delete(conns, ws)
			mu.Unlock()
		}()
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				return
			}
		}
	})
	wg.Go(func() { // the tick: one snapshot, written to every connection
		ents := make([]codec.Entity, entities)
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		var buf []byte
		var list []*websocket.Conn
		for seq := uint64(1); ; seq++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for i := range ents {
				a := float64(seq)/100 + float64(i)
				ents[i] = codec.Entity{ID: uint32(1000 + i), Kind: codec.EntityKind_AGENT, X: int32(40_000 * math.Cos(a)),
					Y: int32(40_000 * math.Sin(a)), HeadingMdeg: int32(seq*1000) % 360_000, Activity: 1}
			}
			buf = codec.AppendSnapshotEnvelope(buf[:0], "baseline", seq, uint64(time.Now().UnixMilli()), ents)
			mu.Lock()
			list = list[:0]
			for c := range conns {
				list = append(list, c)
			}
			mu.Unlock()
			for _, c := range list {
				_ = c.WriteMessage(websocket.BinaryMessage, buf)
			}
		}
	})
	go func() { <-ctx.Done(); srv.Close() }()
	err := srv.ListenAndServe()
	wg.Wait()
	if !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// baselineWorldEntities is how many agents each baseline snapshot holds:
// the window's agent cap, which the edge's clients see filled.
const baselineWorldEntities = codec.GroundVisibleAgentCap

// RunWorldBaseline drives a bare relay (ServeBaselineWorld, run as a child
// process of this binary: `egbe-bench serve-baseline-world`, pinned like
// the edge) with the world scenario's clients: the same lean WebSocket
// clients, presence rate and acks, each receiving one snapshot per tick.
func RunWorldBaseline(ctx context.Context, o WorldOptions) (WorldReport, error) {
	o = o.withDefaults()
	if o.Clients <= 0 || o.Duration <= 0 {
		return WorldReport{}, errors.New("bench: world needs clients and duration > 0")
	}
	rep := WorldReport{Transport: "websocket", Clients: o.Clients, Agents: baselineWorldEntities, Baseline: true}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return rep, err
	}
	addr := ln.Addr().String()
	ln.Close()
	self := o.BenchBin
	if self == "" {
		if self, err = os.Executable(); err != nil {
			return rep, err
		}
	}
	args := []string{"serve-baseline-world", "--listen", addr, "--rate", strconv.Itoa(worldTickHz),
		"--entities", strconv.Itoa(baselineWorldEntities)}
	cmd := exec.Command(self, args...)
	if o.EdgeTaskset != "" {
		cmd = exec.Command("taskset", append([]string{"-c", o.EdgeTaskset, self}, args...)...)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return rep, err
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	up := false
	for range 100 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			up = true
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !up {
		return rep, fmt.Errorf("bench: baseline world server did not listen on %s", addr)
	}
	pid := cmd.Process.Pid
	dial := func(ctx context.Context, i int) (*worldClient, error) {
		dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		c, err := dialLeanWSURL(dctx, "ws://"+addr+"/v6/realtime/websocket", &codec.ClientHello{AccessToken: strings.Repeat("t", baselineTokenLen),
			InstanceId: "baseline", AuthorityKind: codec.AuthorityKind_UE_CLIENT, ProtocolVersion: codec.ProtocolVersion, Capabilities: worldCapabilities})
		if err != nil {
			return nil, err
		}
		return &worldClient{lean: c, instance: "baseline"}, nil
	}
	usage := func() ProcUsage { u, _ := ReadProc(pid); return u }
	err = driveWorld(ctx, o, &rep, dial, usage, func() ProcUsage { return ProcUsage{} }, "")
	return rep, err
}
