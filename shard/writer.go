package shard

import (
	"github.com/oshun/egbe-edge/codec"
)

// fullEquivSample: one delta in this many is sized as a full snapshot for
// egbe_shard_replication_full_equivalent_bytes_total.
const fullEquivSample = 8

// writeLoop is the only writer of the client's reliable lane (and the
// sender of its unreliable one): control messages first, then the latest
// snapshot, projected for this client.
func (s *session) writeLoop() {
	for {
		select {
		case env := <-s.ctrl:
			if !s.writeEnv(env) {
				return
			}
			continue
		default:
		}
		select {
		case env := <-s.ctrl:
			if !s.writeEnv(env) {
				return
			}
		case <-s.snapNotify:
			if !s.sendSnapshot() {
				return
			}
		case <-s.ctx.Done():
			s.flush()
			return
		}
	}
}

// flush writes what is queued and the final message, within the grace
// period.
func (s *session) flush() {
	for {
		select {
		case env := <-s.ctrl:
			if !s.writeEnv(env) {
				return
			}
			continue
		default:
		}
		break
	}
	if final := s.stopCause().final; final != nil {
		s.writeEnv(final)
	}
}

func (s *session) writeEnv(env *codec.ServerEnvelope) bool {
	b, err := codec.EncodeServer(s.buf[:0], env, s.json)
	if err != nil {
		s.g.m.drops.WithLabelValues(dropBadMessage).Inc()
		return true
	}
	s.buf = b
	if err := s.c.WriteReliable(s.wctx, b); err != nil {
		s.stop(stopCause{})
		return false
	}
	return true
}

// sendSnapshot projects the pending instance snapshot to this client's
// window and sends it as a delta against the newest acknowledged projection
// it still holds (or in full), if the budget allows.
func (s *session) sendSnapshot() bool {
	s.snapMu.Lock()
	w := s.snapPending
	s.snapPending = nil
	s.snapMu.Unlock()
	if w == nil {
		return true
	}
	s.winMu.Lock()
	win := s.win
	s.winMu.Unlock()
	m := s.g.m
	s.cur = codec.Project(s.cur[:0], w, win)
	m.projected.Inc()

	var base *sent
	if s.deltas {
		if a := s.acked.Load(); a != 0 {
			for i := range s.hist {
				if h := &s.hist[i]; h.seq == a {
					base = h
					break
				}
			}
		}
	}
	var b []byte
	delta := false
	if base != nil {
		s.ups, s.rms = codec.Diff(s.ups[:0], s.rms[:0], base.ents, s.cur)
		b = codec.AppendDeltaEnvelope(s.buf[:0], w.InstanceID, base.seq, w.Sequence, w.ServerTimeMs, s.ups, s.rms)
		delta = true
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
	if delta {
		// What a full snapshot would have cost, sampled 1 in fullEquivSample
		// deltas (sizing one costs a tenth of the send).
		if s.deltaCount++; s.deltaCount%fullEquivSample == 0 {
			m.fullEquiv.Add(float64(fullEquivSample * codec.SnapshotEnvelopeSize(w.InstanceID, w.Sequence, w.ServerTimeMs, s.cur)))
		}
	}
	switch {
	case s.unreliable && len(b) <= s.g.cfg.MaxDatagramBytes:
		if err := s.c.WriteUnreliable(b); err != nil {
			m.dropUnreliableC.Inc()
			return true
		}
	default:
		// No unreliable lane, or too big for one datagram (a full window
		// snapshot can be): the reliable lane. The slot above keeps it
		// latest-wins either way.
		if s.unreliable {
			m.oversizeReliable.Inc()
		}
		if err := s.c.WriteReliable(s.wctx, b); err != nil {
			s.stop(stopCause{})
			return false
		}
	}
	if delta {
		m.bytesDelta.Add(float64(len(b)))
	} else {
		m.bytesFull.Add(float64(len(b)))
	}
	// Remember what was sent: it may become a delta base.
	h := &s.hist[s.histPos]
	s.histPos = (s.histPos + 1) % historyLen
	h.seq = w.Sequence
	h.ents = append(h.ents[:0], s.cur...)
	return true
}
