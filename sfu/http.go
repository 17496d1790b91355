package sfu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/httpjson"
)

// maxBodyBytes bounds a join/leave body (the SDP offer dominates).
const maxBodyBytes = maxSDPBytes + 4<<10

// joinTimeout bounds answering one offer (ICE-lite gathering is local).
const joinTimeout = 5 * time.Second

// JoinRequest is the body of POST /v6/voice/session.
type JoinRequest struct {
	SessionID string `json:"session_id"`
	SDP       string `json:"sdp"`
}

// JoinResponse is the 201 body of POST /v6/voice/session.
type JoinResponse struct {
	VoicePeerID string `json:"voice_peer_id"`
	SDP         string `json:"sdp"`   // the answer, ICE-lite candidates included
	Slots       int    `json:"slots"` // audio slots granted (<= K)
	// ICEServers is {"iceServers":[...]} for this client's next WebRTC
	// connections to this edge (Deps.ICEServers); absent when none.
	ICEServers json.RawMessage `json:"ice_servers,omitempty"`
}

// LeaveRequest is the optional body of DELETE /v6/voice/session.
type LeaveRequest struct {
	VoicePeerID string `json:"voice_peer_id"`
}

// ErrorBody is every error response: {"code","message"}.
type ErrorBody struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// EdgeID and EdgeURL name the edge holding the room
	// (voice_room_elsewhere only): resume the realtime session at EdgeURL,
	// then join voice there.
	EdgeID  string `json:"edge_id,omitempty"`
	EdgeURL string `json:"edge_url,omitempty"`
}

// Handler serves the voice API:
//
//	POST   /v6/voice/session                 join (JoinRequest -> 201 JoinResponse)
//	DELETE /v6/voice/session/{voice_peer_id} leave (204)
//	DELETE /v6/voice/session?voice_peer_id=  leave (or the id in a LeaveRequest body)
//
// Every request carries "Authorization: Bearer <access token>".
func (s *SFU) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v6/voice/session", s.handleJoin)
	mux.HandleFunc("DELETE /v6/voice/session/{id}", s.handleLeave)
	mux.HandleFunc("DELETE /v6/voice/session", s.handleLeave)
	return mux
}

func (s *SFU) writeError(w http.ResponseWriter, err error) {
	code, status := codeOf(err)
	s.m.joinErrors.WithLabelValues(string(code)).Inc()
	msg := err.Error()
	if status >= 500 && code == CodeInternal {
		msg = "internal error"
		s.log.Warn("voice request failed", "err", err)
	}
	body := ErrorBody{Code: code, Message: msg}
	if re, ok := errors.AsType[*RoomElsewhereError](err); ok {
		body.EdgeID, body.EdgeURL = re.Holder.EdgeID, re.Holder.URL
	}
	httpjson.Write(w, status, body)
}

func (s *SFU) authorize(r *http.Request) (auth.Access, error) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return auth.Access{}, fmt.Errorf("%w: missing bearer token", ErrUnauthorized)
	}
	a, err := s.deps.Signer.VerifyAccess(tok)
	if err != nil {
		// codeOf maps auth.ErrExpired to token_expired, the rest to
		// token_invalid.
		return auth.Access{}, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	return a, nil
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBodyBytes+1))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data", ErrBadRequest)
	}
	return nil
}

func (s *SFU) handleJoin(w http.ResponseWriter, r *http.Request) {
	acc, err := s.authorize(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if r.ContentLength > maxBodyBytes {
		s.writeError(w, fmt.Errorf("%w: body over %d bytes", ErrBadRequest, maxBodyBytes))
		return
	}
	var req JoinRequest
	if err := decodeBody(r, &req); err != nil {
		s.writeError(w, err)
		return
	}
	if req.SessionID == "" || req.SDP == "" {
		s.writeError(w, fmt.Errorf("%w: session_id and sdp are required", ErrBadRequest))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), joinTimeout)
	defer cancel()
	p, answer, err := s.join(ctx, acc, req.SessionID, req.SDP)
	if err != nil {
		s.writeError(w, err)
		return
	}
	var ice json.RawMessage
	if f := s.deps.ICEServers; f != nil {
		if ice = f(acc.Subject, acc.ExpiresAt, r.Host); !json.Valid(ice) {
			ice = nil // never break the answer
		}
	}
	httpjson.Write(w, http.StatusCreated, JoinResponse{VoicePeerID: p.id, SDP: answer, Slots: len(p.slots), ICEServers: ice})
}

func (s *SFU) handleLeave(w http.ResponseWriter, r *http.Request) {
	acc, err := s.authorize(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if id == "" {
		id = r.URL.Query().Get("voice_peer_id")
	}
	if id == "" && r.Body != nil && r.ContentLength != 0 {
		var req LeaveRequest
		if err := decodeBody(r, &req); err != nil {
			s.writeError(w, err)
			return
		}
		id = req.VoicePeerID
	}
	if id == "" {
		s.writeError(w, fmt.Errorf("%w: voice_peer_id required", ErrBadRequest))
		return
	}
	s.mu.Lock()
	p := s.peers[id]
	s.mu.Unlock()
	switch {
	case p == nil:
		s.writeError(w, ErrUnknownPeer)
		return
	case p.subject != acc.Subject:
		s.writeError(w, ErrForbidden)
		return
	}
	s.leave(p)
	w.WriteHeader(http.StatusNoContent)
}
