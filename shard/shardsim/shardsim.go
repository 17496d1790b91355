// Package shardsim is the reference world shard: instances of simulated
// agents and players moving on a plane at 20 Hz, served over the shard link
// protocol (codec/link.proto, QUIC). It applies each session's actions in
// order, exactly once, acknowledges them and emits world events. It backs
// cmd/egbe-shard, the edge's dev mode and the shard package's tests.
package shardsim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/shard/internal/linkio"
)

// Config configures a Server.
type Config struct {
	Listen    string   // UDP address, e.g. "127.0.0.1:0"
	ShardID   string   // default "shard-" + first instance
	Instances []string // at least one
	Agents    int      // simulated agents per instance (DefaultConfig: 200; 0 is an empty world)
	Players   int      // simulated (bot) players per instance (default 4)
	TickHz    int      // default 20
	Capacity  int      // sessions advertised (0 = unbounded)
	// Retention is how long a closed session's state (entity, last applied
	// action) is kept for a resume (default 120 s: beyond the edge's 60 s).
	Retention  time.Duration
	HalfSizeMM int32       // the plane spans [-HalfSizeMM, HalfSizeMM]^2 (default 100 m)
	TLS        *tls.Config // nil: a self-signed certificate
	// LinkToken, if set, must be presented in every edge's LinkHello.
	LinkToken string
	Seed      uint64
	Logger    *slog.Logger
}

// DefaultConfig returns the defaults for one instance, orun-grove.
func DefaultConfig() Config {
	return Config{
		Listen:     "127.0.0.1:0",
		Instances:  []string{"orun-grove"},
		Agents:     200,
		Players:    4,
		TickHz:     codec.GroundReplicationHz,
		Retention:  120 * time.Second,
		HalfSizeMM: 100_000,
	}
}

// Validate reports a config that cannot run.
func (c Config) Validate() error {
	switch {
	case c.Listen == "":
		return fmt.Errorf("%w: listen address required", ErrConfig)
	case len(c.Instances) == 0:
		return fmt.Errorf("%w: at least one instance required", ErrConfig)
	case c.Agents < 0 || c.Agents > 100_000:
		return fmt.Errorf("%w: agents %d out of range", ErrConfig, c.Agents)
	case c.Players < 0 || c.Players > 10_000:
		return fmt.Errorf("%w: players %d out of range", ErrConfig, c.Players)
	case c.TickHz < 0 || c.TickHz > 1000:
		return fmt.Errorf("%w: tick %d Hz out of range", ErrConfig, c.TickHz)
	}
	seen := map[string]bool{}
	for _, in := range c.Instances {
		if in == "" || seen[in] {
			return fmt.Errorf("%w: empty or duplicate instance %q", ErrConfig, in)
		}
		seen[in] = true
	}
	return nil
}

func (c *Config) fill() {
	d := DefaultConfig()
	if c.TickHz == 0 {
		c.TickHz = d.TickHz
	}
	if c.Retention == 0 {
		c.Retention = d.Retention
	}
	if c.HalfSizeMM <= 0 {
		c.HalfSizeMM = d.HalfSizeMM
	}
	if c.ShardID == "" && len(c.Instances) > 0 {
		c.ShardID = "shard-" + c.Instances[0]
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

var (
	// ErrConfig: the configuration is invalid.
	ErrConfig = errors.New("shardsim: invalid config")
	// ErrClosed: the server is closed.
	ErrClosed = errors.New("shardsim: closed")
)

// Server is a running reference shard.
type Server struct {
	cfg Config          // immutable after Start
	ln  *quic.Listener  // immutable after Start
	tr  *quic.Transport // immutable after Start
	udp *net.UDPConn    // immutable after Start
	log *slog.Logger    // immutable after Start

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	instances map[string]*instance     // guarded by mu (map immutable after Start)
	links     map[*edgeLink]struct{}   // guarded by mu
	sessions  map[string]*sessionState // guarded by mu: live and retained
	nextID    uint32                   // guarded by mu
	closed    bool                     // guarded by mu
}

// Start listens on cfg.Listen and runs the shard until ctx is done or Close.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tlsConf := cfg.TLS
	if tlsConf == nil {
		var err error
		if tlsConf, err = linkio.SelfSigned(10 * 24 * time.Hour); err != nil {
			return nil, err
		}
	}
	uaddr, err := net.ResolveUDPAddr("udp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("shardsim: listen %s: %w", cfg.Listen, err)
	}
	udp, err := net.ListenUDP("udp", uaddr)
	if err != nil {
		return nil, fmt.Errorf("shardsim: listen %s: %w", cfg.Listen, err)
	}
	// An explicit Transport, so Close releases the UDP port at once (a
	// single-use listener keeps it while closed connections drain).
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(tlsConf, &quic.Config{
		MaxIdleTimeout:        10 * time.Second,
		KeepAlivePeriod:       2 * time.Second,
		MaxIncomingStreams:    1 << 16,
		MaxIncomingUniStreams: -1,
	})
	if err != nil {
		_ = udp.Close()
		return nil, fmt.Errorf("shardsim: listen %s: %w", cfg.Listen, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Server{
		cfg: cfg, ln: ln, tr: tr, udp: udp, log: cfg.Logger.With("component", "shardsim", "shard", cfg.ShardID),
		cancel: cancel, instances: map[string]*instance{}, links: map[*edgeLink]struct{}{},
		sessions: map[string]*sessionState{}, nextID: 1_000_000,
	}
	seed := cfg.Seed
	for i, id := range cfg.Instances {
		s.instances[id] = newInstance(id, cfg, seed+uint64(i)*7919)
	}
	s.wg.Add(3)
	go func() { defer s.wg.Done(); s.acceptLoop(ctx) }()
	go func() { defer s.wg.Done(); s.tickLoop(ctx) }()
	go func() { defer s.wg.Done(); <-ctx.Done(); s.shutdown() }()
	return s, nil
}

// Addr is the UDP address the shard listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// ID is the shard id it announces.
func (s *Server) ID() string { return s.cfg.ShardID }

// Instances are the instances it holds.
func (s *Server) Instances() []string { return slices.Clone(s.cfg.Instances) }

// Close stops the shard, closing every link, and waits for its goroutines.
func (s *Server) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

func (s *Server) shutdown() {
	s.mu.Lock()
	s.closed = true
	links := make([]*edgeLink, 0, len(s.links))
	for l := range s.links {
		links = append(links, l)
	}
	s.mu.Unlock()
	for _, l := range links {
		_ = l.conn.CloseWithError(linkio.CodeShutdown, "shard shutting down")
	}
	_ = s.ln.Close()
	_ = s.tr.Close()
	_ = s.udp.Close()
}

// Applied returns the action ids applied for session, in application order
// (a test hook: each acknowledged action appears exactly once).
func (s *Server) Applied(sessionID string) []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[sessionID]; ss != nil {
		return slices.Clone(ss.applied)
	}
	return nil
}

// Links is the number of connected edges.
func (s *Server) Links() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.links)
}

// Sessions is the number of sessions with an open stream.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ss := range s.sessions {
		if ss.live != nil {
			n++
		}
	}
	return n
}

func (s *Server) acceptLoop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := s.ln.Accept(ctx)
		if err != nil {
			return
		}
		l := &edgeLink{s: s, conn: conn, notify: make(chan struct{}, 1), subs: map[string]bool{}, snaps: map[string][]byte{},
			handles: map[uint32]*sessionState{}}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = conn.CloseWithError(linkio.CodeShutdown, "shard shutting down")
			continue
		}
		s.links[l] = struct{}{}
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.serve(ctx)
			s.mu.Lock()
			delete(s.links, l)
			s.mu.Unlock()
		}()
	}
}

func (s *Server) tickLoop(ctx context.Context) {
	if s.cfg.TickHz == 0 {
		return
	}
	t := time.NewTicker(time.Second / time.Duration(s.cfg.TickHz))
	defer t.Stop()
	var tick uint64
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			tick++
			s.tick(now, tick)
		}
	}
}

// tick advances every instance and sends each snapshot, encoded once, to
// every link subscribed to it.
func (s *Server) tick(now time.Time, tick uint64) {
	ms := uint64(now.UnixMilli())
	s.mu.Lock()
	links := make([]*edgeLink, 0, len(s.links))
	for l := range s.links {
		links = append(links, l)
	}
	frames := make(map[string][]byte, len(s.instances))
	type event struct {
		instance string
		frame    []byte
	}
	var events []event
	for id, in := range s.instances {
		in.step()
		snap := in.snapshot(ms)
		f, err := linkio.Frame(&codec.LinkShardFrame{Msg: &codec.LinkShardFrame_Snapshot{Snapshot: snap}})
		if err != nil {
			s.log.Error("encode snapshot", "instance", id, "err", err)
			continue
		}
		frames[id] = f
		if tick%(uint64(s.cfg.TickHz)*5) == 0 { // a world event every 5 s
			in.eventSeq++
			ev, _ := linkio.Frame(&codec.LinkShardFrame{Msg: &codec.LinkShardFrame_Event{Event: &codec.LinkInstanceEvent{
				InstanceId: id,
				Event:      &codec.WorldEvent{Seq: in.eventSeq, Kind: "ambient.birdsong", ServerTimeMs: ms},
			}}})
			events = append(events, event{id, ev})
		}
	}
	s.mu.Unlock()
	for _, l := range links {
		for id, f := range frames {
			if l.subscribed(id) {
				l.offerSnapshot(id, f)
			}
		}
		for _, ev := range events {
			if l.subscribed(ev.instance) {
				l.offerEvent(ev.frame)
			}
		}
	}
}

// instance is one simulated world. Guarded by Server.mu.
type instance struct {
	id       string
	half     int32
	rng      *rand.Rand
	seq      uint64
	eventSeq uint64
	ents     []codec.Entity // agents and bot players, then nothing else
	vel      [][2]int32     // per ents[i], mm per tick
	players  map[uint32]*codec.Entity
	sessions map[string]*sessionState // live sessions in this instance
}

func newInstance(id string, cfg Config, seed uint64) *instance {
	in := &instance{
		id: id, half: cfg.HalfSizeMM, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		players: map[uint32]*codec.Entity{}, sessions: map[string]*sessionState{},
	}
	perTick := int32(1400 / max(cfg.TickHz, 1)) // ~1.4 m/s walking pace
	add := func(id uint32, kind codec.EntityKind) {
		in.ents = append(in.ents, codec.Entity{
			ID: id, Kind: kind,
			X:        in.rng.Int32N(2*in.half) - in.half,
			Y:        in.rng.Int32N(2*in.half) - in.half,
			Salience: uint32(in.rng.IntN(100)),
		})
		in.vel = append(in.vel, [2]int32{in.rng.Int32N(2*perTick+1) - perTick, in.rng.Int32N(2*perTick+1) - perTick})
	}
	for i := range cfg.Agents {
		add(uint32(i+1), codec.EntityKind_AGENT)
	}
	for i := range cfg.Players {
		add(uint32(500_000+i), codec.EntityKind_PLAYER)
	}
	return in
}

func (in *instance) step() {
	in.seq++
	for i := range in.ents {
		e, v := &in.ents[i], &in.vel[i]
		e.X += v[0]
		e.Y += v[1]
		if e.X > in.half || e.X < -in.half {
			v[0] = -v[0]
			e.X = min(max(e.X, -in.half), in.half)
		}
		if e.Y > in.half || e.Y < -in.half {
			v[1] = -v[1]
			e.Y = min(max(e.Y, -in.half), in.half)
		}
		if in.rng.IntN(200) == 0 { // now and then, change activity
			e.Activity = uint32(in.rng.IntN(4))
		}
	}
}

func (in *instance) snapshot(ms uint64) *codec.AgentStateSnapshot {
	snap := &codec.AgentStateSnapshot{InstanceId: in.id, Sequence: in.seq, ServerTimeMs: ms,
		Entities: make([]*codec.EntityState, 0, len(in.ents)+len(in.players))}
	for _, e := range in.ents {
		snap.Entities = append(snap.Entities, codec.EntityToProto(e))
	}
	for _, e := range in.players {
		snap.Entities = append(snap.Entities, codec.EntityToProto(*e))
	}
	return snap
}
