package state_test

import (
	"sync"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/state/statetest"
)

// The memory implementations under the contracts every store keeps
// (state/statetest); state/redisstate runs the same on Redis.

func TestMemoryContracts(t *testing.T) {
	t.Run("queue", func(t *testing.T) {
		statetest.QueueContract(t, func(*testing.T) (state.Queue, func()) {
			q := state.NewMemoryQueue()
			return q, q.Wipe
		})
	})
	t.Run("leases", func(t *testing.T) { statetest.LeasesContract(t, state.NewMemoryLeases()) })
	t.Run("budgets", func(t *testing.T) { statetest.BudgetsContract(t, state.NewMemoryBudgets()) })
	t.Run("kv", func(t *testing.T) { statetest.KVContract(t, state.NewMemoryKV(nil)) })
	t.Run("tallies", func(t *testing.T) { statetest.TalliesContract(t, state.NewMemoryTallies()) })
	t.Run("seats", func(t *testing.T) {
		statetest.SeatsContract(t, func(*testing.T) state.Seats { return state.NewMemorySeats() }, false)
	})
	t.Run("revocations", func(t *testing.T) {
		statetest.RevocationsContract(t, state.NewMemoryRevocations(nil), state.NewMemoryKV(nil), nil)
	})
	t.Run("revocation-notices", func(t *testing.T) {
		r := state.NewMemoryRevocations(nil)
		statetest.RevocationNoticesContract(t, r, r)
	})
	t.Run("shards", func(t *testing.T) {
		statetest.ShardDirectoryContract(t, func(*testing.T) state.ShardDirectory { return state.NewMemoryShardDirectory(nil) })
	})
	t.Run("voicerooms", func(t *testing.T) {
		clock, advance := fakeClock()
		times := state.VoiceRoomTimes{AliveTTL: 3 * time.Second, RoomTTL: time.Minute}
		statetest.VoiceRoomsContract(t, state.NewMemoryVoiceRooms(clock, times).For, advance, times)
	})
	t.Run("streamers", func(t *testing.T) { statetest.StreamersContract(t, state.NewMemoryStreamers(nil)) })
	t.Run("inbox", func(t *testing.T) { statetest.InboxContract(t, state.NewMemoryInbox()) })
	t.Run("members", func(t *testing.T) {
		clock, advance := fakeClock()
		const ttl = 3 * time.Second
		s := state.NewMemoryMembers(clock, ttl)
		statetest.MembersContract(t, ttl, func(me state.Member) state.Members {
			m, err := s.For(me)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}, advance)
	})
}

// fakeClock is a clock that moves only when told.
func fakeClock() (now func() time.Time, advance func(time.Duration)) {
	var mu sync.Mutex
	t := statetest.T0
	return func() time.Time { mu.Lock(); defer mu.Unlock(); return t },
		func(d time.Duration) { mu.Lock(); t = t.Add(d); mu.Unlock() }
}
