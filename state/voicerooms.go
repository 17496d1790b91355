package state

import (
	"context"
	"sync"
	"time"
)

// RoomHolder names the edge a voice room lives on and the base URL its
// clients reach it at.
type RoomHolder struct {
	EdgeID string
	URL    string
}

// VoiceRooms pins each voice room to one edge at a time. A room is held by
// the edge that claimed it for as long as that edge is alive (it heartbeats)
// and keeps the room (it has voice peers there); an edge that stops
// heartbeating loses its rooms to the next edge that claims them.
type VoiceRooms interface {
	// Claim returns the room's holder and whether that is this edge (the
	// room was free, its holder dead, or this edge held it already).
	Claim(ctx context.Context, room string) (holder RoomHolder, mine bool, err error)
	// Heartbeat marks this edge alive and keeps the rooms it holds
	// (re-claiming any whose key was lost). It returns the rooms another
	// edge holds now.
	Heartbeat(ctx context.Context, rooms []string) (lost []string, err error)
	// Release gives room up if this edge holds it.
	Release(ctx context.Context, room string) error
}

// VoiceRoomTimes are the liveness windows. An edge is dead AliveTTL after
// its last beat (its membership's TTL: members.go); a room key outlives
// its holder's heartbeats by RoomTTL so that a slow heartbeat never drops
// it.
type VoiceRoomTimes struct {
	AliveTTL time.Duration
	RoomTTL  time.Duration
}

// DefaultVoiceRoomTimes: a dead edge's rooms move within 3 s.
var DefaultVoiceRoomTimes = VoiceRoomTimes{AliveTTL: DefaultMemberTTL, RoomTTL: time.Minute}

func (t VoiceRoomTimes) orDefault() VoiceRoomTimes {
	if t.AliveTTL <= 0 {
		t.AliveTTL = DefaultVoiceRoomTimes.AliveTTL
	}
	if t.RoomTTL <= t.AliveTTL {
		t.RoomTTL = max(DefaultVoiceRoomTimes.RoomTTL, 3*t.AliveTTL)
	}
	return t
}

// MemoryVoiceRoomsStore is the in-process room table, on an in-process
// membership (a claim and a heartbeat beat the claiming edge). One edge
// uses For(itself); tests hand several edges the same store.
type MemoryVoiceRoomsStore struct {
	members *MemoryMembersStore // immutable

	mu    sync.Mutex
	rooms map[string]string // guarded by mu: room -> edge id
}

// NewMemoryVoiceRooms returns an empty store on a membership of its own
// with times.AliveTTL; now may be nil (time.Now).
func NewMemoryVoiceRooms(now func() time.Time, times VoiceRoomTimes) *MemoryVoiceRoomsStore {
	return &MemoryVoiceRoomsStore{members: NewMemoryMembers(now, times.orDefault().AliveTTL), rooms: map[string]string{}}
}

// For returns edge's view of the store.
func (m *MemoryVoiceRoomsStore) For(edgeID, url string) VoiceRooms {
	return &memoryVoiceRooms{m: m, me: &MemoryMembers{s: m.members, me: Member{ID: edgeID, URL: url}}}
}

type memoryVoiceRooms struct {
	m  *MemoryVoiceRoomsStore
	me *MemoryMembers
}

// lock takes the room table and the membership, in that order, and beats
// this edge.
func (v *memoryVoiceRooms) lock() (now time.Time, unlock func()) {
	v.m.mu.Lock()
	ms := v.m.members
	ms.mu.Lock()
	now = ms.now()
	v.me.beatLocked(now)
	return now, func() { ms.mu.Unlock(); v.m.mu.Unlock() }
}

func (v *memoryVoiceRooms) Claim(_ context.Context, room string) (RoomHolder, bool, error) {
	now, unlock := v.lock()
	defer unlock()
	m, ms := v.m, v.m.members
	if h, ok := m.rooms[room]; ok && h != v.me.me.ID && ms.aliveLocked(h, now) {
		return RoomHolder{EdgeID: h, URL: ms.urls[h]}, false, nil
	}
	m.rooms[room] = v.me.me.ID
	return RoomHolder{EdgeID: v.me.me.ID, URL: v.me.me.URL}, true, nil
}

func (v *memoryVoiceRooms) Heartbeat(_ context.Context, rooms []string) ([]string, error) {
	_, unlock := v.lock()
	defer unlock()
	m := v.m
	var lost []string
	for _, r := range rooms {
		switch h, ok := m.rooms[r]; {
		case !ok:
			m.rooms[r] = v.me.me.ID
		case h != v.me.me.ID:
			lost = append(lost, r)
		}
	}
	return lost, nil
}

func (v *memoryVoiceRooms) Release(_ context.Context, room string) error {
	m := v.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rooms[room] == v.me.me.ID {
		delete(m.rooms, room)
	}
	return nil
}
