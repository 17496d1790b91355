package linkio

import (
	"bufio"
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/oshun/egbe-edge/codec"
)

func seedFrames(t testing.TB) [][]byte {
	snap := &codec.AgentStateSnapshot{InstanceId: "orun-grove", Sequence: 7, ServerTimeMs: 1}
	for i := range 3 {
		snap.Entities = append(snap.Entities, codec.EntityToProto(codec.Entity{ID: uint32(i + 1), Kind: codec.EntityKind_AGENT, X: int32(i * 100)}))
	}
	var out [][]byte
	for _, f := range []*codec.LinkEdgeFrame{
		{Msg: &codec.LinkEdgeFrame_Hello{Hello: &codec.LinkHello{Version: Version, EdgeId: "edge"}}},
		{Msg: &codec.LinkEdgeFrame_Ping{Ping: &codec.LinkPing{Nonce: 1, EdgeTimeNs: 2}}},
		{Msg: &codec.LinkEdgeFrame_Open{Open: &codec.LinkSessionOpen{SessionId: "s_1", InstanceId: "orun-grove", Resume: true, EntityId: 9}}},
		{Msg: &codec.LinkEdgeFrame_Actions{Actions: &codec.ActionBatch{Actions: []*codec.Action{{ActionId: 1, Kind: "wave"}}}}},
	} {
		b, err := Frame(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	for _, f := range []*codec.LinkShardFrame{
		{Msg: &codec.LinkShardFrame_Hello{Hello: &codec.LinkShardHello{Version: Version, ShardId: "s1", Instances: []string{"orun-grove"}}}},
		{Msg: &codec.LinkShardFrame_Snapshot{Snapshot: snap}},
		{Msg: &codec.LinkShardFrame_ActionAck{ActionAck: &codec.ActionAck{ActionId: 3}}},
		{Msg: &codec.LinkShardFrame_Error{Error: &codec.Error{Code: "instance_shard_not_found"}}},
	} {
		b, err := Frame(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	var stream []byte
	for _, f := range seedFrames(t) {
		stream = append(stream, f...)
	}
	r := NewReader(bytes.NewReader(stream))
	var e codec.LinkEdgeFrame
	for range 4 {
		if err := r.ReadEdge(&e); err != nil {
			t.Fatal(err)
		}
	}
	var s codec.LinkShardFrame
	for range 4 {
		if err := r.ReadShard(&s); err != nil {
			t.Fatal(err)
		}
	}
	if s.GetError().GetCode() != "instance_shard_not_found" {
		t.Fatalf("last frame %v", &s)
	}
}

func TestRefusals(t *testing.T) {
	huge := []byte{0xff, 0xff, 0xff, 0x7f} // length 2^28-1 > MaxFrameSize
	var e codec.LinkEdgeFrame
	if err := NewReader(bytes.NewReader(huge)).ReadEdge(&e); !errors.Is(err, codec.ErrFrameTooLarge) {
		t.Fatalf("huge frame: %v", err)
	}
	if err := DecodeEdge(nil, &e); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("empty frame: %v", err)
	}
	if err := DecodeShard([]byte{0xff, 0x01}, new(codec.LinkShardFrame)); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("garbage: %v", err)
	}
}

// FuzzLinkFrame feeds arbitrary streams to both frame readers: they return
// frames or typed errors, never panic, and never accept an oversized frame.
func FuzzLinkFrame(f *testing.F) {
	for _, b := range seedFrames(f) {
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		re := &Reader{r: bufio.NewReader(bytes.NewReader(data))}
		for range 8 {
			var e codec.LinkEdgeFrame
			if err := re.ReadEdge(&e); err != nil {
				break
			}
			if e.Msg == nil {
				t.Fatal("accepted an empty frame")
			}
		}
		rs := NewReader(bytes.NewReader(data))
		for range 8 {
			var s codec.LinkShardFrame
			if err := rs.ReadShard(&s); err != nil {
				break
			}
		}
	})
}

// TestSessionFrame: a body encoded once and addressed by SessionFrame
// decodes as the frame with that session.
func TestSessionFrame(t *testing.T) {
	want := &codec.LinkShardFrame{Session: 1 << 20, Msg: &codec.LinkShardFrame_SessionEvent{SessionEvent: &codec.WorldEvent{Seq: 3, Kind: "action.wave"}}}
	body, err := proto.Marshal(&codec.LinkShardFrame{Msg: want.Msg})
	if err != nil {
		t.Fatal(err)
	}
	var got codec.LinkShardFrame
	if err := NewReader(bytes.NewReader(SessionFrame(want.Session, body))).ReadShard(&got); err != nil || !proto.Equal(&got, want) {
		t.Fatalf("got %v, %v", &got, err)
	}
}
