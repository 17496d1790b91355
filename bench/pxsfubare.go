package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/pion/interceptor"
	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// bareForwarder is the baseline of the pxsfu scenario: the canonical pion
// broadcast (pion's examples/broadcast), made to speak the SFU side of
// Epic's signalling so the same players and streamer serve both: default
// codecs and interceptors on every peer connection (NACK, RTCP reports,
// TWCC), one TrackLocalStaticRTP per simulcast layer, each read packet
// written with Write to the layer's track, which writes it to every
// player bound to it. Full ICE with loopback host candidates, no data
// channels, no key-frame handling (the pattern's frames all are).
type bareForwarder struct {
	ws     *websocket.Conn
	wmu    sync.Mutex
	api    *webrtc.API
	layers []*webrtc.TrackLocalStaticRTP
	perL   []atomic.Int64 // players per layer
	order  []int          // layer of the n-th player, round robin
	next   int            // owned by the reader

	mu      sync.Mutex
	up      *webrtc.PeerConnection            // guarded by mu
	players map[string]*webrtc.PeerConnection // guarded by mu
	layerOf map[string]int                    // guarded by mu

	forwarded atomic.Int64
	delay     prometheus.Histogram
	ready     chan struct{}
	readyOnce sync.Once
	wg        sync.WaitGroup
}

// PxSFUBareCommand is the bare forwarder's child process.
func PxSFUBareCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("pxsfu-bare", flag.ContinueOnError)
	url := fs.String("url", "", "SFU port")
	id := fs.String("id", "BARE", "endpointId")
	sub := fs.String("subscribe", "DefaultStreamer", "streamer")
	layersF := fs.String("layers", "0,1,2", "layer per player, round robin")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	_, _ = RaiseNoFile()
	order, err := parseInts(*layersF)
	if err != nil || len(order) == 0 {
		return fmt.Errorf("--layers: %v", err)
	}
	var se webrtc.SettingEngine
	se.SetIncludeLoopbackCandidate(true)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	var me webrtc.MediaEngine
	if err := me.RegisterDefaultCodecs(); err != nil {
		return err
	}
	var ir interceptor.Registry
	if err := webrtc.RegisterDefaultInterceptors(&me, &ir); err != nil {
		return err
	}
	if err := webrtc.ConfigureSimulcastExtensionHeaders(&me); err != nil {
		return err
	}
	f := &bareForwarder{api: webrtc.NewAPI(webrtc.WithMediaEngine(&me), webrtc.WithInterceptorRegistry(&ir), webrtc.WithSettingEngine(se)),
		perL: make([]atomic.Int64, 3), order: order, players: map[string]*webrtc.PeerConnection{}, layerOf: map[string]int{},
		ready: make(chan struct{}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bare_forward_delay_seconds",
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3}})}
	h264 := webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
		SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"}
	for range 3 {
		tr, err := webrtc.NewTrackLocalStaticRTP(h264, "video", "bare")
		if err != nil {
			return err
		}
		f.layers = append(f.layers, tr)
	}
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, *url, nil)
	if err != nil {
		return err
	}
	f.ws = ws
	out := bufio.NewWriter(os.Stdout)
	var omu sync.Mutex
	go func() {
		<-f.ready
		emit(out, &omu, map[string]any{"event": "ready"})
	}()
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			if in.Text() == "stats" {
				emit(out, &omu, map[string]any{"event": "stats", "forwarded": f.forwarded.Load(), "hist": f.hist()})
			}
		}
		_ = ws.Close() // stdin closed: stop
	}()
	for {
		var m struct {
			Type     string          `json:"type"`
			PlayerID json.RawMessage `json:"playerId"`
			SDP      string          `json:"sdp"`
			IDs      []string        `json:"ids"`
		}
		if err := ws.ReadJSON(&m); err != nil {
			break
		}
		pid := strings.Trim(string(m.PlayerID), `"`)
		switch m.Type {
		case "identify":
			f.send(map[string]any{"type": "endpointId", "id": *id})
			f.send(map[string]any{"type": "listStreamers"})
		case "streamerList":
			found := false
			for _, x := range m.IDs {
				found = found || x == *sub
			}
			if found {
				f.send(map[string]any{"type": "subscribe", "streamerId": *sub})
			} else {
				time.AfterFunc(200*time.Millisecond, func() { f.send(map[string]any{"type": "listStreamers"}) })
			}
		case "offer":
			if err := f.answerStreamer(m.SDP); err != nil {
				fmt.Fprintln(os.Stderr, "bare: streamer offer:", err)
			}
		case "playerConnected":
			f.offerPlayer(pid)
		case "answer":
			f.mu.Lock()
			pc := f.players[pid]
			f.mu.Unlock()
			if pc != nil {
				_ = pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: m.SDP})
			}
		case "playerDisconnected":
			f.dropPlayer(pid)
		}
	}
	f.mu.Lock()
	for id := range f.players {
		f.mu.Unlock()
		f.dropPlayer(id)
		f.mu.Lock()
	}
	up := f.up
	f.mu.Unlock()
	if up != nil {
		_ = up.Close()
	}
	f.wg.Wait()
	return nil
}

func (f *bareForwarder) send(v any) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	_ = f.ws.WriteJSON(v)
}

func (f *bareForwarder) answerStreamer(sdp string) error {
	pc, err := f.api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return err
	}
	rids := simulcastRIDOrder(sdp)
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		l := 0
		for i, r := range rids {
			if r == tr.RID() {
				l = i
			}
		}
		if l >= len(f.layers) {
			return
		}
		f.wg.Add(1)
		defer f.wg.Done()
		f.readyOnce.Do(func() { close(f.ready) })
		buf := make([]byte, 1500)
		var n uint32
		for {
			i, _, err := tr.Read(buf)
			if err != nil {
				if errors.Is(err, os.ErrClosed) || strings.Contains(err.Error(), "EOF") {
					return
				}
				continue
			}
			at := time.Now()
			if _, err := f.layers[l].Write(buf[:i]); err == nil {
				f.forwarded.Add(f.perL[l].Load())
			}
			if n++; n&3 == 0 && f.perL[l].Load() > 0 {
				f.delay.Observe(time.Since(at).Seconds())
			}
		}
	})
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: sdp}); err != nil {
		return err
	}
	answer, err := pc.CreateAnswer(nil)
	if err != nil {
		return err
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(answer); err != nil {
		return err
	}
	<-gathered
	f.mu.Lock()
	f.up = pc
	f.mu.Unlock()
	f.send(map[string]any{"type": "answer", "sdp": pc.LocalDescription().SDP})
	return nil
}

func (f *bareForwarder) offerPlayer(pid string) {
	l := f.order[f.next%len(f.order)]
	f.next++
	pc, err := f.api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return
	}
	snd, err := pc.AddTrack(f.layers[l])
	if err != nil {
		_ = pc.Close()
		return
	}
	f.wg.Add(1)
	go func() { // drain RTCP, as pion's examples do
		defer f.wg.Done()
		buf := make([]byte, 1500)
		for {
			if _, _, err := snd.Read(buf); err != nil {
				return
			}
		}
	}()
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		_ = pc.Close()
		return
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		_ = pc.Close()
		return
	}
	<-gathered
	f.mu.Lock()
	f.players[pid] = pc
	f.layerOf[pid] = l
	f.mu.Unlock()
	f.perL[l].Add(1)
	f.send(map[string]any{"type": "offer", "playerId": pid, "sdp": pc.LocalDescription().SDP, "sfu": true, "scalabilityMode": "L1T1"})
}

func (f *bareForwarder) dropPlayer(pid string) {
	f.mu.Lock()
	pc, l := f.players[pid], f.layerOf[pid]
	delete(f.players, pid)
	delete(f.layerOf, pid)
	f.mu.Unlock()
	if pc != nil {
		f.perL[l].Add(-1)
		_ = pc.Close()
	}
}

// hist is the delay histogram as [[le, cumulative count]...], +Inf as -1.
func (f *bareForwarder) hist() [][2]float64 {
	var m dto.Metric
	_ = f.delay.Write(&m)
	var out [][2]float64
	for _, b := range m.GetHistogram().GetBucket() {
		out = append(out, [2]float64{b.GetUpperBound(), float64(b.GetCumulativeCount())})
	}
	return append(out, [2]float64{-1, float64(m.GetHistogram().GetSampleCount())})
}

// simulcastRIDOrder is the a=simulcast:send order of an offer's rids.
func simulcastRIDOrder(sdp string) []string {
	for _, l := range strings.Split(sdp, "\r\n") {
		if v, ok := strings.CutPrefix(l, "a=simulcast:send "); ok {
			return strings.Split(v, ";")
		}
	}
	return nil
}
