package turnrelay

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // the TURN REST scheme (and coturn) fixes HMAC-SHA1
	"encoding/base64"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// The TURN REST credential scheme (draft-uberti-behave-turn-rest-00, as
// coturn implements use-auth-secret / static-auth-secret):
//
//	username   = <unix expiry, decimal seconds> ":" <subject>
//	credential = base64(HMAC-SHA1(shared secret, username))
//
// The TURN server recomputes the credential from the username, so it keeps
// no per-user state, and any server holding the secret accepts it.
const (
	// MaxUsernameLen bounds a username we parse (STUN USERNAME is at most
	// 513 bytes; ours are far shorter).
	MaxUsernameLen = 256
	// MaxSubjectLen bounds the subject part of a minted username.
	MaxSubjectLen = 128
	// maxExpiryDigits: a Unix time in seconds fits 11 digits until year 5138.
	maxExpiryDigits = 12
)

// ICEServer is one entry of a WebRTC RTCConfiguration's iceServers.
type ICEServer struct {
	URLs       []string `json:"urls"`
	Username   string   `json:"username,omitempty"`
	Credential string   `json:"credential,omitempty"`
}

// Options is the JSON shape handed to WebRTC clients (Epic's
// config.peerConnectionOptions, the match response's ice_servers):
// {"iceServers":[{"urls":[...],"username":"…","credential":"…"}]}.
type Options struct {
	ICEServers []ICEServer `json:"iceServers"`
}

// Credential computes the credential of username under secret.
func Credential(secret []byte, username string) string {
	mac := hmac.New(sha1.New, secret)
	mac.Write([]byte(username))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Username is "<expiry>:<subject>" with the subject made safe: a ':' or a
// byte outside printable ASCII becomes '_', it is cut to MaxSubjectLen
// bytes, and an empty subject is "anonymous".
func Username(expiry time.Time, subject string) string {
	return strconv.FormatInt(expiry.Unix(), 10) + ":" + cleanSubject(subject)
}

func cleanSubject(s string) string {
	if s == "" {
		return "anonymous"
	}
	if len(s) > MaxSubjectLen {
		s = s[:MaxSubjectLen]
	}
	b := []byte(s)
	for i, c := range b {
		if c == ':' || c < 0x21 || c > 0x7e {
			b[i] = '_'
		}
	}
	return string(b)
}

// ParseUsername splits a TURN REST username into its expiry and subject.
// A username with no ':' is an expiry alone (subject ""), as coturn
// accepts.
func ParseUsername(u string) (expiry time.Time, subject string, err error) {
	if len(u) == 0 || len(u) > MaxUsernameLen {
		return time.Time{}, "", fmt.Errorf("%w: length %d", ErrBadUsername, len(u))
	}
	ts, subject, _ := strings.Cut(u, ":")
	if len(ts) == 0 || len(ts) > maxExpiryDigits {
		return time.Time{}, "", fmt.Errorf("%w: expiry %q", ErrBadUsername, ts)
	}
	for i := 0; i < len(ts); i++ {
		if ts[i] < '0' || ts[i] > '9' {
			return time.Time{}, "", fmt.Errorf("%w: expiry %q", ErrBadUsername, ts)
		}
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("%w: expiry %q", ErrBadUsername, ts)
	}
	return time.Unix(secs, 0), subject, nil
}

// IssuerConfig says what an Issuer hands out.
type IssuerConfig struct {
	// Secret is the shared secret (EGBE_TURN_SECRET).
	Secret []byte
	// Port is the embedded server's port; 0 hands out no embedded server.
	Port int
	// Host names the embedded server in minted URLs when set (the public
	// IP); otherwise the host the client reached the edge at (Mint's host).
	Host string
	// External are further TURN/STUN URLs sharing the secret (--turn-url,
	// e.g. a coturn fleet), handed out beside the embedded server.
	External []string
	// TTL is the credential lifetime when Mint is given none.
	TTL time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Issuer mints per-connection credentials. It is safe for concurrent use.
type Issuer struct {
	cfg IssuerConfig // immutable after NewIssuer
}

// NewIssuer checks cfg and returns an Issuer.
func NewIssuer(cfg IssuerConfig) (*Issuer, error) {
	if len(cfg.Secret) == 0 {
		return nil, fmt.Errorf("%w: issuer needs a secret", ErrConfig)
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("%w: port %d", ErrConfig, cfg.Port)
	}
	if cfg.TTL <= 0 {
		return nil, fmt.Errorf("%w: credential TTL must be positive", ErrConfig)
	}
	for _, u := range cfg.External {
		if err := ValidateURL(u); err != nil {
			return nil, err
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.External = append([]string(nil), cfg.External...)
	return &Issuer{cfg: cfg}, nil
}

// ValidateURL checks one --turn-url: a turn:, turns: or stun: URI
// (RFC 7065 / RFC 7064) with a host, no spaces, at most 512 bytes.
func ValidateURL(u string) error {
	scheme, rest, ok := strings.Cut(u, ":")
	switch {
	case len(u) > 512, !ok, rest == "", strings.ContainsAny(u, " \t\r\n\"\\"):
		return fmt.Errorf("%w: TURN URL %q: want turn:HOST[:PORT][?transport=udp|tcp]", ErrConfig, u)
	}
	switch scheme {
	case "turn", "turns", "stun", "stuns":
	default:
		return fmt.Errorf("%w: TURN URL %q: scheme must be turn, turns, stun or stuns", ErrConfig, u)
	}
	if strings.HasPrefix(rest, "//") {
		return fmt.Errorf("%w: TURN URL %q: no // after the scheme (RFC 7065)", ErrConfig, u)
	}
	return nil
}

// Mint returns credentials for subject valid for lifetime (the issuer's
// TTL when lifetime <= 0), for the embedded server (named by the issuer's
// Host, else host, the name the client reached the edge at, without port)
// and the external servers. Every entry carries the same username and
// credential: every server shares the secret.
func (i *Issuer) Mint(subject string, lifetime time.Duration, host string) Options {
	if lifetime <= 0 {
		lifetime = i.cfg.TTL
	}
	return i.MintUntil(subject, i.cfg.Now().Add(lifetime), host)
}

// MintUntil is Mint with the credential's expiry given (a session's end
// known in advance): two connections of one session get the same
// credential.
func (i *Issuer) MintUntil(subject string, expiry time.Time, host string) Options {
	user := Username(expiry, subject)
	cred := Credential(i.cfg.Secret, user)
	out := Options{ICEServers: []ICEServer{}}
	if i.cfg.Port > 0 {
		h := i.cfg.Host
		if h == "" {
			h = host
		}
		if h == "" {
			h = "localhost"
		}
		hp := net.JoinHostPort(h, strconv.Itoa(i.cfg.Port))
		out.ICEServers = append(out.ICEServers, ICEServer{
			URLs:     []string{"turn:" + hp + "?transport=udp", "turn:" + hp + "?transport=tcp"},
			Username: user, Credential: cred,
		})
	}
	if len(i.cfg.External) > 0 {
		out.ICEServers = append(out.ICEServers, ICEServer{
			URLs:     append([]string(nil), i.cfg.External...),
			Username: user, Credential: cred,
		})
	}
	return out
}
