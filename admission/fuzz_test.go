package admission

import (
	"errors"
	"strings"
	"testing"
)

func FuzzDecodeLaunchRequest(f *testing.F) {
	f.Add(`{"v1UserId":null,"tenantId":"tara-studio","clientRegion":"de","nativeClient":{"installed":false},` +
		`"browser":{"webRtc":true,"codecs":["H264","AV1"],"webGpu":true,"webGl2":true},` +
		`"network":{"sustainedDownlinkMbps":20,"probeDurationMs":3000},"region":{"pixelStreamingRestricted":false},` +
		`"pops":[{"popId":"eu-west-1","rttMs":12,"availableWorkers":3,"programmingPriority":1,"codecs":["H264"]}],"override":"pxstream"}`)
	f.Add(`{"tenantId":"x"}`)
	f.Add(`{"pops":[1]}`)
	f.Add(`[]`)
	f.Add(`{"network":{"sustainedDownlinkMbps":1e309}}`)
	p := DefaultPolicy()
	f.Fuzz(func(t *testing.T, body string) {
		req, err := DecodeLaunchRequest(strings.NewReader(body), p.Launch.MaxPops)
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		d := p.Decide(req, req.Pops, false, clock0)
		if len(d.ReasonCodes) == 0 || len(d.ReasonCodes) > 16 || d.Target.Kind == "" {
			t.Fatalf("bad decision %+v", d)
		}
	})
}

func FuzzParsePolicy(f *testing.F) {
	f.Add(string(defaultPolicyJSON))
	f.Add(`{"version":1}`)
	f.Add(`{"version":1,"launch":{"maxReasonCodes":99}}`)
	f.Fuzz(func(t *testing.T, body string) {
		p, err := ParsePolicy(strings.NewReader(body))
		if err != nil {
			if !errors.Is(err, ErrPolicy) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// A policy that validates must be usable by every consumer.
		_ = DistributionReport(p)
		room := &Room{p: &p.WaitingRoom}
		for reg := range p.WaitingRoom.Regions {
			room.Rates(reg)
		}
	})
}

// FuzzParseEvents: an events file is decoded strictly and validated; any
// failure is ErrEvents, never a panic, and a valid one answers lookups.
func FuzzParseEvents(f *testing.F) {
	f.Add(`{"version":1,"events":[{"id":"saraswati-opening","pop":"us-east-1","start":"2026-06-01T19:00:00Z","end":"2026-06-01T21:00:00Z",` +
		`"prewarmMinutes":30,"reservedSessions":200,"walkUpSlots":50,"priority":4,"attendees":["user-1","user-2"]}],` +
		`"grants":[{"subject":"instructor-7","maxSessions":6,"reason":"verified instructor"}],` +
		`"institutions":[{"name":"Lagos Polytechnic","networks":["198.51.100.0/24","2001:db8::/48"]}]}`)
	f.Add(`{"version":1,"events":[{"id":"gala","pop":"us-east-1","start":"2026-06-01T19:00:00Z","end":"2026-06-01T21:00:00Z",` +
		`"walkUpSlots":500,"concert":{"codec":"h264","sfus":[{"id":"SFU","seats":250},{"id":"SFU2","seats":250}]}}]}`)
	f.Add(`{"version":1}`)
	f.Add(`{"version":1,"events":[{"id":"a","pop":"p","start":"2026-01-01T00:00:00Z","end":"2025-01-01T00:00:00Z"}]}`)
	f.Add(`{"version":1,"institutions":[{"name":"x","networks":["not a prefix"]}]}`)
	f.Add(`{"version":2,"surprise":true}`)
	f.Fuzz(func(t *testing.T, body string) {
		ev, err := ParseEvents([]byte(body))
		if err != nil {
			if !errors.Is(err, ErrEvents) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		now := clock0
		for _, e := range ev.Events {
			_ = ev.Running(e.ID, now)
			for _, a := range e.Attendees {
				_ = ev.Booked(a, now)
				_ = ev.HeldBack(a, now)
			}
		}
		for _, g := range ev.Grants {
			if gr := ev.Grant(g.Subject); gr == nil || gr.MaxSessions < 1 {
				t.Fatalf("grant %+v lost", g)
			}
		}
	})
}
