package devserver

import (
	"context"
	"fmt"
	"log/slog"

	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/log/tag"
)

// serverLogger adapts the Temporal server's log.Logger to slog.
//
// The server logs a great deal at Info (every shard, queue and service
// transition), which drowns what a berth user cares about, so anything below
// minLevel is dropped before any work is done. Tags are kept unconverted
// until a record is actually written: With is called on hot paths, logging
// at Warn and above is rare.
type serverLogger struct {
	slog     *slog.Logger
	minLevel *slog.LevelVar // shared by every logger derived through With
	tags     []tag.Tag
}

var (
	_ log.Logger     = (*serverLogger)(nil)
	_ log.WithLogger = (*serverLogger)(nil)
)

func newServerLogger(l *slog.Logger) *serverLogger {
	minLevel := new(slog.LevelVar)
	minLevel.Set(slog.LevelWarn)
	return &serverLogger{slog: l.With("component", "temporal"), minLevel: minLevel}
}

// quiet drops everything below Error from now on. While the server shuts
// down its internal workers log every poll the closing frontend cuts off:
// expected, and only noise to a user who just pressed Ctrl-C.
func (l *serverLogger) quiet() { l.minLevel.Set(slog.LevelError) }

// fatalError is what Fatal panics with. Start recovers it and returns it as an
// ordinary error: the zap logger the server normally uses would call
// os.Exit, which is not acceptable inside a library. It wraps the error
// found in the tags, if any, so that errors.Is sees through it.
type fatalError struct {
	msg string
	err error
}

func (e fatalError) Error() string { return "temporal server: " + e.msg }
func (e fatalError) Unwrap() error { return e.err }

func (l *serverLogger) Debug(msg string, tags ...tag.Tag) { l.log(slog.LevelDebug, msg, tags) }
func (l *serverLogger) Info(msg string, tags ...tag.Tag)  { l.log(slog.LevelInfo, msg, tags) }
func (l *serverLogger) Warn(msg string, tags ...tag.Tag)  { l.log(slog.LevelWarn, msg, tags) }
func (l *serverLogger) Error(msg string, tags ...tag.Tag) { l.log(slog.LevelError, msg, tags) }

// DPanic panics only in the server's development mode; here it is an error.
func (l *serverLogger) DPanic(msg string, tags ...tag.Tag) { l.log(slog.LevelError, msg, tags) }

func (l *serverLogger) Panic(msg string, tags ...tag.Tag) {
	l.log(slog.LevelError, msg, tags)
	panic(msg)
}

func (l *serverLogger) Fatal(msg string, tags ...tag.Tag) {
	l.log(slog.LevelError, msg, tags)
	panic(fatalError{msg: describe(msg, l.tags, tags), err: tagError(tags)})
}

func (l *serverLogger) With(tags ...tag.Tag) log.Logger {
	if len(tags) == 0 {
		return l
	}
	// Full slice expression: appending must never write into a parent's array.
	return &serverLogger{slog: l.slog, minLevel: l.minLevel, tags: append(l.tags[:len(l.tags):len(l.tags)], tags...)}
}

func (l *serverLogger) log(level slog.Level, msg string, tags []tag.Tag) {
	if level < l.minLevel.Level() {
		return
	}
	ctx := context.Background()
	if !l.slog.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, len(l.tags)+len(tags))
	for _, t := range l.tags {
		attrs = append(attrs, slog.Any(t.Key(), t.Value()))
	}
	for _, t := range tags {
		attrs = append(attrs, slog.Any(t.Key(), t.Value()))
	}
	l.slog.LogAttrs(ctx, level, msg, attrs...)
}

// describe renders a message and its tags on one line, for errors.
func describe(msg string, tagLists ...[]tag.Tag) string {
	for _, tags := range tagLists {
		for _, t := range tags {
			msg += fmt.Sprintf(" %s=%v", t.Key(), t.Value())
		}
	}
	return msg
}

// tagError returns the error carried by a tag.Error tag, if there is one.
func tagError(tags []tag.Tag) error {
	for _, t := range tags {
		if zt, ok := t.(tag.ZapTag); ok {
			if err, ok := zt.Field().Interface.(error); ok {
				return err
			}
		}
	}
	return nil
}
