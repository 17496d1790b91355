package edge

import (
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/httpjson"
	"github.com/oshun/egbe-edge/internal/opguard"
)

// adminHandler is the admin listener: figures, health, profiles and the
// operator page for anyone who can reach it (and answers to an allowed
// Host, from the same site), changes only for an operator. Every
// request that is not a GET or HEAD needs an operator token; so do the
// operator reads (live sessions, the waiting room's state).
func (e *Edge) adminHandler() http.Handler {
	m := http.NewServeMux()
	m.Handle("/metrics", promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{Registry: e.reg}))
	m.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	m.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if reasons := e.unready(); len(reasons) > 0 {
			httpjson.Write(w, http.StatusServiceUnavailable, map[string]any{"status": "unready", "reasons": reasons})
			return
		}
		httpjson.Write(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	m.HandleFunc("/debug/pprof/", pprof.Index)
	m.HandleFunc("/debug/pprof/cmdline", redactedCmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	e.mountOps(m)
	// The waiting room's operator API, beside the operator page that
	// drives it (the same routes as on the main listener).
	e.adm.handlers.RegisterOperator(m)

	devToken := ""
	if e.cfg.Mode == ModeDev {
		devToken = opsDevTokenPath
		m.HandleFunc("POST "+opsDevTokenPath, e.opsDevToken)
	}
	return opguard.Admin(e.cfg.AdminHosts, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead && r.URL.Path != devToken {
			if _, err := opguard.Operator(e.signer, r); err != nil {
				opguard.Refuse(w, err)
				return
			}
		}
		m.ServeHTTP(w, r)
	}))
}

// opsDevTokenPath mints the operator page its token in dev mode. Dev mode
// already mints any token for anyone at /v6/dev/token; prod has neither,
// and the page asks the operator for a token (egbe-edge operator-token).
const opsDevTokenPath = "/ops/dev-token"

// opsDevTokenTTL is the life of the dev operator page's token.
const opsDevTokenTTL = 12 * time.Hour

func (e *Edge) opsDevToken(w http.ResponseWriter, r *http.Request) {
	tok, err := e.signer.IssueAccess(auth.Access{Subject: "dev-operator", Roles: []string{auth.RoleOperator}}, opsDevTokenTTL)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "%v", err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]string{"token": tok, "subject": "dev-operator"})
}

// redactedCmdline is pprof's /debug/pprof/cmdline with every password in a
// URL argument (--redis-url redis://user:PASSWORD@host) replaced by xxxxx:
// the admin listener may be reachable by more people than the secrets are.
func redactedCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(strings.Join(redactArgs(os.Args), "\x00")))
}

// redactArgs redacts the password of every URL in args, whether a flag's
// separate value or after "=".
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if name, val, found := strings.Cut(a, "="); found && strings.HasPrefix(name, "-") {
			out[i] = name + "=" + redactURL(val)
			continue
		}
		out[i] = redactURL(a)
	}
	return out
}

// redactURL replaces the password of scheme://user:password@host... and
// the value of every query parameter named *password* (Sentinel's
// sentinel_password) by xxxxx. It reads the text rather than parsing the
// URL, so a Cluster or Sentinel URL's list of hosts (which net/url
// refuses) is redacted too.
func redactURL(v string) string {
	i := strings.Index(v, "://")
	if i < 0 {
		return v
	}
	head, rest := v[:i+3], v[i+3:]
	authority, tail := rest, ""
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		authority, tail = rest[:j], rest[j:]
	}
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		if user, _, hasPass := strings.Cut(authority[:at], ":"); hasPass {
			authority = user + ":xxxxx" + authority[at:]
		}
	}
	if q := strings.IndexByte(tail, '?'); q >= 0 {
		params := strings.Split(tail[q+1:], "&")
		for k, p := range params {
			if name, _, ok := strings.Cut(p, "="); ok && strings.Contains(strings.ToLower(name), "password") {
				params[k] = name + "=xxxxx"
			}
		}
		tail = tail[:q+1] + strings.Join(params, "&")
	}
	return head + authority + tail
}
