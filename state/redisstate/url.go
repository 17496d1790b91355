package redisstate

// Parsing the shared Redis's URL (--redis-url): a single server, a Redis
// Cluster or a Sentinel-managed master. Every Redis store in this package
// keeps each multi-key script within one hash tag (keys.go), so all three
// work.

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrBadURL: the Redis URL is malformed or names a scheme Open
// does not accept. Its message carries the URL with every password
// replaced by "xxxxx", never the password itself.
var ErrBadURL = errors.New("state: bad redis url")

// Topology is how a Redis URL reaches its data.
type Topology string

// The topologies ParseURL tells apart.
const (
	// TopologySingle: redis://, rediss:// or unix://, one server.
	TopologySingle Topology = "single"
	// TopologyCluster: redis+cluster:// or rediss+cluster://, seed nodes of
	// a Redis Cluster.
	TopologyCluster Topology = "cluster"
	// TopologySentinel: redis+sentinel:// or rediss+sentinel://, Sentinels
	// watching a named master.
	TopologySentinel Topology = "sentinel"
)

// URL is a parsed Redis URL: exactly the option set of its Topology is
// non-nil.
type URL struct {
	Topology Topology
	Single   *redis.Options         // TopologySingle
	Cluster  *redis.ClusterOptions  // TopologyCluster
	Failover *redis.FailoverOptions // TopologySentinel
	// Redacted is the URL with its passwords replaced, fit for logs.
	Redacted string
}

const (
	defaultRedisPort    = "6379"
	defaultSentinelPort = "26379"
	redactedSecret      = "xxxxx"
)

// ParseURL parses rawURL without building a client. Accepted forms:
//
//	redis://[user:pass@]host[:6379][/DB][?opt=...]       one server (rediss:// for TLS)
//	unix://[user:pass@]/path/redis.sock[?db=DB]          one server on a socket
//	redis+cluster://[user:pass@]h1:p1,h2:p2[/][?opt=...] Cluster seed nodes (rediss+cluster:// for TLS)
//	redis+sentinel://[user:pass@]s1:p1,s2:p2/MASTER[/DB][?opt=...]
//	                                                     Sentinels (port 26379 by default) and the
//	                                                     master's name (rediss+sentinel:// for TLS)
//
// The user and password in the URL always authenticate to the servers that
// hold the data (the master, or every cluster node). For a Sentinel URL the
// master name may instead be given as ?master_name=MASTER (the path is then
// at most /DB), and the Sentinels' own credentials, when they differ, as
// ?sentinel_username=...&sentinel_password=.... A cluster URL takes no
// database number. With TLS and several hosts, each connection verifies the
// certificate against the host it dials, unless ?tls_server_name=NAME fixes
// one name. Other query options are go-redis's (dial_timeout, pool_size,
// max_retries, ...); an unknown one is an error.
//
// Errors wrap ErrBadURL and never contain a password.
func ParseURL(rawURL string) (URL, error) {
	p := splitRedisURL(rawURL)
	out := URL{Redacted: p.redacted()}
	fail := func(format string, args ...any) (URL, error) {
		msg := p.scrub(fmt.Sprintf(format, args...))
		return URL{}, fmt.Errorf("%w: %s: %s", ErrBadURL, out.Redacted, msg)
	}
	failErr := func(what string, err error) (URL, error) {
		// A url.Error repeats the whole input, password included: keep only
		// its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fail("%s: %s", what, err.Error())
	}
	if !p.hasScheme {
		return fail("no scheme: want redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://")
	}
	if p.atInTail() {
		return fail("an '@' after the host: percent-encode '/', '?', '#' and '@' in the user and password (%%2F, %%3F, %%23, %%40)")
	}
	switch p.scheme {
	case "redis", "rediss", "unix":
		if strings.Contains(p.hostList, ",") {
			return fail("single server: several hosts need redis+cluster:// or redis+sentinel://")
		}
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return failErr("single server", err)
		}
		out.Topology, out.Single = TopologySingle, o
		return out, nil
	case "redis+cluster", "rediss+cluster":
		u, hosts, err := p.parse(defaultRedisPort)
		if err != nil {
			return failErr("cluster", err)
		}
		if strings.Trim(u.Path, "/") != "" {
			return fail("cluster: a Redis Cluster has no database number (path %q)", u.Path)
		}
		u.Path = ""
		q := u.Query()
		sni, hasSNI := popQuery(q, "tls_server_name")
		for _, h := range hosts[1:] {
			q.Add("addr", h)
		}
		u.RawQuery = q.Encode()
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return failErr("cluster", err)
		}
		fixTLS(o.TLSConfig, len(hosts), sni, hasSNI)
		out.Topology, out.Cluster = TopologyCluster, o
		return out, nil
	case "redis+sentinel", "rediss+sentinel":
		return p.sentinel(out, fail, failErr)
	default:
		return fail("unknown scheme %q: want redis, rediss, unix, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel", p.scheme)
	}
}

// sentinel builds FailoverOptions through go-redis's ParseFailoverURL, whose
// form differs from ours (its userinfo is the Sentinels', its path only a
// database): the URL is rewritten into that form first.
func (p redisURLParts) sentinel(out URL, fail func(string, ...any) (URL, error),
	failErr func(string, error) (URL, error)) (URL, error) {
	u, hosts, err := p.parse(defaultSentinelPort)
	if err != nil {
		return failErr("sentinel", err)
	}
	q := u.Query()
	segs := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
	db := ""
	if _, inQuery := q["master_name"]; inQuery {
		if q.Get("master_name") == "" {
			return fail("sentinel: empty master_name")
		}
		if len(segs) > 1 {
			return fail("sentinel: with ?master_name the path is at most /DB, got %q", u.Path)
		}
		if len(segs) == 1 {
			db = segs[0]
		}
	} else {
		switch len(segs) {
		case 0:
			return fail("sentinel: no master name: want redis+sentinel://host:26379/MASTER[/DB] or ?master_name=MASTER")
		case 1, 2:
			q.Set("master_name", segs[0])
			if len(segs) == 2 {
				db = segs[1]
			}
		default:
			return fail("sentinel: path %q: want /MASTER[/DB]", u.Path)
		}
	}
	if db != "" {
		if _, err := strconv.Atoi(db); err != nil {
			return fail("sentinel: database %q is not a number", db)
		}
	}
	sUser, _ := popQuery(q, "sentinel_username")
	sPass, _ := popQuery(q, "sentinel_password")
	sni, hasSNI := popQuery(q, "tls_server_name")
	var user, pass string
	if u.User != nil {
		if q.Has("username") || q.Has("password") {
			return fail("sentinel: credentials both in the userinfo and the query")
		}
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	g := url.URL{Scheme: u.Scheme, Host: u.Host, RawQuery: q.Encode()}
	if sUser != "" || sPass != "" {
		g.User = url.UserPassword(sUser, sPass)
	}
	if db != "" {
		g.Path = "/" + db
	}
	o, err := redis.ParseFailoverURL(g.String())
	if err != nil {
		return failErr("sentinel", err)
	}
	if u.User != nil {
		o.Username, o.Password = user, pass
	}
	fixTLS(o.TLSConfig, len(hosts), sni, hasSNI)
	out.Topology, out.Failover = TopologySentinel, o
	return out, nil
}

// fixTLS: go-redis pins ServerName to the first host, which fails for every
// other host of a multi-host URL; an empty ServerName makes crypto/tls
// verify against the host each connection dials.
func fixTLS(c *tls.Config, hosts int, sni string, hasSNI bool) {
	if c == nil {
		return
	}
	c.MinVersion = tls.VersionTLS12
	switch {
	case hasSNI:
		c.ServerName = sni
	case hosts > 1:
		c.ServerName = ""
	}
}

func popQuery(q url.Values, name string) (string, bool) {
	if !q.Has(name) {
		return "", false
	}
	v := q.Get(name)
	q.Del(name)
	return v, true
}

// redisURLParts is a Redis URL split by hand: net/url takes one host, and
// the cluster and sentinel forms list several.
type redisURLParts struct {
	raw       string
	hasScheme bool
	scheme    string // lower case, with the "+cluster"/"+sentinel" suffix
	userinfo  string // raw, still escaped; "" when absent
	hasUser   bool
	hostList  string // "h1:p1,h2:p2"
	tail      string // path, query and fragment, raw
}

func splitRedisURL(raw string) redisURLParts {
	p := redisURLParts{raw: raw}
	rest := raw
	if s, r, ok := strings.Cut(raw, "://"); ok {
		p.hasScheme, p.scheme, rest = true, strings.ToLower(s), r
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	auth := rest[:end]
	p.tail = rest[end:]
	if at := strings.LastIndexByte(auth, '@'); at >= 0 {
		p.hasUser, p.userinfo, auth = true, auth[:at], auth[at+1:]
	}
	p.hostList = auth
	return p
}

// base is the scheme go-redis knows: redis or rediss.
func (p redisURLParts) base() string {
	s, _, _ := strings.Cut(p.scheme, "+")
	return s
}

// parse checks the host list (adding defPort where a port is missing) and
// returns the URL rebuilt on its first host, and all hosts.
func (p redisURLParts) parse(defPort string) (*url.URL, []string, error) {
	var hosts []string
	for h := range strings.SplitSeq(p.hostList, ",") {
		hp, err := hostPort(h, defPort)
		if err != nil {
			return nil, nil, err
		}
		hosts = append(hosts, hp)
	}
	s := p.base() + "://"
	if p.hasUser {
		s += p.userinfo + "@"
	}
	u, err := url.Parse(s + hosts[0] + p.tail)
	if err != nil {
		return nil, nil, err
	}
	if u.Fragment != "" || strings.Contains(p.tail, "#") {
		return nil, nil, errors.New("a fragment (#...) has no meaning here")
	}
	return u, hosts, nil
}

// hostPort validates one host of a list and adds defPort if it has none.
func hostPort(h, defPort string) (string, error) {
	if h == "" {
		return "", errors.New("empty host in the host list")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		// No port: "name", "10.0.0.1" or "[::1]".
		host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), defPort
		if strings.ContainsAny(host, "[]") || (strings.Contains(host, ":") && !strings.HasPrefix(h, "[")) {
			return "", fmt.Errorf("host %q: want host, host:port or [ipv6]:port", h)
		}
	}
	if host == "" {
		return "", fmt.Errorf("host %q: empty name", h)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("host %q: bad port %q", h, port)
	}
	n, _ := strconv.Atoi(port)
	return net.JoinHostPort(host, strconv.Itoa(n)), nil
}

// secrets are the password strings the URL carries, raw and unescaped,
// for scrubbing messages.
func (p redisURLParts) secrets() []string {
	var out []string
	add := func(s string) {
		if s != "" {
			out = append(out, s)
			if d, err := url.PathUnescape(s); err == nil && d != s {
				out = append(out, d)
			}
			if d, err := url.QueryUnescape(s); err == nil && d != s {
				out = append(out, d)
			}
		}
	}
	if _, pw, ok := strings.Cut(p.userinfo, ":"); ok {
		add(pw)
	}
	_, query, _ := strings.Cut(p.tail, "?")
	query, _, _ = strings.Cut(query, "#")
	for kv := range strings.SplitSeq(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		if isSecretParam(k) {
			add(v)
		}
	}
	return out
}

func isSecretParam(name string) bool {
	return strings.Contains(strings.ToLower(name), "password")
}

// scrub replaces every secret in msg.
func (p redisURLParts) scrub(msg string) string {
	for _, s := range p.secrets() {
		msg = strings.ReplaceAll(msg, s, redactedSecret)
	}
	return msg
}

// atInTail: an '@' after the authority, most likely a password holding an
// unescaped '/', '?' or '#' that ended the authority early.
func (p redisURLParts) atInTail() bool { return strings.Contains(p.tail, "@") }

// redacted is the URL with the userinfo password and every *password*
// query value replaced.
func (p redisURLParts) redacted() string {
	var b strings.Builder
	if p.hasScheme {
		b.WriteString(p.scheme + "://")
	}
	if p.atInTail() {
		// Where the password ends is unknown: hide all before the last '@'.
		_, after, _ := strings.Cut(p.raw, "://")
		if !p.hasScheme {
			after = p.raw
		}
		b.WriteString(redactedSecret + "@" + after[strings.LastIndexByte(after, '@')+1:])
		return b.String()
	}
	if p.hasUser {
		user, _, hasPw := strings.Cut(p.userinfo, ":")
		b.WriteString(user)
		if hasPw {
			b.WriteString(":" + redactedSecret)
		}
		b.WriteByte('@')
	}
	b.WriteString(p.hostList)
	path, query, hasQuery := strings.Cut(p.tail, "?")
	path, _, _ = strings.Cut(path, "#")
	b.WriteString(path)
	if hasQuery {
		query, _, _ = strings.Cut(query, "#")
		b.WriteByte('?')
		for i, kv := range strings.Split(query, "&") {
			if i > 0 {
				b.WriteByte('&')
			}
			if k, _, ok := strings.Cut(kv, "="); ok && isSecretParam(k) {
				kv = k + "=" + redactedSecret
			}
			b.WriteString(kv)
		}
	}
	return b.String()
}
