package edge

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/epicplayer"
	"github.com/oshun/egbe-edge/internal/redistest"
	"github.com/oshun/egbe-edge/internal/testwait"
	"github.com/oshun/egbe-edge/signalling"
)

// concertEvents writes an events file with one running concert, "gala"
// at us-east-1, fanned out by sfus (id -> seats, in order), and an
// institution for loopback (so one test host is not capped at 8).
func concertEvents(t *testing.T, clk *testClock, walkUps int, sfus ...any) string {
	t.Helper()
	var list []any
	for i := 0; i+1 < len(sfus); i += 2 {
		list = append(list, map[string]any{"id": sfus[i], "seats": sfus[i+1]})
	}
	return writeJSONFile(t, "events.json", map[string]any{
		"version": 1,
		"events": []any{map[string]any{"id": "gala", "pop": "us-east-1", "start": clk.Now().Add(-10 * time.Minute),
			"end": clk.Now().Add(3 * time.Hour), "walkUpSlots": walkUps, "attendees": []string{"vip-1", "vip-2"},
			"concert": map[string]any{"codec": "H264", "sfus": list}}},
		"institutions": []any{map[string]any{"name": "Loopback College", "networks": []string{"127.0.0.0/24"}}},
	})
}

// concertSeats reads the dashboard endpoint's seats of gala: total used
// and per SFU.
func (te *testEdge) concertSeats(t *testing.T) (used int, perSFU map[string][2]int) {
	t.Helper()
	code, d := te.call(t, http.MethodGet, "/api/v3/pxstream/pop-capacity/dashboard", "", nil)
	if code != http.StatusOK {
		t.Fatalf("dashboard: %d %v", code, d)
	}
	cs, _ := d["concerts"].([]any)
	if len(cs) != 1 {
		t.Fatalf("dashboard concerts %v", d["concerts"])
	}
	c, _ := cs[0].(map[string]any)
	if c["event_id"] != "gala" || c["running"] != true {
		t.Fatalf("dashboard concert %v", c)
	}
	perSFU = map[string][2]int{}
	for _, x := range c["sfus"].([]any) {
		f := x.(map[string]any)
		perSFU[f["sfu_id"].(string)] = [2]int{int(f["seats_used"].(float64)), int(f["seats_capacity"].(float64))}
	}
	return int(c["seats_used"].(float64)), perSFU
}

// TestConcertSeats (issue 14 point 3), through one running edge with its
// in-process Go SFU: a match for a concert takes a seat on the SFU (no
// streamer is leased), answers the SFU's id as the streamer, and the
// player plays through the SFU with that session token; a free walk-up
// also takes its walk-up slot (the next walk-up falls back); a booked
// attendee takes the last seat, and the next is refused
// fallback-concert-full with the fallback; the dashboard shows the seats;
// the seat stays through the reconnect grace after the player leaves and
// is free after it; a seat whose player never comes lapses with its
// session token.
func TestConcertSeats(t *testing.T) {
	clk := newTestClock()
	te := startEdge(t, chain(withClock(clk), func(c *Config) {
		c.JWTSecret = testJWTSecret
		c.PxstreamAuth = "token"
		c.DevStreamers, c.PxSFU, c.PxSFUStreamer = 1, 1, "DevStreamer1"
		c.PxstreamEvents = concertEvents(t, clk, 1, "SFU", 2)
	}))
	token := func(sub string) string {
		return te.accessToken(t, auth.Access{Subject: sub, Entitlement: "free", Region: "us-east"})
	}
	gala := map[string]any{"event_id": "gala"}
	code, m := te.matchAs(t, token("walker-1"), gala)
	seat, _ := m["seat"].(map[string]any)
	if code != http.StatusOK || m["streamer_id"] != "SFU" || seat["sfu_id"] != "SFU" || seat["event_id"] != "gala" || m["codec"] != "H264" {
		t.Fatalf("concert match: %d %v", code, m)
	}
	for _, row := range te.px.mm.Dashboard().POPs {
		if n := row.Streamers["leased"]; n != 0 {
			t.Fatalf("a seat leased a streamer: %d leased at %s", n, row.ID)
		}
	}
	if code, m := te.matchAs(t, token("walker-2"), gala); code != http.StatusServiceUnavailable || m["reason"] != "fallback-walkup" {
		t.Fatalf("second walk-up: %d %v, want 503 fallback-walkup (the pool is charged)", code, m)
	}
	if code, m := te.matchAs(t, token("vip-1"), gala); code != http.StatusOK || m["streamer_id"] != "SFU" {
		t.Fatalf("booked attendee: %d %v", code, m)
	}
	code, full := te.matchAs(t, token("vip-2"), gala)
	if code != http.StatusServiceUnavailable || full["reason"] != "fallback-concert-full" || str(full, "fallback_url") == "" {
		t.Fatalf("full concert: %d %v, want 503 fallback-concert-full with a fallback", code, full)
	}
	if used, per := te.concertSeats(t); used != 2 || per["SFU"] != [2]int{2, 2} {
		t.Fatalf("dashboard seats %d %v, want SFU 2/2", used, per)
	}

	// walker-1 plays through the SFU with its session token.
	var p *epicplayer.Player
	testwait.Within(t, 45*time.Second, "video through the SFU", func() bool {
		if p == nil {
			var err error
			p, err = epicplayer.Dial(context.Background(), epicplayer.Config{URL: str(m, "signalling_url"), StreamerID: "SFU", Layer: 2})
			if err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-p.Done(): // the SFU was not streaming yet: try again
			p.Close()
			p = nil
			return false
		default:
		}
		w, _ := p.Size()
		return w == 256
	})
	p.Close()
	// The player left: its seat is kept for the reconnect grace...
	if used, _ := te.concertSeats(t); used != 2 {
		t.Fatalf("seat freed at once: %d used", used)
	}
	// ... and free after it.
	clk.Advance(signalling.Default().LeaseGrace + time.Second)
	testwait.Within(t, 20*time.Second, "the seat free after the grace", func() bool {
		used, _ := te.concertSeats(t)
		return used == 1
	})
	if code, m := te.matchAs(t, token("vip-2"), gala); code != http.StatusOK || m["streamer_id"] != "SFU" {
		t.Fatalf("after the seat came back: %d %v", code, m)
	}
	// Nobody plays vip-1's nor vip-2's seat: both go with the session
	// token's lifetime.
	clk.Advance(auth.PxSessionDefaultTTL + time.Second)
	testwait.Within(t, 20*time.Second, "unused seats lapsed", func() bool {
		used, _ := te.concertSeats(t)
		return used == 0
	})
}

// TestConcertSeatsAcrossEdges: two edges on one Redis, 30 fans matching
// at once on both, never seat more than the SFUs hold: exactly 2 on SFU
// and 3 on SFU2, the rest refused fallback-concert-full; both edges'
// dashboards agree.
func TestConcertSeatsAcrossEdges(t *testing.T) {
	rds := redistest.StartServer(t)
	clk := newTestClock()
	events := concertEvents(t, clk, 100, "SFU", 2, "SFU2", 3)
	_, audit := auditTo(t)
	more := chain(audit, func(c *Config) { c.PxstreamEvents = events })
	a := startEdge(t, pxFleet(rds, clk, more))
	b := startEdge(t, pxFleet(rds, clk, more))
	const fans = 30
	toks := make([]string, fans)
	for i := range toks {
		toks[i] = a.accessToken(t, auth.Access{Subject: fmt.Sprintf("fan-%02d", i), Entitlement: "free", Region: "us-east"})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]int{}
	for i := range fans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			te := []*testEdge{a, b}[i%2]
			code, m := te.matchAs(t, toks[i], map[string]any{"event_id": "gala"})
			key := fmt.Sprint(code, " ", m["reason"], m["streamer_id"])
			mu.Lock()
			got[key]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	want := map[string]int{"200 <nil>SFU": 2, "200 <nil>SFU2": 3, "503 fallback-concert-full<nil>": fans - 5}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("answers %v, want %v", got, want)
	}
	for _, te := range []*testEdge{a, b} {
		if used, per := te.concertSeats(t); used != 5 || per["SFU"] != [2]int{2, 2} || per["SFU2"] != [2]int{3, 3} {
			t.Fatalf("dashboard %d %v", used, per)
		}
	}
}
