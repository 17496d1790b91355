package iceport

import (
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
)

// TestTwoAnswerersShareOnePort opens two data-channel peers against two
// ICE-lite answerers built from the same Port and checks both connect.
func TestTwoAnswerersShareOnePort(t *testing.T) {
	p, err := Listen(Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	api := webrtc.NewAPI(webrtc.WithSettingEngine(p.SettingEngine()))
	for i := 0; i < 2; i++ {
		connectOnce(t, api)
	}
}

func connectOnce(t *testing.T, answererAPI *webrtc.API) {
	t.Helper()
	var se webrtc.SettingEngine
	se.SetIncludeLoopbackCandidate(true)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	offerer, err := webrtc.NewAPI(webrtc.WithSettingEngine(se)).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	defer offerer.Close()
	answerer, err := answererAPI.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	defer answerer.Close()

	got := make(chan string, 1)
	answerer.OnDataChannel(func(dc *webrtc.DataChannel) {
		dc.OnMessage(func(m webrtc.DataChannelMessage) { got <- string(m.Data) })
	})
	dc, err := offerer.CreateDataChannel("x", nil)
	if err != nil {
		t.Fatal(err)
	}
	dc.OnOpen(func() { _ = dc.SendText("hello") })

	offer, _ := offerer.CreateOffer(nil)
	gather := webrtc.GatheringCompletePromise(offerer)
	if err := offerer.SetLocalDescription(offer); err != nil {
		t.Fatal(err)
	}
	<-gather
	if err := answerer.SetRemoteDescription(*offerer.LocalDescription()); err != nil {
		t.Fatal(err)
	}
	answer, _ := answerer.CreateAnswer(nil)
	agather := webrtc.GatheringCompletePromise(answerer)
	if err := answerer.SetLocalDescription(answer); err != nil {
		t.Fatal(err)
	}
	<-agather
	if err := offerer.SetRemoteDescription(*answerer.LocalDescription()); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "hello" {
			t.Fatalf("got %q", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("data channel never delivered")
	}
}
