package shard

import (
	"slices"
	"time"

	"github.com/oshun/egbe-edge/codec"
)

// fullEquivSample: one delta in this many is sized as a full snapshot for
// egbe_shard_replication_full_equivalent_bytes_total.
const fullEquivSample = 8

// resendUnacked is how often an unchanged projection sent on the
// unreliable lane and not acknowledged is sent again: the repair for a
// lost datagram while the world stands still, and the most an idle client
// that never acks is sent (a keepalive of at most 1 Hz).
const resendUnacked = time.Second

// writeLoop is the only writer of the client (both lanes), in the shape of
// DERP's sendLoop: woken when anything is queued, it writes everything —
// control messages first, then the newest action ack, then the newest
// state projected for this client — and flushes once when nothing is left,
// so a burst leaves in one syscall when the transport batches.
func (s *session) writeLoop() {
	for {
		select {
		case <-s.notify:
		case <-s.ctx.Done():
			s.flushFinal()
			return
		}
		if !s.writeAll() {
			return
		}
		if !s.flush() {
			return
		}
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
	b := s.buf[:0]
	var err error
	switch it.kind {
	case outPong:
		if s.json {
			b, err = codec.EncodeServer(b, &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_Pong{Pong: &codec.Pong{ClientTimeMs: it.a, ServerTimeMs: it.b}}}, true)
		} else {
			b = codec.AppendPongEnvelope(b, it.a, it.b)
		}
	case outAck:
		if s.json {
			b, err = codec.EncodeServer(b, &codec.ServerEnvelope{Msg: &codec.ServerEnvelope_ActionAck{ActionAck: &codec.ActionAck{ActionId: it.a}}}, true)
		} else {
			b = codec.AppendActionAckEnvelope(b, it.a)
		}
	case outRaw:
		if s.json {
			b, err = codec.EncodeServer(b, it.env, true)
		} else {
			b = append(b, it.raw...)
		}
	default:
		b, err = codec.EncodeServer(b, it.env, s.json)
	}
	if err != nil {
		s.g.m.drops.WithLabelValues(dropBadMessage).Inc()
		return true
	}
	s.buf = b
	if err := s.c.WriteReliable(s.wctx, b); err != nil {
		s.stop(stopCause{})
		return false
	}
	s.unflushed = true
	return true
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
	s.hist = append(s.hist, sentState{seq: seq, ents: arr, reliable: reliable, at: time.Now()})
}

// sendState projects sn to this client's window and sends it as a delta
// against the newest state the client acknowledged (or in full) — unless
// nothing changed: then nothing is sent.
func (s *session) sendState(sn *sharedSnap) bool {
	s.winMu.Lock()
	win := s.win
	s.winDirty = false
	s.winMu.Unlock()
	m := s.g.m
	w := &sn.world
	s.cur = sn.index.Project(s.cur[:0], win)
	m.projected.Inc()

	acked := s.acked.Load()
	s.trimHistory(acked)
	var base *sentState
	if len(s.hist) > 0 && s.hist[0].seq == acked {
		base = &s.hist[0]
	}
	// Nothing changed since the state the client acknowledged, or since
	// the one already on its way on the reliable lane: nothing to send.
	if base != nil && slices.Equal(base.ents, s.cur) {
		s.settle(sn.ver)
		return true
	}
	if n := len(s.hist); n > 0 {
		last := &s.hist[n-1]
		if last.seq > acked && slices.Equal(last.ents, s.cur) {
			if last.reliable {
				s.settle(sn.ver)
				return true
			}
			if time.Since(last.at) < resendUnacked {
				return true // not settled: looked at again next tick
			}
		}
	}
	if !s.deltas {
		base = nil
	}

	var b []byte
	if base != nil {
		s.ups, s.rms = codec.Diff(s.ups[:0], s.rms[:0], base.ents, s.cur)
		b = codec.AppendDeltaEnvelope(s.buf[:0], w.InstanceID, base.seq, w.Sequence, w.ServerTimeMs, s.ups, s.rms)
	} else {
		b = codec.AppendSnapshotEnvelope(s.buf[:0], w.InstanceID, w.Sequence, w.ServerTimeMs, s.cur)
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
			m.fullEquiv.Add(float64(fullEquivSample * codec.SnapshotEnvelopeSize(w.InstanceID, w.Sequence, w.ServerTimeMs, s.cur)))
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
	s.remember(w.Sequence, s.cur, reliable)
	if reliable {
		s.settle(sn.ver)
	}
	return true
}
