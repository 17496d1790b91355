package epicplayer

import (
	"bytes"
	"testing"

	"github.com/oshun/egbe-edge/signalling/streamer"
)

// TestSPSSize reads the frame size back from the synthetic pattern's SPS,
// alone and inside a STAP-A, as the player does from RTP payloads.
func TestSPSSize(t *testing.T) {
	for _, sz := range [][2]int{{64, 32}, {256, 128}, {1920, 1088}} {
		p, err := streamer.NewPatternH264(sz[0], sz[1])
		if err != nil {
			t.Fatal(err)
		}
		nals := bytes.Split(p.Frame(0), []byte{0, 0, 0, 1})
		sps, pps := nals[1], nals[2]
		if w, h, ok := spsSize(findSPS(sps)); !ok || w != sz[0] || h != sz[1] {
			t.Fatalf("%v: %dx%d %v", sz, w, h, ok)
		}
		stap := append([]byte{24, byte(len(sps) >> 8), byte(len(sps))}, sps...)
		stap = append(append(stap, byte(len(pps)>>8), byte(len(pps))), pps...)
		if w, h, ok := spsSize(findSPS(stap)); !ok || w != sz[0] || h != sz[1] {
			t.Fatalf("STAP-A %v: %dx%d %v", sz, w, h, ok)
		}
	}
	if findSPS([]byte{24, 0, 200, 7}) != nil || findSPS(nil) != nil {
		t.Fatal("truncated STAP-A or empty payload gave an SPS")
	}
}
