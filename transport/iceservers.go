package transport

import (
	"encoding/json"
	"net/http"
	"strings"
)

// ICEServersFunc gives the ICE servers a WebRTC client making r should
// use, as JSON {"iceServers":[{"urls":[...],"username":"…","credential":"…"}]}
// (per-client TURN credentials), or nil for none. It decides itself whom
// it hands credentials to (the edge wants a valid access token).
type ICEServersFunc func(r *http.Request) json.RawMessage

// iceServerList is the decoded form of an ICEServersFunc answer.
type iceServerList struct {
	ICEServers []struct {
		URLs       []string `json:"urls"`
		Username   string   `json:"username"`
		Credential string   `json:"credential"`
	} `json:"iceServers"`
}

// linkHeaders renders ice (an ICEServersFunc answer) as WHIP's Link
// headers (RFC 9725 section 4.6), one per URL:
//
//	Link: <turn:host:3478?transport=udp>; rel="ice-server"; username="u"; credential="c"; credential-type="password"
//
// ICE servers are what a client needs before its offer, so a client learns
// them from the negotiate answer; these let a WHIP client that posted an
// offer without asking refresh its configuration (setConfiguration).
func linkHeaders(ice json.RawMessage) []string {
	var l iceServerList
	if len(ice) == 0 || json.Unmarshal(ice, &l) != nil {
		return nil
	}
	var out []string
	for _, s := range l.ICEServers {
		for _, u := range s.URLs {
			if u == "" || strings.ContainsAny(u, "<>\r\n") {
				continue
			}
			h := "<" + u + `>; rel="ice-server"`
			if s.Username != "" {
				h += `; username=` + quoteParam(s.Username) + `; credential=` + quoteParam(s.Credential) + `; credential-type="password"`
			}
			out = append(out, h)
		}
	}
	return out
}

// quoteParam is an RFC 9110 quoted-string (control bytes dropped).
func quoteParam(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
