package sfu

import (
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/codec"
	"github.com/oshun/egbe-edge/internal/testwait"
)

func mute(id uint32) *codec.VoiceControl {
	return &codec.VoiceControl{Op: &codec.VoiceControl_MuteEntityId{MuteEntityId: id}}
}
func unmute(id uint32) *codec.VoiceControl {
	return &codec.VoiceControl{Op: &codec.VoiceControl_UnmuteEntityId{UnmuteEntityId: id}}
}
func joinSquad(s string) *codec.VoiceControl {
	return &codec.VoiceControl{Op: &codec.VoiceControl_JoinSquad{JoinSquad: s}}
}
func leaveSquad(s string) *codec.VoiceControl {
	return &codec.VoiceControl{Op: &codec.VoiceControl_LeaveSquad{LeaveSquad: s}}
}

// member describes one test participant.
type tm struct {
	id     byte
	room   string
	pos    [3]int32
	acc    auth.Access
	squads []string
}

func (e *testEnv) joinAll(slots int, ms ...tm) []*client {
	e.t.Helper()
	var cs []*client
	for _, m := range ms {
		sid := sessionName(m.id)
		tok := e.session(sid, "user"+sid, m.room, uint32(m.id), m.acc)
		e.sfu.UpdatePosition(sid, m.pos[0], m.pos[1], m.pos[2])
		for _, s := range m.squads {
			if err := e.sfu.Control(sid, joinSquad(s)); err != nil {
				e.t.Fatal(err)
			}
		}
		cs = append(cs, e.join(tok, sid, m.id, slots))
	}
	return cs
}

func sessionName(id byte) string { return "s" + string('0'+rune(id)) }

func TestEligibility(t *testing.T) {
	far := [3]int32{1_000_000, 0, 0} // 1 km
	t.Run("rooms", func(t *testing.T) {
		e := newEnv(t, nil)
		cs := e.joinAll(2, tm{id: 1, room: "r1"}, tm{id: 2, room: "r1"}, tm{id: 3, room: "r2"})
		expectHearing(t, cs, map[*client][]byte{cs[0]: {2}, cs[1]: {1}})
	})
	t.Run("mute", func(t *testing.T) {
		e := newEnv(t, nil)
		cs := e.joinAll(2, tm{id: 1, room: "r"}, tm{id: 2, room: "r"}, tm{id: 3, room: "r"})
		expectHearing(t, cs, map[*client][]byte{cs[0]: {2, 3}, cs[1]: {1, 3}, cs[2]: {1, 2}})
		if err := e.sfu.Control(sessionName(1), mute(2)); err != nil {
			t.Fatal(err)
		}
		expectHearing(t, cs, map[*client][]byte{cs[0]: {3}, cs[1]: {1, 3}, cs[2]: {1, 2}})
		if err := e.sfu.Control(sessionName(1), unmute(2)); err != nil {
			t.Fatal(err)
		}
		expectHearing(t, cs, map[*client][]byte{cs[0]: {2, 3}, cs[1]: {1, 3}, cs[2]: {1, 2}})
	})
	t.Run("squad_and_range", func(t *testing.T) {
		e := newEnv(t, nil)
		cs := e.joinAll(2,
			tm{id: 1, room: "r", squads: []string{"alpha"}},
			tm{id: 2, room: "r", pos: far, squads: []string{"alpha"}}, // squad: range does not matter
			tm{id: 3, room: "r", pos: [3]int32{0, 1_000_000, 0}},      // out of range of both, no squad
		)
		expectHearing(t, cs, map[*client][]byte{cs[0]: {2}, cs[1]: {1}})
		// 3 walks into range of 2 (async recompute on movement).
		e.sfu.UpdatePosition(sessionName(3), far[0]+1000, 0, 0)
		expectHearing(t, cs, map[*client][]byte{cs[0]: {2}, cs[1]: {1, 3}, cs[2]: {2}})
		// 2 leaves the squad: now only proximity applies.
		if err := e.sfu.Control(sessionName(2), leaveSquad("alpha")); err != nil {
			t.Fatal(err)
		}
		expectHearing(t, cs, map[*client][]byte{cs[1]: {3}, cs[2]: {2}})
	})
	t.Run("parental", func(t *testing.T) {
		e := newEnv(t, nil)
		friendOf4 := auth.Access{Minor: true, Voice: auth.VoiceFriendsOnly, Friends: []string{"user" + sessionName(1)}}
		cs := e.joinAll(4,
			tm{id: 1, room: "r"},
			tm{id: 2, room: "r", squads: []string{"sq"}},
			tm{id: 3, room: "r", squads: []string{"sq"}, acc: auth.Access{Minor: true, Voice: auth.VoiceSquadOnly}},
			tm{id: 4, room: "r", acc: friendOf4},
			tm{id: 5, room: "r", acc: auth.Access{Minor: true, Voice: auth.VoiceOff}},
		)
		expectHearing(t, cs, map[*client][]byte{
			cs[0]: {2, 4}, // not 3 (squad-only), not 5 (off)
			cs[1]: {1, 3}, // 3 is in its squad; 4 is friends-only with 1 only
			cs[2]: {2},    // squad-only: its squad
			cs[3]: {1},    // friends-only: its friend
			cs[4]: {},     // off: nothing in
		})
	})
	t.Run("top_k", func(t *testing.T) {
		e := newEnv(t, nil)
		// Listener 1 with K=2; 2..5 speak at different levels; 5 is quiet
		// but in 1's squad, so it ranks first; 2 is loudest of the rest.
		cs := e.joinAll(2, tm{id: 1, room: "r", squads: []string{"sq"}})
		levels := map[byte]int32{2: 10, 3: 25, 4: 40, 5: 45}
		for id := byte(2); id <= 5; id++ {
			m := tm{id: id, room: "r", pos: [3]int32{int32(id) * 1000, 0, 0}}
			if id == 5 {
				m.squads = []string{"sq"}
			}
			c := e.joinAll(2, m)[0]
			c.level.Store(levels[id])
			cs = append(cs, c)
		}
		testwait.Within(t, 5*time.Second, "listener 1's slots to settle", func() bool {
			ev := e.notes.last(sessionName(1))
			return ev != nil && len(ev.ActiveSpeakerEntityIds) == 2 &&
				((ev.SlotEntityIds[0] == 2 && ev.SlotEntityIds[1] == 5) || (ev.SlotEntityIds[0] == 5 && ev.SlotEntityIds[1] == 2))
		})
		expectHearing(t, cs[:1], map[*client][]byte{cs[0]: {5, 2}})
		// 2 goes quiet (level 127 = silence): 3 is now the loudest non-squad.
		cs[1].level.Store(127)
		testwait.Within(t, 5*time.Second, "slot switch to speaker 3", func() bool { return cs[0].snapshot()[3] > 0 })
		expectHearing(t, cs[:1], map[*client][]byte{cs[0]: {5, 3}})
	})
}
