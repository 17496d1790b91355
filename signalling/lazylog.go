package signalling

import (
	"context"
	"log/slog"
	"sync"
)

// lazyLogger is base.With(args...), except that the handler formats the
// attributes only when the first record is logged. Most sockets never log,
// and slog's text and JSON handlers otherwise format every connection's
// attributes up front (about 2 % of the broker's CPU per handshake).
// The output is identical: the same attributes reach the same
// WithAttrs, just later.
func lazyLogger(base *slog.Logger, args ...any) *slog.Logger {
	// slog.Logger.With turns args into attrs the same way (argsToAttr).
	r := slog.Record{}
	r.Add(args...)
	attrs := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, a)
		return true
	})
	return slog.New(&lazyHandler{base: base.Handler(), attrs: attrs})
}

// lazyHandler defers base.WithAttrs(attrs) to the first Handle.
type lazyHandler struct {
	base  slog.Handler // immutable
	attrs []slog.Attr  // immutable

	once sync.Once
	h    slog.Handler // set by once
}

var _ slog.Handler = (*lazyHandler)(nil)

func (l *lazyHandler) handler() slog.Handler {
	l.once.Do(func() { l.h = l.base.WithAttrs(l.attrs) })
	return l.h
}

func (l *lazyHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return l.base.Enabled(ctx, level)
}

func (l *lazyHandler) Handle(ctx context.Context, r slog.Record) error {
	return l.handler().Handle(ctx, r)
}

func (l *lazyHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return l
	}
	all := make([]slog.Attr, 0, len(l.attrs)+len(attrs))
	all = append(append(all, l.attrs...), attrs...)
	return &lazyHandler{base: l.base, attrs: all}
}

func (l *lazyHandler) WithGroup(name string) slog.Handler {
	return l.handler().WithGroup(name)
}
