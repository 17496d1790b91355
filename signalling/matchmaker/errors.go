package matchmaker

import "errors"

var (
	// ErrTopology means a topology file is malformed or inconsistent.
	ErrTopology = errors.New("matchmaker: invalid topology")
	// ErrConfig means a Config failed Validate.
	ErrConfig = errors.New("matchmaker: invalid config")
	// ErrNoIdleStreamer is what a Fleet returns from LeaseIdle when the POP
	// has no idle streamer for the codec (lost a race, or none registered).
	ErrNoIdleStreamer = errors.New("matchmaker: no idle streamer")
	// ErrSDPTooLarge means an SDP offer exceeds MaxSDPBytes.
	ErrSDPTooLarge = errors.New("matchmaker: sdp too large")
	// ErrNoVideoSection means an SDP offer has no m=video section.
	ErrNoVideoSection = errors.New("matchmaker: sdp has no m=video section")
	// ErrCodecNotOffered means the m=video section does not advertise the
	// leased codec.
	ErrCodecNotOffered = errors.New("matchmaker: offer does not advertise the leased codec")
	// ErrUnknownSession means OfferCheck has no lease for the session id.
	ErrUnknownSession = errors.New("matchmaker: unknown session")
)
