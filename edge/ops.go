package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/oshun/egbe-edge/auth"
	"github.com/oshun/egbe-edge/internal/httpjson"
	"github.com/oshun/egbe-edge/internal/opguard"
	"github.com/oshun/egbe-edge/state"
	"github.com/oshun/egbe-edge/web"
)

// opsSample is one series of a metric family in /ops/metrics.json.
type opsSample struct {
	Labels map[string]string `json:"labels"`
	Value  float64           `json:"value"`
}

// opsSnapshot is the body of /ops/metrics.json.
type opsSnapshot struct {
	TS       int64                  `json:"ts"` // Unix ms
	Families map[string][]opsSample `json:"families"`
	Fleet    *fleetSummary          `json:"fleet,omitempty"`
}

// fleetSummary is filled when the edge is a member of a Redis fleet.
type fleetSummary struct {
	Edges int `json:"edges"`
}

// fleetPublishEvery is how often an edge publishes its dashboard figures;
// a snapshot lapses after fleetSnapshotTTL without a refresh (a dead edge
// leaves the fleet view).
const (
	fleetPublishEvery = 2 * time.Second
	fleetSnapshotTTL  = 3 * fleetPublishEvery
)

// dashboardFamilies: only egbe_* families go to the fleet board (the Go
// runtime's figures are per process and meaningless summed).
func dashboardFamilies(all map[string][]opsSample) map[string][]opsSample {
	out := make(map[string][]opsSample, len(all))
	for name, samples := range all {
		if strings.HasPrefix(name, "egbe_") {
			out[name] = samples
		}
	}
	return out
}

// publishFleet puts this edge's figures on the fleet board until ctx ends.
func (e *Edge) publishFleet(ctx context.Context) error {
	t := time.NewTicker(fleetPublishEvery)
	defer t.Stop()
	for {
		if fams, err := gatherOps(e.reg); err == nil {
			if b, err := json.Marshal(dashboardFamilies(fams)); err == nil {
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				_ = e.board.Publish(pctx, e.edgeID, b, fleetSnapshotTTL) // a Redis outage only stales the fleet view
				cancel()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// fleetFamilies sums every live edge's published figures series by series.
func (e *Edge) fleetFamilies(ctx context.Context) (map[string][]opsSample, int, error) {
	snaps, err := e.board.Snapshots(ctx)
	if err != nil {
		return nil, 0, err
	}
	type key struct{ fam, labels string }
	sums := map[key]*opsSample{}
	order := map[string][]key{}
	for _, b := range snaps {
		var fams map[string][]opsSample
		if json.Unmarshal(b, &fams) != nil {
			continue
		}
		for fam, samples := range fams {
			for _, smp := range samples {
				lb, _ := json.Marshal(smp.Labels)
				k := key{fam, string(lb)}
				if acc, ok := sums[k]; ok {
					acc.Value += smp.Value
					continue
				}
				c := smp
				sums[k] = &c
				order[fam] = append(order[fam], k)
			}
		}
	}
	out := make(map[string][]opsSample, len(order))
	for fam, keys := range order {
		for _, k := range keys {
			out[fam] = append(out[fam], *sums[k])
		}
	}
	return out, len(snaps), nil
}

// gatherOps turns a registry into the dashboard's JSON: counters and
// gauges as values, histograms and summaries as their sample counts.
func gatherOps(g prometheus.Gatherer) (map[string][]opsSample, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]opsSample, len(mfs))
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			var v float64
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				v = float64(m.GetHistogram().GetSampleCount())
			case dto.MetricType_SUMMARY:
				v = float64(m.GetSummary().GetSampleCount())
			default:
				v = m.GetUntyped().GetValue()
			}
			out[mf.GetName()] = append(out[mf.GetName()], opsSample{Labels: labels, Value: v})
		}
	}
	return out, nil
}

// mountOps mounts the operator page on the admin mux.
func (e *Edge) mountOps(m *http.ServeMux) {
	m.Handle("/ops/", http.StripPrefix("/ops/", http.FileServerFS(web.Ops())))
	m.HandleFunc("/ops", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ops/", http.StatusFound) })
	m.HandleFunc("POST /ops/sessions/{session_id}/revoke", opguard.RequireOperator(e.signer, e.revokeSession))
	m.HandleFunc("GET /ops/sessions", opguard.RequireOperator(e.signer, e.liveSessions))
	m.HandleFunc("/ops/sessions/{session_id}/revoke", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use POST")
	})
	// /ops/metrics.json: this edge's figures, or with ?scope=fleet (the
	// page's default when the edge has Redis) the whole fleet's, summed.
	m.HandleFunc("/ops/metrics.json", func(w http.ResponseWriter, r *http.Request) {
		if e.board != nil && r.URL.Query().Get("scope") != "edge" {
			fams, edges, err := e.fleetFamilies(r.Context())
			if err != nil {
				writeError(w, http.StatusServiceUnavailable, "state_unavailable", "fleet figures: %v", err)
				return
			}
			httpjson.Write(w, http.StatusOK, opsSnapshot{TS: time.Now().UnixMilli(), Families: fams, Fleet: &fleetSummary{Edges: edges}})
			return
		}
		fams, err := gatherOps(e.reg)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal", "%v", err)
			return
		}
		httpjson.Write(w, http.StatusOK, opsSnapshot{TS: time.Now().UnixMilli(), Families: fams})
	})
}

// opsSession is one live session in GET /ops/sessions.
type opsSession struct {
	SessionID string `json:"session_id"`
	Subject   string `json:"subject"`
	Tenant    string `json:"tenant,omitempty"`
	Instance  string `json:"instance"`
	Shard     string `json:"shard"`
	Transport string `json:"transport"`
}

// opsSessionsResponse answers GET /ops/sessions.
type opsSessionsResponse struct {
	Total    int          `json:"total"` // live on this edge; the list stops at maxOpsSessions
	Sessions []opsSession `json:"sessions"`
}

// maxOpsSessions bounds the operator page's session table.
const maxOpsSessions = 500

// liveSessions serves GET /ops/sessions (operator): this edge's live
// sessions, for the operator page's table and its revoke buttons.
func (e *Edge) liveSessions(w http.ResponseWriter, _ *http.Request, _ auth.Access) {
	list, total := e.rt.gw.LiveSessions(maxOpsSessions)
	out := opsSessionsResponse{Total: total, Sessions: make([]opsSession, len(list))}
	for i, s := range list {
		out.Sessions[i] = opsSession{SessionID: s.ID, Subject: s.Subject, Tenant: s.Access.Tenant, Instance: s.InstanceID,
			Shard: s.ShardID, Transport: s.Transport}
	}
	httpjson.Write(w, http.StatusOK, out)
}

// revokeRequest is the optional body of POST /ops/sessions/{id}/revoke.
type revokeRequest struct {
	Reason string `json:"reason"` // for the audit line
}

// revokeResponse answers POST /ops/sessions/{id}/revoke.
type revokeResponse struct {
	SessionID    string    `json:"session_id"`
	RevokedUntil time.Time `json:"revoked_until"`
	ClosedHere   bool      `json:"closed_here"` // the session was live on this edge and is ended
}

// Bounds of a revoke request.
const (
	maxRevokeBody   = 4 << 10
	maxRevokeReason = 512
	maxSessionID    = 128
)

// revokeSession serves POST /ops/sessions/{session_id}/revoke: the
// session's resume tokens are refused fleet-wide for their longest
// lifetime (shard.Gateway.Revoke), and the session ends at once if it is
// live anywhere (here at once; elsewhere on the Redis notice, or at that
// edge's next pin refresh). Audited.
func (e *Edge) revokeSession(w http.ResponseWriter, r *http.Request, op auth.Access) {
	id := r.PathValue("session_id")
	if !validSessionID(id) {
		writeError(w, http.StatusBadRequest, "bad_request", "session id must be 1-%d of [A-Za-z0-9_.:-]", maxSessionID)
		return
	}
	var req revokeRequest
	if err := decodeRevoke(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "%v", err)
		return
	}
	log := e.logFor("ops")
	until, here, err := e.rt.gw.Revoke(r.Context(), id)
	if err != nil {
		log.Warn("audit: session revoke failed", "session", id, "operator", op.Subject, "reason", req.Reason, "remote", r.RemoteAddr, "err", err)
		switch {
		case errors.Is(err, state.ErrUnavailable):
			writeError(w, http.StatusServiceUnavailable, "state_unavailable", "revocations unavailable; nothing was revoked")
		case errors.Is(err, state.ErrBadArgument):
			writeError(w, http.StatusBadRequest, "bad_request", "%v", err)
		default:
			writeError(w, http.StatusInternalServerError, "internal", "revoke failed")
		}
		return
	}
	log.Info("audit: session revoked", "session", id, "operator", op.Subject, "reason", req.Reason, "revoked_until", until,
		"closed_here", here, "remote", r.RemoteAddr)
	httpjson.Write(w, http.StatusOK, revokeResponse{SessionID: id, RevokedUntil: until.UTC(), ClosedHere: here})
}

// decodeRevoke strictly decodes the optional, bounded body of a revoke: no
// body at all is a revoke without a reason.
func decodeRevoke(r *http.Request, v *revokeRequest) error {
	switch err := decodeJSONWithin(r, v, maxRevokeBody); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return fmt.Errorf("body (at most %d bytes of JSON): %w", maxRevokeBody, err)
	}
	if len(v.Reason) > maxRevokeReason {
		return fmt.Errorf("reason over %d bytes", maxRevokeReason)
	}
	return nil
}

// validSessionID accepts what could be a session id ("s_" + hex today),
// keeping anything else out of the store and the audit line.
func validSessionID(id string) bool {
	if id == "" || len(id) > maxSessionID {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', strings.IndexByte("_.:-", c) >= 0:
		default:
			return false
		}
	}
	return true
}
