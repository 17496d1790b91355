package transport

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/pion/logging"
)

// pionLogs is the LoggerFactory of this package's WebRTC peers: one logger
// per pion scope ("ice", "dtls", "sctp", …), shared by every peer and
// written to the transport's slog logger. pion's default factory builds
// several loggers per component per peer (≈ 6 KiB a peer) and prints to
// stderr. pion's errors are logged as warnings (a peer going away makes
// some), its warnings as debug; below that nothing is logged.
type pionLogs struct {
	log *slog.Logger // immutable
	mu  sync.Mutex
	by  map[string]*pionLogger // guarded by mu
}

var _ logging.LoggerFactory = (*pionLogs)(nil)

func newPionLogs(log *slog.Logger) *pionLogs {
	return &pionLogs{log: log, by: make(map[string]*pionLogger)}
}

func (f *pionLogs) NewLogger(scope string) logging.LeveledLogger {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.by[scope]
	if !ok {
		l = &pionLogger{log: f.log.With("pion", scope)}
		f.by[scope] = l
	}
	return l
}

type pionLogger struct{ log *slog.Logger }

func (l *pionLogger) logf(level slog.Level, format string, args ...any) {
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, fmt.Sprintf(format, args...))
	}
}

func (l *pionLogger) Trace(string)          {}
func (l *pionLogger) Tracef(string, ...any) {}
func (l *pionLogger) Debug(string)          {}
func (l *pionLogger) Debugf(string, ...any) {}
func (l *pionLogger) Info(string)           {}
func (l *pionLogger) Infof(string, ...any)  {}
func (l *pionLogger) Warn(msg string)       { l.logf(slog.LevelDebug, "%s", msg) }
func (l *pionLogger) Warnf(f string, a ...any) {
	l.logf(slog.LevelDebug, f, a...)
}
func (l *pionLogger) Error(msg string) { l.logf(slog.LevelWarn, "%s", msg) }
func (l *pionLogger) Errorf(f string, a ...any) {
	l.logf(slog.LevelWarn, f, a...)
}
