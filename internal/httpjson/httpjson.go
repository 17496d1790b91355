// Package httpjson writes the JSON answers of every HTTP API the edge
// serves: one place for the content type and the no-store rule (answers
// carry tokens, queue positions and live figures, none of which a cache
// may keep); and reads the small JSON bodies of its own endpoints,
// strictly and within a bound.
package httpjson

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
)

// ErrTrailingData: a body holds more than one JSON value.
var ErrTrailingData = errors.New("trailing data after the JSON object")

// Decode strictly decodes r's body into v: unknown fields are an error, so
// is anything after the one value, and a body longer than limit bytes fails
// to decode. An empty body is io.EOF.
func Decode(r *http.Request, v any, limit int64) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ErrTrailingData
	}
	return nil
}

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
