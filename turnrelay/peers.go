package turnrelay

import "net/netip"

// peerPolicy decides which peer addresses a relay may send to. A TURN
// server on the edge's public address must not become a door into the
// edge's own networks: loopback, private, link-local, shared (CGNAT),
// multicast and reserved ranges are refused unless allowed by prefix.
type peerPolicy struct {
	allowLoopback bool           // immutable
	allow         []netip.Prefix // immutable
}

// forbiddenPrefixes are refused on top of netip's own classifications.
var forbiddenPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),  // shared address space (CGNAT), RFC 6598
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking, RFC 2544
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, and the broadcast address
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64, RFC 8215
	netip.MustParsePrefix("100::/64"),       // discard-only, RFC 6666
	netip.MustParsePrefix("2001:db8::/32"),  // documentation
	netip.MustParsePrefix("fec0::/10"),      // deprecated site-local
	netip.MustParsePrefix("::/128"),         // unspecified
	netip.MustParsePrefix("255.255.255.255/32"),
}

// embedded6to4 / embeddedNAT64 carry an IPv4 address inside an IPv6 one;
// the relay is judged by that IPv4 address.
var (
	prefix6to4  = netip.MustParsePrefix("2002::/16")
	prefixNAT64 = netip.MustParsePrefix("64:ff9b::/96")
)

// allowed reports whether a relay may send to ip.
func (p *peerPolicy) allowed(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() {
		return false
	}
	for _, a := range p.allow {
		if a.Contains(ip) {
			return true
		}
	}
	if ip.Is6() {
		if prefix6to4.Contains(ip) {
			b := ip.As16()
			return p.allowed(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		}
		if prefixNAT64.Contains(ip) {
			b := ip.As16()
			return p.allowed(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		}
	}
	if ip.IsLoopback() {
		return p.allowLoopback
	}
	if ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsUnspecified() {
		return false
	}
	for _, f := range forbiddenPrefixes {
		if f.Contains(ip) {
			return false
		}
	}
	return true
}
