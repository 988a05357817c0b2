package provider

import (
	"context"
	"log/slog"
)

type loggerKey struct{}

// WithLogger gives the providers opened with ctx (by Open) a logger for
// their own events.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// LoggerFrom is the logger WithLogger put in ctx, or one that discards
// everything.
func LoggerFrom(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}
