package codec

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"
)

func TestFrameRoundTrip(t *testing.T) {
	var stream []byte
	msgs := [][]byte{{}, []byte("a"), bytes.Repeat([]byte("x"), 300), bytes.Repeat([]byte("y"), MaxMessageSize)}
	for _, m := range msgs {
		stream = AppendFrame(stream, m)
	}
	r := bufio.NewReader(bytes.NewReader(stream))
	for i, want := range msgs {
		got, err := ReadFrame(r, nil, MaxMessageSize)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("frame %d differs", i)
		}
	}
	if _, err := ReadFrame(r, nil, MaxMessageSize); err != io.EOF {
		t.Fatalf("want io.EOF at end, got %v", err)
	}
}

func TestFrameLimits(t *testing.T) {
	big := AppendFrame(nil, make([]byte, MaxMessageSize+1))
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(big)), nil, MaxMessageSize); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	truncated := AppendFrame(nil, []byte("hello"))[:4]
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(truncated)), nil, MaxMessageSize); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated: %v", err)
	}
	overflow := bytes.Repeat([]byte{0xff}, 11)
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(overflow)), nil, MaxMessageSize); !errors.Is(err, ErrBadFrame) {
		t.Fatalf("varint overflow: %v", err)
	}
}

// The framing is protodelim's: a frame written here is a delimited message.
func TestFrameIsDelimitedProtobuf(t *testing.T) {
	env := &ClientEnvelope{Msg: &ClientEnvelope_Hello{Hello: &ClientHello{AccessToken: "t", InstanceId: "orun-grove", ProtocolVersion: 1}}}
	b, err := proto.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	frame, err := ReadFrame(bufio.NewReader(bytes.NewReader(AppendFrame(nil, b))), nil, MaxMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	var got ClientEnvelope
	if err := proto.Unmarshal(frame, &got); err != nil || got.GetHello().GetInstanceId() != "orun-grove" {
		t.Fatalf("%v %v", err, &got)
	}
}

func FuzzReadFrame(f *testing.F) {
	env, _ := proto.Marshal(&ClientEnvelope{Msg: &ClientEnvelope_Presence{Presence: &PresencePacket{Seq: 7, Position: &Vec3{XMm: 1000, YMm: -2000}}}})
	f.Add(AppendFrame(nil, env))
	f.Add(AppendFrame(AppendFrame(nil, env), env))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		var buf []byte
		for i := 0; i < 64; i++ {
			frame, err := ReadFrame(r, buf, 1024)
			if err != nil {
				return
			}
			if len(frame) > 1024 {
				t.Fatalf("frame of %d bytes passed a 1024 limit", len(frame))
			}
			buf = frame[:0]
		}
	})
}
