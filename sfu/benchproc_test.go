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

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
)

// recvEnv makes the test binary a receiver process for the pion
// benchmarks, so that the receivers' CPU is not charged to the forwarder
// being measured. Protocol on stdin/stdout, one JSON string per line: the
// child prints N offers, reads N answers, then answers "count" with its
// received packet total, sends one RTP packet from the speaker on "speak"
// (no answer), and exits on EOF.
//
// The offers: with slotsEnv = K > 1, each client has a sendrecv microphone
// m-line and K-1 recvonly ones (a browser's voice join; it never sends);
// otherwise one recvonly m-line. With speakerEnv set, the first offer is a
// speaker's (one sendrecv m-line) that sends only on "speak".
const (
	recvEnv    = "EGBE_SFU_BENCH_RECEIVERS"
	slotsEnv   = "EGBE_SFU_BENCH_SLOTS"
	speakerEnv = "EGBE_SFU_BENCH_SPEAKER"
	browserEnv = "EGBE_SFU_BENCH_BROWSERLIKE" // clients use browser RTCP/consent intervals
	quietEnv   = "EGBE_SFU_BENCH_QUIET"       // clients send no RTCP, consent every 10 s
)

func receiversMain() int {
	n, err := strconv.Atoi(os.Getenv(recvEnv))
	if err != nil || n < 1 {
		fmt.Fprintln(os.Stderr, "bad", recvEnv)
		return 2
	}
	slots, _ := strconv.Atoi(os.Getenv(slotsEnv))
	browserLike = os.Getenv(browserEnv) != ""
	quietClients = os.Getenv(quietEnv) != ""
	tb := &helperTB{}
	var got atomic.Int64
	var mine atomic.Int64
	var pcs []*webrtc.PeerConnection
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	var speaker *client
	for i := range n {
		var pc *webrtc.PeerConnection
		var offer string
		switch {
		case i == 0 && os.Getenv(speakerEnv) != "":
			speaker, offer = newClient(tb, 1, 1, true)
			pc = speaker.pc
		case slots > 1:
			var c *client
			c, offer = newClient(tb, byte(i), slots, true)
			pc = c.pc
		default:
			pc, offer = benchClient(tb, &got, &mine)
		}
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
	seq, ts := uint16(0), uint32(0)
	payload := make([]byte, 60)
	for {
		var cmd string
		if err := dec.Decode(&cmd); err != nil {
			break
		}
		if cmd == "speak" {
			if b := speaker.mic.bound.Load(); b != nil {
				seq++
				ts += opusFrame
				h := rtp.Header{Version: 2, PayloadType: b.pt, SequenceNumber: seq, Timestamp: ts, SSRC: b.ssrc}
				if id := speaker.mic.extID.Load(); id != 0 {
					_ = h.SetExtension(uint8(id), []byte{0x80 | 30})
				}
				_, _ = b.w.WriteRTP(&h, payload)
			}
			continue
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
// offers; answer each with answer(i, offer). env adds slotsEnv/speakerEnv.
func startReceivers(b testing.TB, n int, answer func(i int, offer string) string, env ...string) *receivers {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), recvEnv+"="+strconv.Itoa(n)), env...)
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

// speakCmd makes the child's speaker send one packet. A raw write: no
// allocation in the measuring process.
var speakCmd = []byte("\"speak\"\n")

func (r *receivers) speak(b testing.TB) {
	if _, err := r.in.Write(speakCmd); err != nil {
		b.Fatal(err)
	}
}

// count asks the child for its received packet total.
func (r *receivers) count(b testing.TB) int64 {
	if err := r.enc.Encode("count"); err != nil {
		b.Fatal(err)
	}
	var n int64
	if err := r.dec.Decode(&n); err != nil {
		b.Fatal(err)
	}
	return n
}
