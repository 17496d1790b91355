package shard

import (
	"slices"
	"sync"
	"time"

	"github.com/oshun/egbe-edge/codec"
)

// fullEquivSample: one delta in this many is sized as a full snapshot for
// egbe_shard_replication_full_equivalent_bytes_total.
const fullEquivSample = 8

// maxInFlight bounds the states sent beyond the newest one a client acked
// (see sendState); below historyLen, so its base is never evicted.
const maxInFlight = historyLen / 2

// resendUnacked is how often an unchanged projection sent on the
// unreliable lane and not acknowledged is sent again: the repair for a
// lost datagram while the world stands still, and the most an idle client
// that never acks is sent (a keepalive of at most 1 Hz).
const resendUnacked = time.Second

// writerIdle is how long a writer with nothing to write waits before it
// ends (the next message starts another): longer than a few ticks, so a
// session with traffic keeps its writer, short enough that idle sessions
// hold few writer stacks at any moment.
const writerIdle = 250 * time.Millisecond

// writeLoop is the only writer of the client (both lanes), in the shape of
// DERP's sendLoop: woken when anything is queued, it writes everything —
// control messages first, then the newest action ack, then the newest
// state projected for this client — and flushes once when nothing is left,
// so a burst leaves in one syscall when the transport batches. At most one
// runs at a time (writerOn); it ends after writerIdle without work, and
// when the session stops, after writing the final message and closing the
// connection (which also unblocks a transport Read that does not watch its
// context).
func (s *session) writeLoop() {
	idle := time.NewTimer(writerIdle)
	defer idle.Stop()
	for {
		select {
		case <-s.notify:
		case <-s.ctx.Done():
			s.flushFinal()
			s.closeConn()
			return // writerOn stays set: the session is over
		case <-idle.C:
			s.writerOn.Store(false)
			// A wake between the timer and the store saw a writer running:
			// its message is waiting; carry on unless another writer did.
			if len(s.notify) == 0 || !s.writerOn.CompareAndSwap(false, true) {
				return
			}
			idle.Reset(writerIdle)
			continue
		}
		if !s.writeAll() || !s.flush() {
			s.closeConn()
			return
		}
		idle.Reset(writerIdle)
	}
}

// flush hands what the reliable lane buffered to the network.
func (s *session) flush() bool {
	if !s.unflushed {
		return true
	}
	s.unflushed = false
	if err := s.c.Flush(s.wctx); err != nil {
		s.stop(stopCause{})
		return false
	}
	return true
}

// writeAll writes what is queued until nothing is.
func (s *session) writeAll() bool {
	for s.ctx.Err() == nil {
		did, ok := s.writeControl()
		if !ok {
			return false
		}
		if sn := s.takeSnap(); sn != nil {
			did = true
			ok := s.sendState(sn)
			sn.release()
			if !ok {
				return false
			}
		}
		if !did {
			return true
		}
	}
	return true
}

// writeControl writes the queued reliable messages and the newest action
// ack.
func (s *session) writeControl() (did, ok bool) {
	for {
		it, more := s.ctrl.pop()
		if !more {
			break
		}
		did = true
		if !s.writeItem(it) {
			return did, false
		}
	}
	if a := s.actionAck.Load(); a > s.sentAck {
		s.sentAck, did = a, true
		s.g.m.downAck.Inc()
		if !s.writeItem(outItem{kind: outAck, a: a}) {
			return did, false
		}
	}
	return did, true
}

// flushFinal writes what is queued and the final message, within the
// grace period, and flushes.
func (s *session) flushFinal() {
	if _, ok := s.writeControl(); !ok {
		return
	}
	if final := s.stopCause().final; final != nil {
		if !s.writeItem(outItem{kind: outEnv, env: final}) {
			return
		}
	}
	s.flush()
}

// writeItem encodes and writes one reliable message.
func (s *session) writeItem(it outItem) bool {
	var b []byte
	var err error
	switch {
	case it.kind == outPre, it.kind == outRaw && !s.json:
		b = it.raw // written as it is: not copied into the session's buffer
	case it.kind == outPong && !s.json:
		b = codec.AppendPongEnvelope(s.buf[:0], it.a, it.b)
	case it.kind == outAck && !s.json:
		b = codec.AppendActionAckEnvelope(s.buf[:0], it.a)
	default:
		env := it.env
		switch it.kind {
		case outPong:
			env = &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Pong{Pong: &codec.Pong{ClientTimeMs: it.a, ServerTimeMs: it.b}}}
		case outAck:
			env = &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_ActionAck{ActionAck: &codec.ActionAck{ActionId: it.a}}}
		}
		b, err = codec.EncodeServer(s.buf[:0], env, s.json)
	}
	if err != nil {
		s.g.m.drops.WithLabelValues(dropBadMessage).Inc()
		return true
	}
	if it.kind != outPre && it.kind != outRaw {
		s.buf = b
	}
	if err := s.c.WriteReliable(s.wctx, b); err != nil {
		s.stop(stopCause{})
		return false
	}
	s.unflushed = true
	return true
}

// projScratch is the working arrays of one projection, pooled by the
// gateway (Gateway.scratch).
type projScratch struct {
	cur, ups []codec.Entity
	rms      []uint32
}

// scratchPool lends projScratches to writers: as many exist as writers
// ever projected at once (a sync.Pool would also do, but may allocate
// under the race detector, where the allocation tests run).
type scratchPool struct {
	mu   sync.Mutex
	free []*projScratch // guarded by mu
}

func (p *scratchPool) get() *projScratch {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		sc := p.free[n-1]
		p.free = p.free[:n-1]
		return sc
	}
	const n = codec.GroundVisibleAgentCap + codec.GroundVisiblePlayerCap
	return &projScratch{cur: make([]codec.Entity, 0, n), ups: make([]codec.Entity, 0, n), rms: make([]uint32, 0, n)}
}

func (p *scratchPool) put(sc *projScratch) {
	p.mu.Lock()
	p.free = append(p.free, sc)
	p.mu.Unlock()
}

// settle records that the client holds everything its window shows at
// content version ver, unless the window moved meanwhile.
func (s *session) settle(ver uint64) {
	s.winMu.Lock()
	if !s.winDirty {
		s.settled.Store(ver)
	}
	s.winMu.Unlock()
}

// trimHistory forgets the sent states older than the acknowledged one:
// acks only move forward, so they can never be a base again.
func (s *session) trimHistory(acked uint64) {
	k := 0
	for k < len(s.hist) && s.hist[k].seq < acked {
		k++
	}
	if k == 0 {
		return
	}
	for i := range k {
		s.free = append(s.free, s.hist[i].ents[:0])
	}
	n := copy(s.hist, s.hist[k:])
	clear(s.hist[n:])
	s.hist = s.hist[:n]
}

// remember records a sent projection as a possible delta base.
func (s *session) remember(seq uint64, ents []codec.Entity, reliable bool) {
	if len(s.hist) == historyLen {
		s.free = append(s.free, s.hist[0].ents[:0])
		n := copy(s.hist, s.hist[1:])
		s.hist = s.hist[:n]
	}
	var arr []codec.Entity
	if len(ents) > 0 {
		if n := len(s.free); n > 0 {
			arr, s.free = s.free[n-1], s.free[:n-1]
		}
		arr = append(arr[:0], ents...)
	}
	s.hist = append(s.hist, sentState{seq: seq, ents: arr, reliable: reliable, at: s.g.now()})
}

// sendState projects sn to this client's window and sends it as a delta
// against the newest state the client acknowledged (or in full) — unless
// nothing changed: then nothing is sent.
func (s *session) sendState(sn *sharedSnap) bool {
	m := s.g.m
	w := &sn.world
	acked := s.acked.Load()
	s.trimHistory(acked)
	// A client that acks but lags (a slow link, an overloaded device) is
	// not sent more than maxInFlight states ahead of its acks: more would
	// only queue behind them, and its acked base would fall out of the
	// history (a full snapshot each time: more bytes for a client already
	// behind). It still gets a state at least every resendUnacked.
	if acked != 0 && len(s.hist) > maxInFlight {
		if last := &s.hist[len(s.hist)-1]; s.g.now().Sub(last.at) < resendUnacked {
			m.dropInFlightC.Inc()
			return true // not settled: looked at again next tick
		}
	}
	var base *sentState
	if len(s.hist) > 0 && s.hist[0].seq == acked {
		base = &s.hist[0]
	}

	s.winMu.Lock()
	win := s.win
	s.winDirty = false
	s.winMu.Unlock()
	// The projection's working arrays are the edge's, lent for the send: a
	// session keeps only what it sent (its history).
	sc := s.g.scratch.get()
	defer s.g.scratch.put(sc)
	sc.cur = sn.index.Project(sc.cur[:0], win)
	cur := sc.cur
	m.projected.Inc()

	// Nothing changed since the state the client acknowledged, or since
	// the one already on its way on the reliable lane: nothing to send.
	if base != nil && slices.Equal(base.ents, cur) {
		s.settle(sn.ver)
		return true
	}
	if n := len(s.hist); n > 0 {
		last := &s.hist[n-1]
		if last.seq > acked && slices.Equal(last.ents, cur) {
			if last.reliable {
				s.settle(sn.ver)
				return true
			}
			if s.g.now().Sub(last.at) < resendUnacked {
				return true // not settled: looked at again next tick
			}
		}
	}
	if !s.deltas {
		base = nil
	}

	var b []byte
	if base != nil {
		sc.ups, sc.rms = codec.Diff(sc.ups[:0], sc.rms[:0], base.ents, cur)
		b = codec.AppendDeltaEnvelope(s.buf[:0], w.InstanceID, base.seq, w.Sequence, w.ServerTimeMs, sc.ups, sc.rms)
	} else {
		b = codec.AppendSnapshotEnvelope(s.buf[:0], w.InstanceID, w.Sequence, w.ServerTimeMs, cur)
	}
	s.buf = b
	if s.json {
		var env codec.ServerEnvelope
		if err := codec.DecodeServer(b, false, &env); err != nil {
			return true
		}
		jb, err := codec.EncodeServer(nil, &env, true)
		if err != nil {
			return true
		}
		b = jb
	}
	// The budget counts what goes on the wire (protojson is larger).
	if !s.budget.Allow(s.g.now().UnixNano(), len(b)) {
		m.dropBudgetC.Inc()
		return true
	}
	if base != nil {
		// What a full snapshot would have cost, sampled 1 in fullEquivSample
		// deltas (sizing one costs a tenth of the send).
		if s.deltaCount++; s.deltaCount%fullEquivSample == 0 {
			m.fullEquiv.Add(float64(fullEquivSample * codec.SnapshotEnvelopeSize(w.InstanceID, w.Sequence, w.ServerTimeMs, cur)))
		}
	}
	reliable := false
	switch {
	case s.unreliable && len(b) <= s.g.cfg.MaxDatagramBytes:
		// What the reliable lane holds (the hello, at first) goes out
		// ahead of the state: a client reads no state before its hello.
		if !s.flush() {
			return false
		}
		if err := s.c.WriteUnreliable(b); err != nil {
			m.dropUnreliableC.Inc()
			return true
		}
	default:
		// No unreliable lane, or too big for one datagram (a full window
		// snapshot can be): the reliable lane. The mailbox keeps it
		// latest-wins either way.
		if s.unreliable {
			m.oversizeReliable.Inc()
		}
		if err := s.c.WriteReliable(s.wctx, b); err != nil {
			s.stop(stopCause{})
			return false
		}
		s.unflushed, reliable = true, true
	}
	if base != nil {
		m.bytesDelta.Add(float64(len(b)))
	} else {
		m.bytesFull.Add(float64(len(b)))
	}
	s.remember(w.Sequence, cur, reliable)
	if reliable {
		s.settle(sn.ver)
	}
	return true
}
