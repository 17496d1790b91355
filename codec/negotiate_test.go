package codec

import (
	"slices"
	"testing"
)

func TestNegotiate(t *testing.T) {
	all := slices.Clone(ServerCapabilities)
	tests := []struct {
		name    string
		hello   *ClientHello
		acc     Acceptance
		dropped []string
		code    Code
	}{
		{"nil hello", nil, Acceptance_REJECTED, nil, CodeBadMessage},
		{"version unset", &ClientHello{Capabilities: all}, Acceptance_REJECTED, nil, CodeUnsupportedVersion},
		{"version from the future", &ClientHello{ProtocolVersion: 2, Capabilities: all}, Acceptance_REJECTED, nil, CodeUnsupportedVersion},
		{"everything", &ClientHello{ProtocolVersion: 1, Capabilities: all}, Acceptance_ACCEPTED, nil, ""},
		{"everything shuffled with extras", &ClientHello{ProtocolVersion: 1, Capabilities: []string{
			"perception-batches", "voice", "action-acks", "deltas", "deltas", "world-events", "squad-comms", "unreliable-lane", "hdr"}},
			Acceptance_ACCEPTED, nil, ""},
		{"tier2 subset", &ClientHello{ProtocolVersion: 1, Capabilities: []string{"deltas", "world-events", "squad-comms"}},
			Acceptance_DEGRADED, []string{"action-acks", "unreliable-lane", "voice"}, ""},
		{"nothing", &ClientHello{ProtocolVersion: 1}, Acceptance_DEGRADED,
			[]string{"action-acks", "deltas", "squad-comms", "unreliable-lane", "voice", "world-events"}, ""},
		{"only unknown", &ClientHello{ProtocolVersion: 1, Capabilities: []string{"Deltas", "teleport"}}, Acceptance_DEGRADED,
			[]string{"action-acks", "deltas", "squad-comms", "unreliable-lane", "voice", "world-events"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := Negotiate(tc.hello)
			if n.Acceptance != tc.acc || n.Code != tc.code || !slices.Equal(n.Dropped, tc.dropped) {
				t.Fatalf("Negotiate = %+v, want %v %v %q", n, tc.acc, tc.dropped, tc.code)
			}
			if n.Acceptance == Acceptance_REJECTED {
				if len(n.Enabled) != 0 || !n.Code.Valid() {
					t.Fatalf("rejected with %+v", n)
				}
				return
			}
			// Enabled and Dropped partition the server's capabilities.
			if len(n.Enabled)+len(n.Dropped) != len(ServerCapabilities) {
				t.Fatalf("Enabled %v + Dropped %v != %v", n.Enabled, n.Dropped, ServerCapabilities)
			}
			for _, c := range n.Enabled {
				if !n.Has(c) || slices.Contains(n.Dropped, c) {
					t.Fatalf("capability %q both enabled and dropped", c)
				}
			}
		})
	}
	if !slices.Equal(ServerCapabilities, all) {
		t.Fatal("Negotiate modified ServerCapabilities")
	}
}
