// Package httpjson writes the JSON answers of every HTTP API the edge
// serves: one place for the content type and the no-store rule (answers
// carry tokens, queue positions and live figures, none of which a cache
// may keep).
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Write writes v as JSON with status.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the status is out; a failed write is the client's loss
}

// Error is the {"code","message"} body most refusals carry.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// WriteError writes an Error with status.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	Write(w, status, Error{Code: code, Message: message})
}
