package shard

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
)

// discardConn is a ClientConn that drops everything (an unreliable lane
// that always takes the datagram).
type discardConn struct{ done chan struct{} }

func (discardConn) Transport() string    { return "webtransport" }
func (discardConn) JSON() bool           { return false }
func (discardConn) RemoteAddr() net.Addr { return &net.UDPAddr{} }
func (c discardConn) Read(ctx context.Context) ([]byte, bool, error) {
	<-ctx.Done()
	return nil, false, ctx.Err()
}
func (discardConn) WriteReliable(context.Context, []byte) error { return nil }
func (discardConn) Flush(context.Context) error                 { return nil }
func (discardConn) WriteUnreliable([]byte) error                { return nil }
func (discardConn) HasUnreliable() bool                         { return true }
func (discardConn) Close(uint32, string) error                  { return nil }
func (c discardConn) Done() <-chan struct{}                     { return c.done }

// benchWorlds returns n successive ticks of a 500-agent instance.
func benchWorlds(n, agents int) []*codec.World {
	rng := rand.New(rand.NewPCG(1, 2))
	ents := make([]codec.Entity, agents)
	for i := range ents {
		kind := codec.EntityKind_AGENT
		if i%50 == 0 {
			kind = codec.EntityKind_PLAYER
		}
		ents[i] = codec.Entity{ID: uint32(i + 1), Kind: kind, X: rng.Int32N(200_000) - 100_000, Y: rng.Int32N(200_000) - 100_000, Salience: uint32(rng.IntN(100))}
	}
	out := make([]*codec.World, n)
	for k := range out {
		for i := range ents {
			ents[i].X += rng.Int32N(141) - 70
			ents[i].Y += rng.Int32N(141) - 70
		}
		out[k] = &codec.World{InstanceID: "orun-grove", Sequence: uint64(k + 1), ServerTimeMs: uint64(k * 50), Entities: append([]codec.Entity(nil), ents...)}
	}
	return out
}

// BenchmarkFanout measures the edge's per-client cost of one instance
// snapshot: offer (latest-wins slot), projection to the client's window,
// delta against its acknowledged state, budget, encode, send. ns/op is per
// tick for all clients; see the ns/client metric.
func BenchmarkFanout(b *testing.B) {
	signer, _ := auth.New([]byte("0123456789abcdef0123456789abcdef"), nil)
	cfg := DefaultConfig()
	cfg.ReplicationBps = 1 << 40 // measure the path, not the budget's refusals
	g, err := NewGateway(cfg, Deps{Signer: signer})
	if err != nil {
		b.Fatal(err)
	}
	worlds := benchWorlds(16, 500)
	for _, clients := range []int{1, 10, 100, 500} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			sessions := make([]*session, clients)
			for i := range sessions {
				s := newSession(context.Background(), g, discardConn{}, nil, &codec.ClientHello{}, auth.Access{}, codec.Negotiation{Enabled: codec.ServerCapabilities})
				s.win = codec.WindowFor(&codec.PresencePacket{Position: &codec.Vec3{XMm: int32(i*997%180_000 - 90_000), YMm: int32(i*1553%180_000 - 90_000)}}, 0, nil)
				s.buf = make([]byte, 0, 4096)
				s.writerOn.Store(true) // the benchmark is the writer
				sessions[i] = s
			}
			feed := &snapFeed{}
			var scratch codec.World
			b.ReportAllocs()
			b.ResetTimer()
			total := 0
			for n := range b.N {
				w := worlds[n%len(worlds)]
				// What the link's reader does once per tick: the decoded
				// snapshot (copied here from the prepared world) becomes the
				// shared one, its index built.
				seq := uint64(n + 1) // sequences only grow, as a shard's do
				scratch.InstanceID, scratch.Sequence, scratch.ServerTimeMs = w.InstanceID, seq, w.ServerTimeMs
				scratch.Entities = append(scratch.Entities[:0], w.Entities...)
				sn := feed.publish(&scratch)
				for _, s := range sessions {
					s.offerSnap(sn)
					got := s.takeSnap()
					s.sendState(got)
					got.release()
					s.acked.Store(seq)
					total += len(s.buf)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*clients), "ns/client")
			b.ReportMetric(float64(total)/float64(b.N*clients), "bytes/msg")
		})
	}
}
