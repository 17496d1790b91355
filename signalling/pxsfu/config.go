package pxsfu

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Config configures one SFU.
type Config struct {
	// URL is the signalling server's SFU port, e.g. ws://127.0.0.1:8889.
	URL string
	// ID is the SFU's endpointId (Epic's default "SFU"); players subscribe
	// to it. The server may suffix it.
	ID string
	// Token is an SFU token (token-mode edges), sent as ?token=.
	Token string
	// Subscribe is the streamer id to subscribe to; "" takes the first
	// listed id other than the SFU's own (Epic's subscribeStreamerId).
	Subscribe string
	// RetrySubscribe is how long to wait before listing streamers again
	// when Subscribe is not listed, after the streamer leaves, and after a
	// refused offer (Epic: 10 s).
	RetrySubscribe time.Duration
	// Reconnect is the delay before redialling a lost signalling socket
	// (Epic: 2 s).
	Reconnect time.Duration
	// AnswerTimeout drops a player that has not answered its offer.
	AnswerTimeout time.Duration
	// KeyframeInterval is the shortest gap between two key-frame requests
	// (PLI) sent upstream for one layer; requests in between are merged
	// into one at the end of the gap, or dropped if a key frame arrives.
	KeyframeInterval time.Duration
	// MaxPlayers caps the players served (0 = unlimited); more are not
	// offered (counted as refusals, reason "full").
	MaxPlayers int
	// SendQueue bounds signalling messages waiting for the socket.
	SendQueue int
	// ProbeAfter: a player held below its preferred layer by its bandwidth
	// estimate is tried one layer up after this long (doubling, up to 8x,
	// each time the estimate sends it back down). 0 disables probing.
	ProbeAfter time.Duration
}

// Default returns Epic's SFU defaults.
func Default() Config {
	return Config{
		URL:              "ws://127.0.0.1:8889",
		ID:               "SFU",
		Subscribe:        "DefaultStreamer",
		RetrySubscribe:   10 * time.Second,
		Reconnect:        2 * time.Second,
		AnswerTimeout:    20 * time.Second,
		KeyframeInterval: time.Second,
		SendQueue:        4096,
		ProbeAfter:       10 * time.Second,
	}
}

// Validate checks every field.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	u, err := url.Parse(c.URL)
	switch {
	case err != nil || (u.Scheme != "ws" && u.Scheme != "wss") || u.Host == "":
		return bad("url %q must be ws:// or wss://host[:port]", c.URL)
	case strings.TrimSpace(c.ID) == "" || len(c.ID) > 256:
		return bad("id %q: 1 to 256 bytes", c.ID)
	case len(c.Subscribe) > 256:
		return bad("subscribe id over 256 bytes")
	case c.RetrySubscribe <= 0 || c.Reconnect <= 0 || c.AnswerTimeout <= 0 || c.KeyframeInterval <= 0:
		return bad("retry_subscribe, reconnect, answer_timeout and keyframe_interval must be > 0")
	case c.MaxPlayers < 0:
		return bad("max_players %d < 0", c.MaxPlayers)
	case c.SendQueue < 16:
		return bad("send_queue %d < 16", c.SendQueue)
	case c.ProbeAfter < 0:
		return bad("probe_after must not be negative")
	}
	return nil
}

// dialURL adds the token to the URL.
func (c Config) dialURL() string {
	u, _ := url.Parse(c.URL) // validated
	if c.Token != "" {
		q := u.Query()
		q.Set("token", c.Token)
		u.RawQuery = q.Encode()
	}
	return u.String()
}
