package redisstate

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	type want struct {
		topo     Topology
		addrs    []string // server, seeds or sentinels
		user, pw string   // data-server credentials
		sUser    string   // sentinel credentials
		sPw      string
		master   string
		db       int
		tls      bool
		sni      string
		redacted string
	}
	for _, tc := range []struct {
		name string
		url  string
		want want
	}{
		{"single", "redis://127.0.0.1:6380/2",
			want{topo: TopologySingle, addrs: []string{"127.0.0.1:6380"}, db: 2, redacted: "redis://127.0.0.1:6380/2"}},
		{"single default port and password", "redis://:s3cret@cache/0?dial_timeout=2s",
			want{topo: TopologySingle, addrs: []string{"cache:6379"}, pw: "s3cret", redacted: "redis://:xxxxx@cache/0?dial_timeout=2s"}},
		{"single tls", "rediss://app:pw@redis.example:6390",
			want{topo: TopologySingle, addrs: []string{"redis.example:6390"}, user: "app", pw: "pw", tls: true, sni: "redis.example"}},
		{"unix", "unix://app:pw@/run/redis.sock?db=3",
			want{topo: TopologySingle, addrs: []string{"/run/redis.sock"}, user: "app", pw: "pw", db: 3}},
		{"cluster seeds", "redis+cluster://app:pw@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002,node4/",
			want{topo: TopologyCluster, addrs: []string{"10.0.0.1:7000", "10.0.0.2:7001", "[::1]:7002", "node4:6379"},
				user: "app", pw: "pw", redacted: "redis+cluster://app:xxxxx@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002,node4/"}},
		{"cluster one seed, options", "redis+cluster://h:7000?max_redirects=5&pool_size=7",
			want{topo: TopologyCluster, addrs: []string{"h:7000"}}},
		{"cluster tls several seeds verifies each host", "rediss+cluster://a.example:7000,b.example:7000",
			want{topo: TopologyCluster, addrs: []string{"a.example:7000", "b.example:7000"}, tls: true, sni: ""}},
		{"cluster tls fixed name", "rediss+cluster://10.0.0.1:7000,10.0.0.2:7000?tls_server_name=cache.example",
			want{topo: TopologyCluster, addrs: []string{"10.0.0.1:7000", "10.0.0.2:7000"}, tls: true, sni: "cache.example"}},
		{"sentinel master in path", "redis+sentinel://app:pw@s1:5000,s2/mymaster/4",
			want{topo: TopologySentinel, addrs: []string{"s1:5000", "s2:26379"}, user: "app", pw: "pw", master: "mymaster", db: 4,
				redacted: "redis+sentinel://app:xxxxx@s1:5000,s2/mymaster/4"}},
		{"sentinel master in query", "redis+sentinel://s1:26379/1?master_name=mm",
			want{topo: TopologySentinel, addrs: []string{"s1:26379"}, master: "mm", db: 1}},
		{"escaped reserved characters in password", "redis://app:a%2Fb%3Fc%23d%40e@cache:6379/1",
			want{topo: TopologySingle, addrs: []string{"cache:6379"}, user: "app", pw: "a/b?c#d@e", db: 1, redacted: "redis://app:xxxxx@cache:6379/1"}},
		{"sentinel own credentials", "rediss+sentinel://:datapw@s1,s2/mm?sentinel_username=sen&sentinel_password=senpw&skip_verify=true",
			want{topo: TopologySentinel, addrs: []string{"s1:26379", "s2:26379"}, pw: "datapw", sUser: "sen", sPw: "senpw", master: "mm",
				tls: true, redacted: "rediss+sentinel://:xxxxx@s1,s2/mm?sentinel_username=sen&sentinel_password=xxxxx&skip_verify=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := ParseURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			if u.Topology != w.topo {
				t.Fatalf("topology %q, want %q", u.Topology, w.topo)
			}
			if w.redacted != "" && u.Redacted != w.redacted {
				t.Errorf("redacted %q, want %q", u.Redacted, w.redacted)
			}
			var (
				addrs    []string
				user, pw string
				db       int
				tlsOn    bool
				sni      string
			)
			switch w.topo {
			case TopologySingle:
				o := u.Single
				addrs, user, pw, db = []string{o.Addr}, o.Username, o.Password, o.DB
				if o.TLSConfig != nil {
					tlsOn, sni = true, o.TLSConfig.ServerName
				}
			case TopologyCluster:
				o := u.Cluster
				addrs, user, pw = o.Addrs, o.Username, o.Password
				if o.TLSConfig != nil {
					tlsOn, sni = true, o.TLSConfig.ServerName
				}
			case TopologySentinel:
				o := u.Failover
				addrs, user, pw, db = o.SentinelAddrs, o.Username, o.Password, o.DB
				if o.MasterName != w.master {
					t.Errorf("master %q, want %q", o.MasterName, w.master)
				}
				if o.SentinelUsername != w.sUser || o.SentinelPassword != w.sPw {
					t.Errorf("sentinel credentials %q/%q, want %q/%q", o.SentinelUsername, o.SentinelPassword, w.sUser, w.sPw)
				}
				if o.TLSConfig != nil {
					tlsOn, sni = true, o.TLSConfig.ServerName
				}
			}
			if !slices.Equal(addrs, w.addrs) {
				t.Errorf("addrs %q, want %q", addrs, w.addrs)
			}
			if user != w.user || pw != w.pw {
				t.Errorf("credentials %q/%q, want %q/%q", user, pw, w.user, w.pw)
			}
			if db != w.db {
				t.Errorf("db %d, want %d", db, w.db)
			}
			if tlsOn != w.tls || (w.tls && sni != w.sni) {
				t.Errorf("tls %v server name %q, want %v %q", tlsOn, sni, w.tls, w.sni)
			}
		})
	}
}

// TestParseRedisURLRefusals: every refusal wraps ErrBadURL, says why,
// and never prints the password, whichever part of the URL is wrong.
func TestParseRedisURLRefusals(t *testing.T) {
	const pw = "hunter2-Sekr1t"
	for _, tc := range []struct {
		name, url, why string
	}{
		{"no scheme", "app:" + pw + "@cache:6379", "no scheme"},
		{"unknown scheme", "memcached://app:" + pw + "@cache:11211", "unknown scheme"},
		{"sentinel without plus", "sentinel://app:" + pw + "@s1/mm", "unknown scheme"},
		{"bad port", "redis://app:" + pw + "@cache:port/0", "port"},
		{"bad port in seed list", "redis+cluster://app:" + pw + "@a:7000,b:seven", "bad port"},
		{"empty seed", "redis+cluster://app:" + pw + "@a:7000,,b:7001", "empty host"},
		{"unbracketed ipv6", "redis+cluster://app:" + pw + "@::1", "ipv6"},
		{"cluster with db", "redis+cluster://app:" + pw + "@a:7000/3", "no database"},
		{"cluster unknown option", "redis+cluster://app:" + pw + "@a:7000?frobnicate=1", "frobnicate"},
		{"single with host list", "redis://app:" + pw + "@a:1,b:2/0", "several hosts"},
		{"single bad db", "redis://app:" + pw + "@a:1/zero", "database"},
		{"sentinel no master", "redis+sentinel://app:" + pw + "@s1:26379", "no master name"},
		{"sentinel deep path", "redis+sentinel://app:" + pw + "@s1/mm/0/x", "MASTER[/DB]"},
		{"sentinel bad db", "redis+sentinel://app:" + pw + "@s1/mm/zero", "not a number"},
		{"sentinel master twice", "redis+sentinel://app:" + pw + "@s1/mm/1?master_name=mm", "at most /DB"},
		{"sentinel credentials twice", "redis+sentinel://app:" + pw + "@s1/mm?password=" + pw, "both"},
		{"secret in query only", "redis+sentinel://s1/mm?sentinel_password=" + pw + "&bogus=1", "bogus"},
		{"password in a bad userinfo", "redis://app:" + pw + " x@cache/0", "userinfo"},
		{"fragment", "redis+cluster://app:" + pw + "@a:7000#frag", "fragment"},
		{"unescaped slash in password", "redis://app:" + pw + "/Sekr1t@cache:6379/0", "percent-encode"},
		{"unescaped question mark in password", "redis+sentinel://app:Sekr1t?" + pw + "@s1/mm", "percent-encode"},
		{"unescaped hash in password", "redis+cluster://app:Sekr1t#" + pw + "@a:7000", "percent-encode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseURL(tc.url)
			if !errors.Is(err, ErrBadURL) {
				t.Fatalf("err %v, want ErrBadURL", err)
			}
			if strings.Contains(err.Error(), "Sekr1t") {
				t.Fatalf("error prints the password: %v", err)
			}
			if !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("error %q does not say %q", err, tc.why)
			}
			if c, err := Open(tc.url, Options{}); c != nil || !errors.Is(err, ErrBadURL) {
				t.Fatalf("Open: %v %v", c, err)
			}
		})
	}
}
