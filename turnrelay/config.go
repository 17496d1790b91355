package turnrelay

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Config tunes the embedded TURN server. Zero values are not defaults:
// start from Default().
type Config struct {
	// Listen is the address of both listeners, UDP and TCP, on the same
	// port (e.g. ":3478"; with port 0 both get the same free number).
	Listen string `json:"listen"`
	// RelayPorts are the UDP ports relays are bound from (inclusive); the
	// zero range lets the kernel pick any free port.
	RelayPorts PortRange `json:"relay_ports"`
	// RelayIP is the address announced to clients as their relayed
	// address (XOR-RELAYED-ADDRESS): the edge's public IP.
	RelayIP string `json:"relay_ip"`
	// RelayBind is the local address relay sockets bind to. Empty: the
	// listen host when it names one, else all interfaces.
	RelayBind string `json:"relay_bind"`
	// Realm is the long-term-credential realm announced in 401 replies.
	Realm string `json:"realm"`
	// Secret is the TURN REST shared secret (EGBE_TURN_SECRET). Never in
	// a file or a flag.
	Secret []byte `json:"-"`

	// MaxAllocationsPerUser caps live allocations per credential subject.
	MaxAllocationsPerUser int `json:"max_allocations_per_user"`
	// MaxAllocationsPerNetwork caps live allocations per client network
	// (NetworkBitsV4 / NetworkBitsV6 prefix of the TURN client's address).
	MaxAllocationsPerNetwork int `json:"max_allocations_per_network"`
	// MaxTCPConnsPerNetwork caps open TCP connections to the TURN port per
	// client network (an unauthenticated connection costs a goroutine).
	MaxTCPConnsPerNetwork int `json:"max_tcp_conns_per_network"`
	// NetworkBitsV4 / NetworkBitsV6 key the per-network caps: /24 and /48,
	// as Pixel Streaming admission keys its network cap.
	NetworkBitsV4 int `json:"network_bits_v4"`
	NetworkBitsV6 int `json:"network_bits_v6"`
	// TCPIdleTimeout closes a TCP connection that holds no allocation for
	// this long.
	TCPIdleTimeout time.Duration `json:"tcp_idle_timeout"`
	// MaxBitrate caps each allocation's relayed traffic, in bits per
	// second, in each direction; packets over it are dropped and counted.
	MaxBitrate int64 `json:"max_bitrate"`
	// AllowLoopbackPeers lets relays send to loopback peers (dev mode: the
	// whole system runs on one machine).
	AllowLoopbackPeers bool `json:"allow_loopback_peers"`
	// AllowPeers are prefixes (CIDR) relays may send to even though the
	// peer policy would refuse them, e.g. the private subnet of the
	// streamers (--turn-allow-peer).
	AllowPeers []string `json:"allow_peers"`
	// AllocationLifetime is the lifetime of an allocation whose client
	// asks for none; refreshes extend it, the credential's expiry ends it.
	AllocationLifetime time.Duration `json:"allocation_lifetime"`
}

// Default returns the defaults (TURN on :3478, relays on 49160-49200).
func Default() Config {
	return Config{
		Listen:                   ":3478",
		RelayPorts:               PortRange{Min: 49160, Max: 49200},
		Realm:                    "egbe",
		MaxAllocationsPerUser:    10,
		MaxAllocationsPerNetwork: 64,
		MaxTCPConnsPerNetwork:    128,
		NetworkBitsV4:            24,
		NetworkBitsV6:            48,
		TCPIdleTimeout:           30 * time.Second,
		MaxBitrate:               25_000_000,
		AllocationLifetime:       10 * time.Minute,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return bad("listen %q: %v", c.Listen, err)
	}
	if err := c.RelayPorts.validate(); err != nil {
		return err
	}
	if c.RelayIP != "" {
		if _, err := netip.ParseAddr(c.RelayIP); err != nil {
			return bad("relay ip %q: %v", c.RelayIP, err)
		}
	}
	if c.RelayBind != "" {
		if _, err := netip.ParseAddr(c.RelayBind); err != nil {
			return bad("relay bind %q: %v", c.RelayBind, err)
		}
	}
	if len(c.Secret) == 0 {
		return bad("a TURN secret is required")
	}
	if c.Realm == "" || strings.ContainsAny(c.Realm, "\"\\\r\n") || len(c.Realm) > 127 {
		return bad("realm %q: want 1-127 characters without quotes or backslashes", c.Realm)
	}
	switch {
	case c.MaxAllocationsPerUser < 1, c.MaxAllocationsPerNetwork < 1, c.MaxTCPConnsPerNetwork < 1:
		return bad("allocation and connection caps must be at least 1")
	case c.NetworkBitsV4 < 8 || c.NetworkBitsV4 > 32:
		return bad("network_bits_v4 %d not in 8..32", c.NetworkBitsV4)
	case c.NetworkBitsV6 < 16 || c.NetworkBitsV6 > 128:
		return bad("network_bits_v6 %d not in 16..128", c.NetworkBitsV6)
	case c.TCPIdleTimeout <= 0:
		return bad("tcp_idle_timeout must be positive")
	case c.MaxBitrate < 64_000:
		return bad("max_bitrate %d: want at least 64000 bit/s", c.MaxBitrate)
	case c.AllocationLifetime < time.Minute:
		return bad("allocation_lifetime %v: want at least a minute", c.AllocationLifetime)
	}
	if _, err := parsePrefixes(c.AllowPeers); err != nil {
		return err
	}
	return nil
}

// PortRange is an inclusive range of ports; the zero value means any port.
type PortRange struct {
	Min uint16 `json:"min"`
	Max uint16 `json:"max"`
}

// Any reports whether r is the zero range (the kernel picks).
func (r PortRange) Any() bool { return r.Min == 0 && r.Max == 0 }

// Size is the number of ports in r (0 for Any).
func (r PortRange) Size() int {
	if r.Any() {
		return 0
	}
	return int(r.Max) - int(r.Min) + 1
}

// String is "MIN-MAX", or "" for any port.
func (r PortRange) String() string {
	if r.Any() {
		return ""
	}
	return strconv.Itoa(int(r.Min)) + "-" + strconv.Itoa(int(r.Max))
}

func (r PortRange) validate() error {
	if r.Any() {
		return nil
	}
	if r.Min == 0 || r.Max < r.Min {
		return fmt.Errorf("%w: relay ports %d-%d: want 1 <= min <= max <= 65535", ErrConfig, r.Min, r.Max)
	}
	return nil
}

// ParsePortRange reads "MIN-MAX" (or one port "P"); "" is any port.
func ParsePortRange(s string) (PortRange, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return PortRange{}, nil
	}
	lo, hi, found := strings.Cut(s, "-")
	if !found {
		hi = lo
	}
	a, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
	b, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
	if err1 != nil || err2 != nil {
		return PortRange{}, fmt.Errorf("%w: relay ports %q: want MIN-MAX", ErrConfig, s)
	}
	r := PortRange{Min: uint16(a), Max: uint16(b)}
	return r, r.validate()
}

func parsePrefixes(cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			// A bare address allows just that address.
			a, aerr := netip.ParseAddr(strings.TrimSpace(s))
			if aerr != nil {
				return nil, fmt.Errorf("%w: allowed peer %q: want a CIDR prefix or an address", ErrConfig, s)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
