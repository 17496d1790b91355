package turnrelay

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// pendingTTL is how long a reservation made by the quota check waits for
// its allocation to appear before it is given back (the allocation failed,
// e.g. no relay port was free).
const pendingTTL = 5 * time.Second

// holder is who an allocation counts against.
type holder struct {
	user string
	net  netip.Prefix
}

type reservation struct {
	holder
	at time.Time
}

// quotas counts live allocations per user and per network, and open TCP
// connections per network. pion/turn asks QuotaHandler before it creates
// an allocation and reports creation and deletion afterwards; between the
// two a reservation holds the slot, so concurrent allocates (one goroutine
// per TCP connection) cannot overshoot the cap.
type quotas struct {
	maxUser, maxNet, maxConns int // immutable
	bits4, bits6              int // immutable

	mu       sync.Mutex
	users    map[string]int         // guarded by mu: live + pending allocations per subject
	nets     map[netip.Prefix]int   // guarded by mu: live + pending allocations per network
	conns    map[netip.Prefix]int   // guarded by mu: open TCP connections per network
	pending  map[string]reservation // guarded by mu: by allocation key
	live     map[string]holder      // guarded by mu: by allocation key
	draining bool                   // guarded by mu
}

func newQuotas(cfg Config) *quotas {
	return &quotas{
		maxUser: cfg.MaxAllocationsPerUser, maxNet: cfg.MaxAllocationsPerNetwork, maxConns: cfg.MaxTCPConnsPerNetwork,
		bits4: cfg.NetworkBitsV4, bits6: cfg.NetworkBitsV6,
		users: map[string]int{}, nets: map[netip.Prefix]int{}, conns: map[netip.Prefix]int{},
		pending: map[string]reservation{}, live: map[string]holder{},
	}
}

// networkOf is the cap key of an address: its /24 (IPv4, also when
// IPv4-mapped) or /48 (IPv6) prefix.
func (q *quotas) networkOf(ip netip.Addr) netip.Prefix {
	ip = ip.Unmap()
	bits := q.bits6
	if ip.Is4() {
		bits = q.bits4
	}
	p, _ := ip.Prefix(bits)
	return p
}

func addrIP(a net.Addr) netip.Addr {
	switch v := a.(type) {
	case *net.UDPAddr:
		ip, _ := netip.AddrFromSlice(v.IP)
		return ip.Unmap()
	case *net.TCPAddr:
		ip, _ := netip.AddrFromSlice(v.IP)
		return ip.Unmap()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// allocKey names an allocation by its client's transport address (the
// server side of the 5-tuple is fixed per listener, and the UDP and TCP
// listeners differ in Network()).
func allocKey(src net.Addr) string { return src.Network() + "|" + src.String() }

func subjectOf(userID string) string {
	if _, subj, err := ParseUsername(userID); err == nil {
		return subj
	}
	return userID
}

// reserve takes a slot for an allocation about to be created, or returns
// the refusal reason.
func (q *quotas) reserve(userID string, src net.Addr, now time.Time) (reason string, ok bool) {
	h := holder{user: subjectOf(userID), net: q.networkOf(addrIP(src))}
	key := allocKey(src)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.draining {
		return reasonDraining, false
	}
	for k, r := range q.pending {
		if now.Sub(r.at) > pendingTTL || k == key {
			q.releaseLocked(r.holder)
			delete(q.pending, k)
		}
	}
	if q.users[h.user] >= q.maxUser {
		return reasonUserQuota, false
	}
	if q.nets[h.net] >= q.maxNet {
		return reasonNetworkQuota, false
	}
	q.users[h.user]++
	q.nets[h.net]++
	q.pending[key] = reservation{holder: h, at: now}
	return "", true
}

// created turns the reservation of src's allocation into a live one.
func (q *quotas) created(userID string, src net.Addr) {
	key := allocKey(src)
	q.mu.Lock()
	defer q.mu.Unlock()
	r, ok := q.pending[key]
	if ok {
		delete(q.pending, key)
	} else {
		// No reservation (it lapsed): count the allocation all the same.
		r.holder = holder{user: subjectOf(userID), net: q.networkOf(addrIP(src))}
		q.users[r.user]++
		q.nets[r.net]++
	}
	if old, dup := q.live[key]; dup {
		q.releaseLocked(old)
	}
	q.live[key] = r.holder
}

// deleted gives back the slot of src's allocation.
func (q *quotas) deleted(src net.Addr) {
	key := allocKey(src)
	q.mu.Lock()
	defer q.mu.Unlock()
	if h, ok := q.live[key]; ok {
		delete(q.live, key)
		q.releaseLocked(h)
	}
}

func (q *quotas) releaseLocked(h holder) {
	if q.users[h.user]--; q.users[h.user] <= 0 {
		delete(q.users, h.user)
	}
	if q.nets[h.net]--; q.nets[h.net] <= 0 {
		delete(q.nets, h.net)
	}
}

// openConn admits one more TCP connection from ip's network.
func (q *quotas) openConn(ip netip.Addr) (netip.Prefix, bool) {
	n := q.networkOf(ip)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.conns[n] >= q.maxConns {
		return n, false
	}
	q.conns[n]++
	return n, true
}

func (q *quotas) closeConn(n netip.Prefix) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.conns[n]--; q.conns[n] <= 0 {
		delete(q.conns, n)
	}
}

func (q *quotas) drain() {
	q.mu.Lock()
	q.draining = true
	q.mu.Unlock()
}

// counts reports the live and pending allocations of a subject and of a
// network (for tests and the README's walk-through).
func (q *quotas) counts(user string, n netip.Prefix) (perUser, perNet int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.users[user], q.nets[n]
}
