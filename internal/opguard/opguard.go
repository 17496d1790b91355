// Package opguard guards the operator surface: the admin listener and the
// waiting room's operator API. One scheme everywhere: an operator sends an
// access token granting auth.RoleOperator as a bearer token (the edge
// never uses cookies, so a browser never attaches it by itself), and a
// browser's request from another site is refused before anything runs, so
// a page on the web cannot make an operator's browser revoke a session or
// freeze the room, nor reach the admin listener through a rebound DNS name.
package opguard

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/httpjson"
)

// Refusal codes, in the {"code","message"} body.
const (
	CodeTokenInvalid = "token_invalid"          // 401: no bearer token, or one that does not verify
	CodeNotOperator  = "operator_role_required" // 403: a valid token without the operator role
	CodeCrossSite    = "cross_site_request"     // 403: a browser request from another site
	CodeHost         = "host_not_allowed"       // 403: a Host the admin listener does not answer to
)

// Operator verifies r's bearer access token and its operator role.
func Operator(signer *auth.Signer, r *http.Request) (auth.Access, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" || signer == nil {
		return auth.Access{}, ErrNoToken
	}
	a, err := signer.VerifyAccess(tok)
	if err != nil {
		return auth.Access{}, fmt.Errorf("%w: %w", ErrNoToken, err)
	}
	if !a.HasRole(auth.RoleOperator) {
		return auth.Access{}, ErrNotOperator
	}
	return a, nil
}

// RequireOperator wraps an operator route: a cross-site browser request is
// refused (403 cross_site_request), then a request without a valid token
// (401 token_invalid) or without the role (403 operator_role_required).
func RequireOperator(signer *auth.Signer, next func(http.ResponseWriter, *http.Request, auth.Access)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := CheckSameSite(r); err != nil {
			Refuse(w, err)
			return
		}
		a, err := Operator(signer, r)
		if err != nil {
			Refuse(w, err)
			return
		}
		next(w, r, a)
	}
}

// Refuse answers one of this package's errors.
func Refuse(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrCrossSite):
		httpjson.WriteError(w, http.StatusForbidden, CodeCrossSite, err.Error())
	case errors.Is(err, ErrHost):
		httpjson.WriteError(w, http.StatusForbidden, CodeHost, err.Error())
	case errors.Is(err, ErrNotOperator):
		httpjson.WriteError(w, http.StatusForbidden, CodeNotOperator, "the token does not grant the operator role")
	default:
		w.Header().Set("WWW-Authenticate", `Bearer realm="egbe-edge operator"`)
		httpjson.WriteError(w, http.StatusUnauthorized, CodeTokenInvalid, "an operator access token is required (Authorization: Bearer ...; egbe-edge operator-token mints one)")
	}
}

// CheckSameSite refuses what a browser sends on another site's behalf.
// Browsers say where a request comes from: Sec-Fetch-Site (every current
// browser) and Origin (on every request that is not a GET or HEAD). A
// request from another site (Sec-Fetch-Site cross-site or same-site: on
// localhost another port is the same site but another origin) is refused,
// except a plain navigation (an operator following a link to /ops/); an
// unsafe method whose Origin is not this Host is refused too, for browsers
// without Sec-Fetch-Site. Tools (curl, Prometheus, kubelet) send neither
// header and pass: the operator token is their check.
func CheckSameSite(r *http.Request) error {
	safe := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		if !(safe && r.Header.Get("Sec-Fetch-Mode") == "navigate") {
			return fmt.Errorf("%w: Sec-Fetch-Site %s", ErrCrossSite, site)
		}
	}
	if origin := r.Header.Get("Origin"); origin != "" && !safe {
		host, ok := strings.CutPrefix(origin, "http://")
		if !ok {
			host, ok = strings.CutPrefix(origin, "https://")
		}
		if !ok || !strings.EqualFold(host, r.Host) {
			return fmt.Errorf("%w: Origin %s on host %s", ErrCrossSite, origin, r.Host)
		}
	}
	return nil
}

// HostAllowed reports whether the admin listener answers to r's Host: an
// IP address, localhost, or one of names. A DNS name an attacker rebinds
// to the admin address arrives with the attacker's Host and is refused.
func HostAllowed(r *http.Request, names []string) error {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if net.ParseIP(strings.Trim(host, "[]")) != nil || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return nil
	}
	if slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, host) }) {
		return nil
	}
	return fmt.Errorf("%w: %q (add it with --admin-host)", ErrHost, r.Host)
}

// Admin wraps the whole admin listener: a Host it does not answer to and a
// browser request from another site are refused, whatever the route.
// Routes that change something add RequireOperator.
func Admin(hosts []string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := HostAllowed(r, hosts); err != nil {
			Refuse(w, err)
			return
		}
		if err := CheckSameSite(r); err != nil {
			Refuse(w, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}
