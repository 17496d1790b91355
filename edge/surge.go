package edge

import (
	"context"
	"net/http"
	"time"
)

// metered measures one admission route for the surge controller and
// /metrics: its latency and the class of every answer.
func (e *Edge) metered(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now() // latency is wall time, whatever the edge's clock says
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		e.adm.meter.HTTP(route, sw.status, time.Since(start))
	})
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// fleetSessions is the fleet's concurrent sessions for the waiting room's
// entry criterion: realtime sessions (every edge's egbe_shard_sessions, from
// the fleet board with Redis, this edge's without) plus Pixel Streaming
// sessions (the registry, which is the fleet's with Redis).
func (e *Edge) fleetSessions(ctx context.Context) (int, error) {
	n := 0
	if e.px != nil {
		n += e.px.mm.Dashboard().Totals.Sessions
	}
	rt, err := e.ops.Total(ctx, "egbe_shard_sessions")
	return n + int(rt), err
}
