package matchmaker

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// memFleet is an in-memory Fleet with lease deadlines on a test clock.
type memFleet struct {
	mu       sync.Mutex
	now      func() time.Time
	streamer []*memStreamer
	bySess   map[string]*memStreamer
}

type memStreamer struct {
	Streamer
	session string
	until   time.Time
	playing bool
}

func newMemFleet(now func() time.Time) *memFleet {
	return &memFleet{now: now, bySess: make(map[string]*memStreamer)}
}

// add registers n idle streamers in pop with codecs.
func (f *memFleet) add(pop string, n int, codecs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(codecs) == 0 {
		codecs = []string{"H264"}
	}
	for range n {
		id := fmt.Sprintf("%s-%d", pop, len(f.streamer))
		f.streamer = append(f.streamer, &memStreamer{Streamer: Streamer{ID: id, POP: pop, Codecs: codecs}})
	}
}

// occupy marks n idle streamers of pop as streaming (sessions).
func (f *memFleet) occupy(pop string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.streamer {
		if n == 0 {
			return
		}
		if s.POP == pop && f.state(s) == StateIdle {
			s.playing = true
			n--
		}
	}
}

func (f *memFleet) state(s *memStreamer) State { return f.stateAt(s, f.now()) }

func (f *memFleet) stateAt(s *memStreamer, now time.Time) State {
	switch {
	case s.playing:
		return StateStreaming
	case s.session != "" && now.Before(s.until):
		return StateLeased
	}
	return StateIdle
}

func (f *memFleet) Streamers() []Streamer {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	out := make([]Streamer, len(f.streamer))
	for i, s := range f.streamer {
		out[i] = s.Streamer
		out[i].State = f.stateAt(s, now)
	}
	return out
}

func (f *memFleet) LeaseIdle(pop, codec, sessionID string, until time.Time) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	for _, s := range f.streamer {
		if s.POP == pop && f.stateAt(s, now) == StateIdle && slices.ContainsFunc(s.Codecs, func(c string) bool { return strings.EqualFold(c, codec) }) {
			s.session, s.until = sessionID, until
			f.bySess[sessionID] = s
			return s.ID, nil
		}
	}
	return "", ErrNoIdleStreamer
}

func (f *memFleet) Release(sessionID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.bySess[sessionID]; ok {
		s.session = ""
		delete(f.bySess, sessionID)
	}
}

var _ Fleet = (*memFleet)(nil)
