package sfu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oshun/egbe-edge/state"
)

// A voice room lives on one edge at a time (DESIGN.md section 8): the
// mixing decisions need every speaker and listener of the room in one
// process. The room table (state.VoiceRooms: memory on one edge, Redis in a
// fleet) pins room -> edge. A join on an edge that does not hold the room
// is refused with 409 voice_room_elsewhere naming the holder's URL; the
// client moves its realtime session there (a resume: same session id and
// shard) and joins voice on that edge, so presence and voice controls
// reach the SFU that mixes the room without any cross-edge relay.
//
// While it has peers in a room, the holder heartbeats (RoomHeartbeat); when
// it dies, the room is free after the table's AliveTTL and the first
// client to re-join elsewhere takes it there. When the last peer leaves,
// the room is released at once.

// ErrRoomElsewhere: the room is held by another edge (RoomElsewhereError
// carries which).
var ErrRoomElsewhere = errors.New("sfu: voice room lives on another edge")

// ErrStateUnavailable: the shared room table cannot be reached.
var ErrStateUnavailable = errors.New("sfu: voice room table unavailable")

// RoomElsewhereError names the edge holding a room.
type RoomElsewhereError struct {
	Room   string
	Holder state.RoomHolder
}

func (e *RoomElsewhereError) Error() string {
	return fmt.Sprintf("voice room %q lives on edge %s (%s): move the realtime session there and join again", e.Room, e.Holder.EdgeID, e.Holder.URL)
}

func (e *RoomElsewhereError) Unwrap() error { return ErrRoomElsewhere }

// claimRoom checks that room lives here (claiming it when free) and counts
// an in-flight join so that a concurrent last leave does not release it.
// The caller calls the returned done once the peer is in the room (or the
// join failed).
func (s *SFU) claimRoom(ctx context.Context, room string) (done func(), err error) {
	if s.deps.Rooms == nil {
		return func() {}, nil
	}
	s.mu.Lock()
	s.joining[room]++
	s.mu.Unlock()
	done = func() {
		s.mu.Lock()
		if s.joining[room]--; s.joining[room] <= 0 {
			delete(s.joining, room)
		}
		s.mu.Unlock()
		s.maybeRelease(room)
	}
	holder, mine, err := s.deps.Rooms.Claim(ctx, room)
	switch {
	case err != nil:
		done()
		return nil, fmt.Errorf("%w: %w", ErrStateUnavailable, err)
	case !mine:
		done()
		s.m.roomRedirects.Inc()
		return nil, &RoomElsewhereError{Room: room, Holder: holder}
	}
	return done, nil
}

// maybeRelease gives up room when no peer is in it and no join is under
// way. It runs off the caller's goroutine: leave paths hold no network.
func (s *SFU) maybeRelease(room string) {
	if s.deps.Rooms == nil {
		return
	}
	s.mu.Lock()
	empty := len(s.rooms[room]) == 0 && s.joining[room] == 0 && !s.closed
	s.mu.Unlock()
	if !empty {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		// Re-check: a join may have started while this goroutine did.
		s.mu.Lock()
		empty := len(s.rooms[room]) == 0 && s.joining[room] == 0
		s.mu.Unlock()
		if !empty {
			return
		}
		if err := s.deps.Rooms.Release(ctx, room); err != nil {
			// The key expires after the table's RoomTTL without heartbeats.
			s.log.Warn("voice room release failed", "room", room, "err", err)
		}
	}()
}

// heartbeatRooms keeps this edge's rooms and ends the peers of any room
// another edge took (this edge missed heartbeats, e.g. a Redis partition):
// their clients re-join and are sent to the room's new edge, so a room
// never stays split.
func (s *SFU) heartbeatRooms(ctx context.Context) {
	s.mu.Lock()
	rooms := make([]string, 0, len(s.rooms))
	for r, ps := range s.rooms {
		if len(ps) > 0 {
			rooms = append(rooms, r)
		}
	}
	s.mu.Unlock()
	hctx, cancel := context.WithTimeout(ctx, s.cfg.RoomHeartbeat)
	defer cancel()
	lost, err := s.deps.Rooms.Heartbeat(hctx, rooms)
	if err != nil {
		s.m.roomHeartbeatErrors.Inc()
		s.log.Warn("voice room heartbeat failed: live voice continues, new joins are refused until the room table is back", "err", err)
		return
	}
	for _, room := range lost {
		s.m.roomsLost.Inc()
		s.mu.Lock()
		var peers []*peer
		for p := range s.rooms[room] {
			peers = append(peers, p)
		}
		s.mu.Unlock()
		s.log.Warn("voice room taken by another edge: ending its peers here so they re-join there", "room", room, "peers", len(peers))
		for _, p := range peers {
			s.goLeave(p)
		}
	}
}
