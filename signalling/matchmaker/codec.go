package matchmaker

import (
	"fmt"
	"strings"

	"github.com/oshun/egbe-edge/signalling"
)

// MaxSDPBytes bounds the offers CheckOffer parses (UE offers are tens of KiB).
const MaxSDPBytes = 256 << 10

// CheckOffer reports whether the offer's m=video section(s) advertise
// leasedCodec: an a=rtpmap (RFC 8866 section 6.6) for one of the m-line's
// payload types whose encoding is <codec>/90000. AV1 also matches the
// pre-standard "AV1X" name. SDP is otherwise treated as opaque.
func CheckOffer(leasedCodec, sdp string) error {
	want, ok := normCodec(leasedCodec)
	if !ok {
		return fmt.Errorf("%w: unknown leased codec %q", ErrCodecNotOffered, leasedCodec)
	}
	if len(sdp) > MaxSDPBytes {
		return fmt.Errorf("%w: %d bytes", ErrSDPTooLarge, len(sdp))
	}
	var (
		inVideo  bool
		sawVideo bool
		pts      []string // payload types of the current m=video line
	)
	for line := range strings.Lines(sdp) {
		line = strings.TrimRight(line, "\r\n")
		if rest, ok := strings.CutPrefix(line, "m="); ok {
			// m=<media> <port> <proto> <fmt> ...
			f := strings.Fields(rest)
			inVideo = len(f) >= 4 && f[0] == "video"
			if inVideo {
				sawVideo = true
				pts = f[3:]
			}
			continue
		}
		if !inVideo {
			continue
		}
		rest, ok := strings.CutPrefix(line, "a=rtpmap:")
		if !ok {
			continue
		}
		pt, enc, ok := strings.Cut(rest, " ")
		if !ok {
			continue
		}
		name, clock, _ := strings.Cut(strings.TrimSpace(enc), "/")
		clock, _, _ = strings.Cut(clock, "/")
		if clock != "90000" || !codecNameMatches(want, name) {
			continue
		}
		for _, p := range pts {
			if p == pt {
				return nil
			}
		}
	}
	if !sawVideo {
		return ErrNoVideoSection
	}
	return fmt.Errorf("%w: want %s/90000", ErrCodecNotOffered, want)
}

func codecNameMatches(want, name string) bool {
	return strings.EqualFold(name, want) || (want == "AV1" && strings.EqualFold(name, "AV1X"))
}

// Hooks implements the broker's signalling.LeaseHooks: CheckOffer checks
// a streamer's offer against the codec this matchmaker leased for the
// session. The player events are forwarded to Next when set (admission
// tracks concurrency there).
type Hooks struct {
	m *Matchmaker
	// Next, when non-nil, receives every hook call after the matchmaker's;
	// its CheckOffer runs only when the codec check passed.
	Next signalling.LeaseHooks
}

var _ signalling.LeaseHooks = Hooks{}

// Hooks returns the broker hook adapter.
func (m *Matchmaker) Hooks() Hooks { return Hooks{m: m} }

// CheckOffer runs CheckOffer with the session's leased codec: the signed
// token's claim when the broker has one (any edge of a fleet can check it),
// else what this matchmaker remembers of its own lease.
func (h Hooks) CheckOffer(sessionID, leasedCodec, sdp string) error {
	codec := leasedCodec
	if codec == "" {
		var ok bool
		if codec, ok = h.m.leaseCodec(sessionID); !ok {
			return fmt.Errorf("%w: %q", ErrUnknownSession, sessionID)
		}
	}
	if err := CheckOffer(codec, sdp); err != nil {
		h.m.metrics.refused(ReasonCodecMismatch)
		return err
	}
	if h.Next != nil {
		return h.Next.CheckOffer(sessionID, leasedCodec, sdp)
	}
	return nil
}

// OnPlayerSubscribed implements signalling.LeaseHooks.
func (h Hooks) OnPlayerSubscribed(sessionID, streamerID string) {
	if h.Next != nil {
		h.Next.OnPlayerSubscribed(sessionID, streamerID)
	}
}

// OnPlayerLeft implements signalling.LeaseHooks.
func (h Hooks) OnPlayerLeft(sessionID string) {
	if h.Next != nil {
		h.Next.OnPlayerLeft(sessionID)
	}
}
