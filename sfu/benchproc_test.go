package sfu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/pion/webrtc/v4"
)

// recvEnv makes the test binary a receiver process for the pion
// benchmarks, so that the receivers' CPU is not charged to the forwarder
// being measured. Protocol on stdin/stdout, one JSON string per line: the
// child prints N offers (one recvonly audio m-line each), reads N answers,
// then answers "count" with its received packet total and exits on EOF.
const recvEnv = "EGBE_SFU_BENCH_RECEIVERS"

func receiversMain() int {
	n, err := strconv.Atoi(os.Getenv(recvEnv))
	if err != nil || n < 1 {
		fmt.Fprintln(os.Stderr, "bad", recvEnv)
		return 2
	}
	tb := &helperTB{}
	var got atomic.Int64
	var mine atomic.Int64
	var pcs []*webrtc.PeerConnection
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	for range n {
		pc, offer := benchClient(tb, &got, &mine)
		pcs = append(pcs, pc)
		_ = enc.Encode(offer)
	}
	_ = out.Flush()
	in := bufio.NewReader(os.Stdin)
	dec := json.NewDecoder(in)
	for _, pc := range pcs {
		var answer string
		if err := dec.Decode(&answer); err != nil {
			fmt.Fprintln(os.Stderr, "answer:", err)
			return 1
		}
		if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
			fmt.Fprintln(os.Stderr, "answer:", err)
			return 1
		}
	}
	for {
		var cmd string
		if err := dec.Decode(&cmd); err != nil {
			break
		}
		_ = enc.Encode(got.Load())
		_ = out.Flush()
	}
	for _, pc := range pcs {
		_ = pc.Close()
	}
	return 0
}

// helperTB is the testing.TB the receiver process hands to test helpers.
type helperTB struct{ testing.TB }

func (*helperTB) Helper()           {}
func (*helperTB) Cleanup(func())    {}
func (*helperTB) Fatal(args ...any) { fmt.Fprintln(os.Stderr, args...); os.Exit(1) }

// receivers is the parent's handle on a receiver process.
type receivers struct {
	cmd *exec.Cmd
	enc *json.Encoder
	dec *json.Decoder
	in  io.WriteCloser
}

// startReceivers starts n receivers in a child process and returns their
// offers; answer each with answer(i, offer).
func startReceivers(b *testing.B, n int, answer func(i int, offer string) string) *receivers {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), recvEnv+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	r := &receivers{cmd: cmd, enc: json.NewEncoder(in), dec: json.NewDecoder(bufio.NewReader(outp)), in: in}
	b.Cleanup(func() { _ = r.in.Close(); _ = r.cmd.Wait() })
	offers := make([]string, n)
	for i := range offers {
		if err := r.dec.Decode(&offers[i]); err != nil {
			b.Fatalf("receiver offer: %v", err)
		}
	}
	for i, o := range offers {
		if err := r.enc.Encode(answer(i, o)); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// count asks the child for its received packet total.
func (r *receivers) count(b *testing.B) int64 {
	if err := r.enc.Encode("count"); err != nil {
		b.Fatal(err)
	}
	var n int64
	if err := r.dec.Decode(&n); err != nil {
		b.Fatal(err)
	}
	return n
}
