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
