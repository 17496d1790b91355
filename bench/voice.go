package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/rtp"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/egbeclient"
)

// VoiceOptions shape the voice scenario.
type VoiceOptions struct {
	Speakers, Listeners int
	Duration            time.Duration // measured phase
	Warmup              time.Duration // sending before the measured phase (0: 2 s)
	Slots               int           // K offered per client (0: 4)
	Payload             int           // Opus payload bytes (0: 60; at least 16)
	Instance            string        // realtime instance (room); "" = orun-grove
	Squad               string        // squad every client joins; "" = bench
	DialWorkers         int           // concurrent joins (0: 8)
}

// VoiceReport is what the voice scenario measures. Forwarded packets are
// those received by clients (listeners, and speakers hearing each other)
// whose send timestamp falls inside the measured window.
type VoiceReport struct {
	Speakers, Listeners, Joined int
	JoinErrors                  int
	FirstErrs                   []string
	Join                        Summary // HTTP join round trip
	Elapsed                     time.Duration
	Sent                        int64 // packets sent by speakers in the window
	Expected                    int64 // sum over clients of min(slots, other speakers) x per-speaker sent
	Received                    int64 // forwarded packets received in the window, all clients
	ListenerReceived            int64 // of Received, by listeners
	Latency                     Summary
	EdgeCPU                     time.Duration
	EdgeIdleCPU                 time.Duration // the edge's CPU over the window's length before anyone spoke (clients joined)
	// EdgeForwarded and EdgeDropped are the edge's own counters over the
	// window (egbe_sfu_packets_forwarded_total, _dropped_total by reason);
	// -1 when the admin endpoint could not be read.
	EdgeForwarded     int64
	EdgeDropped       map[string]int64
	ClientCPU         time.Duration
	RSSIdle, RSSAfter int64
}

// ForwardedPerSec is received (forwarded) packets per wall second.
func (r VoiceReport) ForwardedPerSec() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Received) / r.Elapsed.Seconds()
}

// CPUPerMillion is edge CPU-seconds per million forwarded packets.
func (r VoiceReport) CPUPerMillion() float64 {
	if r.Received == 0 {
		return 0
	}
	return r.EdgeCPU.Seconds() * 1e6 / float64(r.Received)
}

// PerCore is forwarded packets per edge CPU-second.
func (r VoiceReport) PerCore() float64 {
	if r.EdgeCPU <= 0 {
		return 0
	}
	return float64(r.Received) / r.EdgeCPU.Seconds()
}

// NetPerCore is forwarded packets per edge CPU-second net of the idle
// edge's CPU (dev shard ticks, RTCP, timers).
func (r VoiceReport) NetPerCore() float64 {
	if d := r.EdgeCPU - r.EdgeIdleCPU; d > 0 {
		return float64(r.Received) / d.Seconds()
	}
	return 0
}

// Loss is 1 - received/expected.
func (r VoiceReport) Loss() float64 {
	if r.Expected == 0 {
		return 0
	}
	return 1 - float64(r.Received)/float64(r.Expected)
}

func (r VoiceReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "voice speakers=%d listeners=%d joined=%d join_errors=%d\n", r.Speakers, r.Listeners, r.Joined, r.JoinErrors)
	fmt.Fprintf(&b, "  join            %s\n", r.Join)
	fmt.Fprintf(&b, "  window=%v sent=%d expected=%d received=%d (listeners %d) loss=%.3f%%\n",
		r.Elapsed.Round(time.Millisecond), r.Sent, r.Expected, r.Received, r.ListenerReceived, 100*r.Loss())
	fmt.Fprintf(&b, "  forwarded %.0f pkt/s; edge cpu=%v (%.1f%% of a core) = %.2f CPU-s per million forwarded = %.0f forwarded/CPU-s\n",
		r.ForwardedPerSec(), r.EdgeCPU.Round(time.Millisecond), 100*r.EdgeCPU.Seconds()/max(r.Elapsed.Seconds(), 1e-9), r.CPUPerMillion(), r.PerCore())
	fmt.Fprintf(&b, "  edge idle cpu over the same length (joined, silent)=%v; net of idle %.0f forwarded/CPU-s\n", r.EdgeIdleCPU.Round(time.Millisecond), r.NetPerCore())
	fmt.Fprintf(&b, "  edge counters over the window: forwarded=%d dropped=%v (the rest of the loss is between the edge's sendto and the clients' reads)\n", r.EdgeForwarded, r.EdgeDropped)
	fmt.Fprintf(&b, "  client cpu=%v\n", r.ClientCPU.Round(time.Millisecond))
	fmt.Fprintf(&b, "  added latency (receive - send stamp, includes client pion send+receive) %s\n", r.Latency)
	fmt.Fprintf(&b, "  edge rss idle=%.1f MiB after=%.1f MiB\n", mib(r.RSSIdle), mib(r.RSSAfter))
	for _, e := range r.FirstErrs {
		fmt.Fprintf(&b, "  error: %s\n", e)
	}
	return b.String()
}

// voicePayload layout (big endian), the rest zero:
//
//	0..8   send time, Unix nanoseconds
//	8..10  speaker index
const voiceStampLen = 10

// voiceClient is one pion voice client with its realtime session.
type voiceClient struct {
	idx     int
	speaker bool
	rt      *egbeclient.Conn
	pc      *webrtc.PeerConnection
	mic     *webrtc.TrackLocalStaticRTP
	slots   int

	t0, t1   atomic.Int64 // measured window, Unix ns (0: not measuring)
	received atomic.Int64
	sent     atomic.Int64
	mu       sync.Mutex
	lat      []time.Duration // guarded by mu
	wg       sync.WaitGroup
	once     sync.Once
}

func voiceAPI() (*webrtc.API, error) {
	me := &webrtc.MediaEngine{}
	if err := me.RegisterCodec(webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, PayloadType: 111}, webrtc.RTPCodecTypeAudio); err != nil {
		return nil, err
	}
	if err := me.RegisterHeaderExtension(webrtc.RTPHeaderExtensionCapability{URI: sdp.AudioLevelURI}, webrtc.RTPCodecTypeAudio); err != nil {
		return nil, err
	}
	var se webrtc.SettingEngine
	se.SetIncludeLoopbackCandidate(true)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetInterfaceFilter(func(name string) bool { return name == "lo" })
	// No interceptors: the client side stays cheap; the edge is measured.
	return webrtc.NewAPI(webrtc.WithMediaEngine(me), webrtc.WithSettingEngine(se), webrtc.WithInterceptorRegistry(&interceptor.Registry{})), nil
}

// joinVoice opens the realtime session, joins the squad and joins voice.
func joinVoice(ctx context.Context, t *Target, api *webrtc.API, c *voiceClient, opts VoiceOptions) (time.Duration, error) {
	tok, err := t.Token(fmt.Sprintf("voice-%d", c.idx))
	if err != nil {
		return 0, err
	}
	rt, err := egbeclient.Dial(ctx, egbeclient.Options{Kind: "websocket", HTTPBase: t.HTTPBase, Inbox: 64})
	if err != nil {
		return 0, fmt.Errorf("realtime dial: %w", err)
	}
	c.rt = rt
	sh, err := rt.Hello(ctx, &codec.ClientHello{AccessToken: tok, InstanceId: opts.Instance, AuthorityKind: codec.AuthorityKind_UE_CLIENT,
		ProtocolVersion: codec.ProtocolVersion, Capabilities: []string{"voice"}})
	if err != nil {
		return 0, fmt.Errorf("realtime hello: %w", err)
	}
	c.wg.Add(1)
	go func() { // drain: reliable envelopes would otherwise back up
		defer c.wg.Done()
		for {
			if _, err := rt.Recv(context.Background()); err != nil {
				return
			}
		}
	}()
	if err := rt.Send(&codec.ClientEnvelope{Msg: &codec.ClientEnvelope_Voice{Voice: &codec.VoiceControl{Op: &codec.VoiceControl_JoinSquad{JoinSquad: opts.Squad}}}}, false); err != nil {
		return 0, fmt.Errorf("join squad: %w", err)
	}

	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return 0, err
	}
	c.pc = pc
	c.mic, err = webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "mic", fmt.Sprint("mic-", c.idx))
	if err != nil {
		return 0, err
	}
	tr, err := pc.AddTransceiverFromTrack(c.mic, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendrecv})
	if err != nil {
		return 0, err
	}
	c.wg.Add(1)
	go func() { // RTCP in
		defer c.wg.Done()
		buf := make([]byte, 1500)
		for {
			if _, _, err := tr.Sender().Read(buf); err != nil {
				return
			}
		}
	}()
	for i := 1; i < opts.Slots; i++ {
		if _, err := pc.AddTransceiverFromKind(webrtc.RTPCodecTypeAudio, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
			return 0, err
		}
	}
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) { c.readTrack(tr) })
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		return 0, err
	}
	g := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		return 0, err
	}
	<-g
	start := time.Now()
	answer, slots, err := postVoiceJoin(ctx, t.HTTPBase, tok, sh.GetSessionId(), pc.LocalDescription().SDP)
	d := time.Since(start)
	if err != nil {
		return 0, err
	}
	c.slots = slots
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		return 0, err
	}
	return d, nil
}

// readTrack counts one slot's packets whose send stamp is in the window.
func (c *voiceClient) readTrack(tr *webrtc.TrackRemote) {
	c.wg.Add(1)
	defer c.wg.Done()
	buf := make([]byte, 1500)
	var h rtp.Header
	local := make([]time.Duration, 0, 1024)
	flush := func() {
		c.mu.Lock()
		c.lat = append(c.lat, local...)
		c.mu.Unlock()
		local = local[:0]
	}
	defer flush()
	for {
		n, _, err := tr.Read(buf)
		if err != nil {
			return
		}
		now := time.Now().UnixNano()
		hl, err := h.Unmarshal(buf[:n])
		if err != nil || n-hl < voiceStampLen {
			continue
		}
		sent := int64(binary.BigEndian.Uint64(buf[hl:]))
		t0, t1 := c.t0.Load(), c.t1.Load()
		if t0 == 0 || sent < t0 || (t1 != 0 && sent >= t1) {
			continue
		}
		c.received.Add(1)
		local = append(local, time.Duration(now-sent))
		if len(local) == cap(local) {
			flush()
		}
	}
}

// speak sends one Opus-sized frame every 20 ms until ctx is done.
func (c *voiceClient) speak(ctx context.Context, payloadLen int) {
	defer c.wg.Done()
	pkt := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111}, Payload: make([]byte, payloadLen)}
	binary.BigEndian.PutUint16(pkt.Payload[8:], uint16(c.idx))
	// Spread speakers' phases over one frame.
	next := time.Now().Add(time.Duration(c.idx) * 20 * time.Millisecond / 7)
	for {
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		} else if ctx.Err() != nil {
			return
		}
		next = next.Add(20 * time.Millisecond)
		pkt.SequenceNumber++
		pkt.Timestamp += 960
		now := time.Now().UnixNano()
		binary.BigEndian.PutUint64(pkt.Payload, uint64(now))
		if err := c.mic.WriteRTP(pkt); err == nil {
			t0, t1 := c.t0.Load(), c.t1.Load()
			if t0 != 0 && now >= t0 && (t1 == 0 || now < t1) {
				c.sent.Add(1)
			}
		}
	}
}

func (c *voiceClient) close() {
	c.once.Do(func() {
		if c.pc != nil {
			_ = c.pc.Close()
		}
		if c.rt != nil {
			_ = c.rt.Close()
		}
		c.wg.Wait()
	})
}

// RunVoice runs the voice scenario against an edge: Speakers+Listeners
// pion clients in one squad, speakers sending 50 pps Opus-sized RTP.
func RunVoice(ctx context.Context, t *Target, opts VoiceOptions) (VoiceReport, error) {
	if opts.Warmup <= 0 {
		opts.Warmup = 2 * time.Second
	}
	if opts.Slots <= 0 {
		opts.Slots = 4
	}
	if opts.Payload < voiceStampLen {
		opts.Payload = 60
	}
	if opts.Instance == "" {
		opts.Instance = "orun-grove"
	}
	if opts.Squad == "" {
		opts.Squad = "bench"
	}
	if opts.DialWorkers <= 0 {
		opts.DialWorkers = 8
	}
	rep := VoiceReport{Speakers: opts.Speakers, Listeners: opts.Listeners}
	if opts.Speakers < 1 {
		return rep, errors.New("bench: voice needs at least one speaker")
	}
	api, err := voiceAPI()
	if err != nil {
		return rep, err
	}
	n := opts.Speakers + opts.Listeners
	clients := make([]*voiceClient, n)
	for i := range clients {
		clients[i] = &voiceClient{idx: i, speaker: i < opts.Speakers}
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	var joinLat Latencies
	var errMu sync.Mutex
	var wg sync.WaitGroup
	var next atomic.Int64
	ok := make([]bool, n)
	for w := 0; w < opts.DialWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				jctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				d, err := joinVoice(jctx, t, api, clients[i], opts)
				cancel()
				errMu.Lock()
				if err != nil {
					rep.JoinErrors++
					if len(rep.FirstErrs) < 5 {
						rep.FirstErrs = append(rep.FirstErrs, err.Error())
					}
				} else {
					ok[i] = true
					rep.Joined++
					joinLat.Add(d)
				}
				errMu.Unlock()
			}
		}()
	}
	wg.Wait()
	rep.Join = joinLat.Summary()
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	rep.RSSIdle = t.Usage().RSSBytes
	idle := min(opts.Duration, 3*time.Second)
	idle0 := t.Usage().CPU
	select {
	case <-ctx.Done():
		return rep, ctx.Err()
	case <-time.After(idle):
	}
	rep.EdgeIdleCPU = time.Duration(float64(t.Usage().CPU-idle0) * float64(opts.Duration) / float64(idle))

	sctx, stopSpeaking := context.WithCancel(ctx)
	var swg sync.WaitGroup
	for i, c := range clients {
		if ok[i] && c.speaker {
			c.wg.Add(1)
			swg.Add(1)
			go func() { defer swg.Done(); c.speak(sctx, opts.Payload) }()
		}
	}
	defer func() { stopSpeaking(); swg.Wait() }()
	select {
	case <-ctx.Done():
		return rep, ctx.Err()
	case <-time.After(opts.Warmup):
	}

	m0 := sfuCounters(t)
	cpu0, self0 := t.Usage().CPU, selfCPU()
	start := time.Now()
	for _, c := range clients {
		c.t0.Store(start.UnixNano())
	}
	select {
	case <-ctx.Done():
		return rep, ctx.Err()
	case <-time.After(opts.Duration):
	}
	end := time.Now()
	for _, c := range clients {
		c.t1.Store(end.UnixNano())
	}
	cpu1, self1 := t.Usage().CPU, selfCPU()
	m1 := sfuCounters(t)
	rep.EdgeForwarded = -1
	if m0 != nil && m1 != nil {
		rep.EdgeForwarded = m1["forwarded"] - m0["forwarded"]
		rep.EdgeDropped = map[string]int64{}
		for k, v := range m1 {
			if d := v - m0[k]; k != "forwarded" && d != 0 {
				rep.EdgeDropped[k] = d
			}
		}
	}
	rep.Elapsed = end.Sub(start)
	rep.EdgeCPU, rep.ClientCPU = cpu1-cpu0, self1-self0
	// Let packets stamped inside the window land (counted by stamp).
	time.Sleep(300 * time.Millisecond)
	rep.RSSAfter = t.Usage().RSSBytes
	stopSpeaking()
	swg.Wait()
	for _, c := range clients { // readers flush their latency samples
		c.close()
	}

	speakers := 0
	for i, c := range clients {
		if ok[i] && c.speaker {
			speakers++
			rep.Sent += c.sent.Load()
		}
	}
	var lat Latencies
	for i, c := range clients {
		if !ok[i] {
			continue
		}
		others := speakers
		if c.speaker {
			others--
		}
		if speakers > 0 {
			rep.Expected += int64(min(c.slots, others)) * rep.Sent / int64(speakers)
		}
		got := c.received.Load()
		rep.Received += got
		if !c.speaker {
			rep.ListenerReceived += got
		}
		c.mu.Lock()
		lat.s = append(lat.s, c.lat...)
		c.mu.Unlock()
	}
	rep.Latency = lat.Summary()
	return rep, nil
}

// VoiceCommand is `egbe-bench voice`.
func VoiceCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("voice", flag.ContinueOnError)
	bin := fs.String("edge-bin", "", "start this egbe-edge binary on free loopback ports (dev mode, in-process dev shard)")
	extra := fs.String("edge-args", "--policy bench/loadtest-policy.json", "extra flags for --edge-bin, space separated (the policy lifts the per-network session cap)")
	taskset := fs.String("edge-taskset", "", "pin the started edge to these CPUs (taskset -c LIST)")
	httpBase := fs.String("edge", "", "or attach: the running edge's HTTP origin")
	adminBase := fs.String("edge-admin", "", "the running edge's admin origin")
	pid := fs.Int("edge-pid", 0, "the running edge's pid, for CPU and RSS")
	var opts VoiceOptions
	fs.IntVar(&opts.Speakers, "speakers", 4, "clients sending 50 pps Opus-sized RTP")
	fs.IntVar(&opts.Listeners, "listeners", 20, "clients only receiving")
	fs.DurationVar(&opts.Duration, "duration", 15*time.Second, "measured phase")
	fs.DurationVar(&opts.Warmup, "warmup", 2*time.Second, "sending before the measured phase")
	fs.IntVar(&opts.Slots, "slots", 4, "audio slots offered per client (K)")
	fs.IntVar(&opts.Payload, "payload", 60, "Opus payload bytes")
	fs.StringVar(&opts.Instance, "instance", "orun-grove", "realtime instance (voice room)")
	fs.IntVar(&opts.DialWorkers, "dial-workers", 8, "concurrent joins")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var t *Target
	var err error
	if *bin != "" {
		t, err = StartEdgeWith(ctx, EdgeOptions{Bin: *bin, Extra: strings.Fields(*extra), Taskset: *taskset})
	} else if *httpBase != "" {
		t, err = Attach(ctx, *httpBase, "", *adminBase, *pid)
	} else {
		err = errors.New("give --edge-bin or --edge/--edge-admin")
	}
	if err != nil {
		return err
	}
	defer t.Stop()
	rep, err := RunVoice(ctx, t, opts)
	fmt.Print(rep)
	return err
}

// sfuCounters scrapes the edge's SFU packet counters: "forwarded" and
// one entry per drop reason. Nil when the admin endpoint is unreadable.
func sfuCounters(t *Target) map[string]int64 {
	if t.AdminBase == "" {
		return nil
	}
	resp, err := http.Get(t.AdminBase + "/metrics")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	out := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch {
		case name == "egbe_sfu_packets_forwarded_total":
			out["forwarded"] = int64(v)
		case strings.HasPrefix(name, `egbe_sfu_packets_dropped_total{reason="`):
			out[strings.TrimSuffix(strings.TrimPrefix(name, `egbe_sfu_packets_dropped_total{reason="`), `"}`)] = int64(v)
		}
	}
	return out
}

// selfCPU is this process's CPU time (user + system).
func selfCPU() time.Duration {
	u, _ := ReadProc(os.Getpid())
	return u.CPU
}
