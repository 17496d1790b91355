package transport

import "strings"

// Origins is an allow list of request Origins, compared without regard to
// case. Empty allows every origin.
type Origins map[string]bool

// NewOrigins builds the allow list from list.
func NewOrigins(list []string) Origins {
	o := make(Origins, len(list))
	for _, s := range list {
		o[strings.ToLower(s)] = true
	}
	return o
}

// Allow reports whether origin may call.
func (o Origins) Allow(origin string) bool { return len(o) == 0 || o[strings.ToLower(origin)] }
