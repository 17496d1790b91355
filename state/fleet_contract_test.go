package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// The contracts of the fleet's stores (Streamers, Inbox, Members), run on
// every backend: memory, one Redis (here), a Cluster and a Sentinel's
// master (redis_topologies_test.go).

func TestStreamersContract(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { streamersContract(t, b) })
	}
}

func TestInboxContract(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { inboxContract(t, b) })
	}
}

func TestMembersContract(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { membersContract(t, b) })
	}
}

// streamersContract is the Streamers contract on one backend.
func streamersContract(t *testing.T, b backend) {
	ctx := context.Background()
	st := b.streamers(t)
	now := t0
	const grace = 10 * time.Second
	conns := map[string]time.Time{}
	reg := func(id, pop string, codecs ...string) StreamerReg {
		conns[id] = now
		return StreamerReg{ID: id, POP: pop, Codecs: codecs, ConnectedAt: now}
	}
	sync := func(edge string, up []StreamerReg, gone ...StreamerKey) map[string]string {
		t.Helper()
		taken, err := st.Sync(ctx, StreamerSync{Edge: edge, Up: up, Gone: gone, Now: now, TTL: time.Hour, Grace: grace})
		if err != nil {
			t.Fatalf("sync: %v", err)
		}
		return taken
	}
	get := func(id string) (FleetStreamer, bool) {
		t.Helper()
		s, ok, err := st.Get(ctx, id, now)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		return s, ok
	}
	counts := func() map[string][3]int { // pop -> idle, leased, streaming
		t.Helper()
		all, err := st.List(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][3]int{}
		for _, s := range all {
			c := out[s.POP]
			c[map[StreamerState]int{StreamerIdle: 0, StreamerLeased: 1, StreamerStreaming: 2}[s.State]]++
			out[s.POP] = c
		}
		return out
	}
	for _, r := range []StreamerReg{reg("a", "eu-west-1", "H264"), {}, reg("b", "eu-west-1", "H264", "AV1"), {}, reg("c", "us-east-1", "H264")} {
		if r.ID == "" {
			now = now.Add(time.Second)
			continue
		}
		if taken := sync("edge-a", []StreamerReg{r}); taken != nil {
			t.Fatalf("first registration taken: %v", taken)
		}
	}
	now = now.Add(time.Second)
	if s, ok := get("b"); !ok || s.Edge != "edge-a" || s.POP != "eu-west-1" || !slices.Equal(s.Codecs, []string{"H264", "AV1"}) ||
		s.State != StreamerIdle || !s.ConnectedAt.Equal(conns["b"]) {
		t.Fatalf("get b: %+v %v", s, ok)
	}

	until := now.Add(30 * time.Second)
	for _, tc := range []struct {
		name, pop, codec, session string
		wantID                    string
		wantErr                   error
	}{
		{"longest idle first", "eu-west-1", "h264", "s1", "a", nil},
		{"idempotent retry", "eu-west-1", "H264", "s1", "a", nil},
		{"codec filter", "eu-west-1", "AV1", "s2", "b", nil},
		{"pop exhausted", "eu-west-1", "H264", "s3", "", ErrNoIdleStreamer},
		{"no such codec", "us-east-1", "VP9", "s4", "", ErrNoIdleStreamer},
		{"session holds another", "us-east-1", "H264", "s1", "", ErrSessionLeased},
		{"any codec", "us-east-1", "", "s5", "c", nil},
		{"empty session", "us-east-1", "", "", "", ErrBadArgument},
	} {
		got, err := st.Lease(ctx, StreamerLease{Mode: LeaseAnyIdle, POP: tc.pop, Codec: tc.codec, SessionID: tc.session, Until: until}, now)
		if !errors.Is(err, tc.wantErr) {
			t.Fatalf("%s: err %v, want %v", tc.name, err, tc.wantErr)
		}
		if err == nil && (got.ID != tc.wantID || got.State != StreamerLeased || got.SessionID != tc.session || !got.LeaseUntil.Equal(until)) {
			t.Fatalf("%s: got %+v, want %s leased to %s", tc.name, got, tc.wantID, tc.session)
		}
	}
	if c := counts(); c["eu-west-1"] != [3]int{0, 2, 0} || c["us-east-1"] != [3]int{0, 1, 0} {
		t.Fatalf("counts %v", c)
	}
	for _, s := range []string{"s1", "s2", "s5"} {
		if err := st.Release(ctx, s, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Release(ctx, "s1", now); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("second release: %v", err)
	}
	named := func(mode LeaseMode, id, sess string, until time.Time) error {
		_, err := st.Lease(ctx, StreamerLease{Mode: mode, ID: id, SessionID: sess, Until: until}, now)
		return err
	}
	state := func() StreamerState { s, _ := get("a"); return s.State }
	if err := named(LeaseNamed, "a", "s1", now.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := named(LeaseNamed, "a", "s2", now.Add(30*time.Second)); !errors.Is(err, ErrNotIdle) {
		t.Fatalf("second lease: %v", err)
	}
	if err := named(LeaseNamed, "zz", "s2", now.Add(time.Minute)); !errors.Is(err, ErrUnknownStreamer) {
		t.Fatalf("unknown: %v", err)
	}
	now = now.Add(29 * time.Second)
	if state() != StreamerLeased {
		t.Fatal("lease lapsed early")
	}
	now = now.Add(time.Second)
	if state() != StreamerIdle {
		t.Fatal("lease did not lapse")
	}
	// a's lapsed lease makes it idle since its until: b (idle since its
	// release) goes first, then a.
	if got, err := st.Lease(ctx, StreamerLease{Mode: LeaseAnyIdle, POP: "eu-west-1", SessionID: "s9", Until: now.Add(10 * time.Second)}, now); err != nil || got.ID != "b" {
		t.Fatalf("after lapse: %+v %v", got, err)
	}
	if err := st.Release(ctx, "s9", now); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Lease(ctx, StreamerLease{Mode: LeaseAnyIdle, POP: "eu-west-1", SessionID: "s3", Until: now.Add(10 * time.Second)}, now); err != nil || got.ID != "a" {
		t.Fatalf("after lapse: %+v %v", got, err)
	}
	// A claim only ever extends the session's own lease.
	if err := named(LeaseClaim, "a", "s3", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := named(LeaseClaim, "a", "s3", now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if s, _ := get("a"); !s.LeaseUntil.Equal(now.Add(time.Minute)) {
		t.Fatalf("a claim shortened the lease: %+v", s)
	}
	if err := named(LeaseClaim, "a", "s4", now.Add(time.Minute)); !errors.Is(err, ErrNotIdle) {
		t.Fatalf("claim by another session: %v", err)
	}
	// A player joins (the edge syncs the count): streaming, whatever the
	// lease's until.
	ra := StreamerReg{ID: "a", POP: "eu-west-1", Codecs: []string{"H264"}, ConnectedAt: conns["a"], Players: 1}
	sync("edge-a", []StreamerReg{ra})
	now = now.Add(time.Hour)
	if state() != StreamerStreaming {
		t.Fatalf("state %s, want streaming", state())
	}
	// A rename keeps the registration, its lease and its place.
	ra.ID, ra.Was = "a1", "a"
	sync("edge-a", []StreamerReg{ra})
	if s, ok := get("a1"); !ok || s.SessionID != "s3" || s.Players != 1 || s.Edge != "edge-a" {
		t.Fatalf("after rename %+v", s)
	}
	if _, ok := get("a"); ok {
		t.Fatal("old id still registered")
	}
	// The last player leaves: the lease is kept for the grace.
	ra.Was, ra.Players = "", 0
	sync("edge-a", []StreamerReg{ra})
	if s, _ := get("a1"); s.State != StreamerLeased || !s.LeaseUntil.Equal(now.Add(grace)) {
		t.Fatalf("after leave %+v", s)
	}
	if err := st.Release(ctx, "s3", now); err != nil {
		t.Fatal(err)
	}
	if s, _ := get("a1"); s.State != StreamerIdle || s.SessionID != "" {
		t.Fatalf("after release %+v", s)
	}
	all, err := st.List(ctx, now)
	if err != nil || len(all) != 3 || all[0].ID != "a1" || all[1].ID != "b" || all[2].ID != "c" {
		t.Fatalf("list order %+v %v", all, err)
	}

	// Another edge cannot take a registered id; the owner keeps it.
	if taken := sync("edge-b", []StreamerReg{{ID: "c", POP: "x", ConnectedAt: now}}); taken["c"] != "edge-a" {
		t.Fatalf("taken %v, want c held by edge-a", taken)
	}
	if s, _ := get("c"); s.Edge != "edge-a" || s.POP != "us-east-1" {
		t.Fatalf("c after another edge's claim: %+v", s)
	}
	// Only the registering connection removes a registration.
	sync("edge-b", nil, StreamerKey{ID: "c", ConnectedAt: conns["c"]})
	sync("edge-a", nil, StreamerKey{ID: "c", ConnectedAt: conns["c"].Add(time.Second)})
	if _, ok := get("c"); !ok {
		t.Fatal("a stranger's removal removed c")
	}
	// The same id from a new connection of the same edge is a new
	// registration: the old lease is gone.
	if err := named(LeaseNamed, "c", "s7", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	sync("edge-a", []StreamerReg{reg("c", "us-east-1", "VP8")})
	if s, _ := get("c"); s.State != StreamerIdle || !slices.Equal(s.Codecs, []string{"VP8"}) || !s.ConnectedAt.Equal(now) {
		t.Fatalf("re-registration: %+v", s)
	}
	if err := st.Release(ctx, "s7", now); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("the old registration's lease survived: %v", err)
	}
	sync("edge-a", nil, StreamerKey{ID: "a1", ConnectedAt: conns["a"]}, StreamerKey{ID: "b", ConnectedAt: conns["b"]})
	if all, _ := st.List(ctx, now); len(all) != 1 || all[0].ID != "c" {
		t.Fatalf("after remove %+v", all)
	}
	if _, err := st.Sync(ctx, StreamerSync{Edge: "bad edge", Now: now}); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("bad edge id: %v", err)
	}

	// A registration its edge stops syncing lapses after the TTL (by the
	// caller's clock in memory, the store's on Redis: real time here).
	t.Run("TTL", func(t *testing.T) {
		at := time.Now()
		const ttl = 300 * time.Millisecond
		if _, err := st.Sync(ctx, StreamerSync{Edge: "edge-d", Up: []StreamerReg{{ID: "d", POP: "p", ConnectedAt: at}}, Now: at, TTL: ttl}); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := st.Get(ctx, "d", time.Now()); !ok {
			t.Fatal("not registered")
		}
		poll(t, 5*time.Second, "the registration lapses", func() bool {
			_, ok, err := st.Get(ctx, "d", time.Now())
			return err == nil && !ok
		})
		all, err := st.List(ctx, time.Now())
		if err != nil || slices.ContainsFunc(all, func(s FleetStreamer) bool { return s.ID == "d" }) {
			t.Fatalf("lapsed registration listed: %+v %v", all, err)
		}
	})
}

// inboxContract is the Inbox contract on one backend.
func inboxContract(t *testing.T, b backend) {
	ctx := context.Background()
	in := b.inbox(t)
	read := func(edge, cur string, max int, wait time.Duration) ([]string, string) {
		t.Helper()
		msgs, next, err := in.Read(ctx, edge, cur, max, wait)
		if err != nil {
			t.Fatalf("read %s: %v", edge, err)
		}
		out := make([]string, len(msgs))
		for i, m := range msgs {
			out[i] = string(m)
		}
		return out, next
	}
	if err := in.Send(ctx, "edge-a", []byte("before the reader")); err != nil {
		t.Fatal(err)
	}
	start, err := in.End(ctx, "edge-a")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := read("edge-a", start, 10, 10*time.Millisecond); len(got) != 0 {
		t.Fatalf("read from the end: %q", got)
	}
	if got, _ := read("edge-a", "", 10, 10*time.Millisecond); len(got) != 0 {
		t.Fatalf("read from \"\": %q", got)
	}
	// Order within a send and across sends; max bounds a read.
	var want []string
	for s := range 3 {
		var batch [][]byte
		for i := range 100 {
			m := fmt.Sprintf("m%d-%d", s, i)
			want = append(want, m)
			batch = append(batch, []byte(m))
		}
		if err := in.Send(ctx, "edge-a", batch...); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.Send(ctx, "edge-b", []byte("for b")); err != nil {
		t.Fatal(err)
	}
	var got []string
	cur := start
	for len(got) < len(want) {
		part, next := read("edge-a", cur, 128, time.Second)
		if len(part) == 0 || len(part) > 128 {
			t.Fatalf("read %d messages after %d", len(part), len(got))
		}
		got, cur = append(got, part...), next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("messages out of order or lost: %q", got)
	}
	if part, next := read("edge-a", cur, 128, 20*time.Millisecond); len(part) != 0 || next != cur {
		t.Fatalf("nothing new: %q %q (cursor %q)", part, next, cur)
	}
	if end, err := in.End(ctx, "edge-a"); err != nil || end != cur {
		t.Fatalf("end %q %v, want the cursor after the last message %q", end, err, cur)
	}
	if got, _ := read("edge-b", "", 10, 10*time.Millisecond); len(got) != 0 {
		t.Fatalf("edge-b from its end: %q", got)
	}
	// A blocked reader wakes for a send.
	done := make(chan []string, 1)
	go func() {
		msgs, _, err := in.Read(ctx, "edge-a", cur, 10, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		out := make([]string, len(msgs))
		for i, m := range msgs {
			out[i] = string(m)
		}
		done <- out
	}()
	if err := in.Send(ctx, "edge-a", []byte("wake")); err != nil {
		t.Fatal(err)
	}
	if w := <-done; !slices.Equal(w, []string{"wake"}) {
		t.Fatalf("woken reader got %q", w)
	}
	// A reader's context ends its wait.
	cctx, cancel := context.WithCancel(ctx)
	go cancel()
	if _, _, err := in.Read(cctx, "edge-c", "", 10, 10*time.Second); err == nil {
		t.Fatal("a cancelled read returned no error")
	}
	if err := in.Send(ctx, "a{b}", []byte("x")); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("bad edge id: %v", err)
	}
}

// membersContract is the Members contract on one backend.
func membersContract(t *testing.T, b backend) {
	ctx := context.Background()
	const ttl = 400 * time.Millisecond
	view, pass := b.members(t, ttl)
	a := view(Member{ID: "edge-a", URL: "https://a.example:8443"})
	z := view(Member{ID: "edge-z"})
	alive := func(ids ...string) map[string]Member {
		t.Helper()
		m, err := a.Alive(ctx, ids...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := alive(); len(m) != 0 {
		t.Fatalf("empty membership: %v", m)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.Beat(ctx))
	if m := alive(); len(m) != 1 || m["edge-a"] != (Member{ID: "edge-a", URL: "https://a.example:8443"}) {
		t.Fatalf("after a's beat: %v", m)
	}
	if m := alive("edge-a", "edge-z", "edge-nobody"); len(m) != 1 {
		t.Fatalf("asked about three: %v", m)
	}
	must(z.Beat(ctx))
	if m := alive(); len(m) != 2 || m["edge-z"].ID != "edge-z" {
		t.Fatalf("after z's beat: %v", m)
	}
	// A live edge stays alive past the TTL by beating.
	for range 4 {
		pass(ttl / 3)
		must(a.Beat(ctx))
	}
	if m := alive(); len(m) != 1 || m["edge-a"].ID == "" {
		t.Fatalf("a beat, z did not: %v", m)
	}
	// A clean stop leaves at once.
	must(a.Leave(ctx))
	if m := alive("edge-a"); len(m) != 0 {
		t.Fatalf("after leave: %v", m)
	}
	must(z.Beat(ctx))
	if m := alive(); len(m) != 1 || m["edge-z"].ID != "edge-z" {
		t.Fatalf("z back: %v", m)
	}
}
