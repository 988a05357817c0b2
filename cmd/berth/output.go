package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"unicode/utf8"

	"github.com/spf13/pflag"
)

// format is how a command prints what it has to say: text for people,
// json (one document) or jsonl (one document a line, as things come) for
// programs. Field names are snake_case and stable; docs/cli.md lists them.
type format string

const (
	formatText  format = "text"
	formatJSON  format = "json"
	formatJSONL format = "jsonl"
)

// formatFlag is the -o flag; Set refuses anything but the formats the
// command takes, which the flag error function turns into a usage error.
type formatFlag struct {
	f       format
	allowed []format
}

func (f *formatFlag) String() string { return string(f.f) }
func (f *formatFlag) Type() string   { return "format" }

func (f *formatFlag) Set(s string) error {
	for _, a := range f.allowed {
		if format(s) == a {
			f.f = a
			return nil
		}
	}
	return fmt.Errorf("unknown output format %q (want %s)", s, f.names())
}

func (f *formatFlag) names() string {
	s := ""
	for i, a := range f.allowed {
		if i > 0 {
			s += ", "
		}
		s += string(a)
	}
	return s
}

// addFormat declares -o on a command that prints in the given formats
// besides text.
func addFormat(fs *pflag.FlagSet, also ...format) *format {
	f := &formatFlag{f: formatText, allowed: append([]format{formatText}, also...)}
	fs.VarP(f, "output", "o", "output format: "+f.names())
	return &f.f
}

// writeJSON prints v as one JSON document on a line of its own.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// idResult is what create, fork and snapshot print with -o json.
type idResult struct {
	ID string `json:"id"`
}

// printID prints an id as text or as {"id": ...}.
func printID(w io.Writer, f format, id string) error {
	if f == formatText {
		_, err := fmt.Fprintln(w, id)
		return err
	}
	return writeJSON(w, idResult{id})
}

// events writes a command's output as JSON lines, one event per write:
// {"stream": "stdout", "data": "..."}. It holds back the end of a write
// that stops inside a UTF-8 sequence until the next write completes it,
// so that data is text whenever the command's output is.
type events struct {
	mu      sync.Mutex
	w       io.Writer
	pending [2][]byte
	err     error
}

// event is one piece of a command's output.
type event struct {
	Stream string `json:"stream"`
	Data   string `json:"data"`
}

var streamNames = [2]string{"stdout", "stderr"}

// stream returns the writer of stream i (0 stdout, 1 stderr).
func (e *events) stream(i int) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.err != nil {
			return 0, e.err
		}
		b := append(e.pending[i], p...)
		cut := len(b)
		// Keep back an incomplete rune at the end (at most 3 bytes).
		for k := 1; k <= 3 && k <= len(b); k++ {
			if utf8.RuneStart(b[len(b)-k]) {
				if !utf8.FullRune(b[len(b)-k:]) {
					cut = len(b) - k
				}
				break
			}
		}
		e.pending[i] = append([]byte(nil), b[cut:]...)
		if cut > 0 {
			e.err = writeJSON(e.w, event{streamNames[i], string(b[:cut])})
		}
		return len(p), e.err
	})
}

// flush writes what was held back.
func (e *events) flush() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, b := range e.pending {
		if len(b) > 0 && e.err == nil {
			e.err = writeJSON(e.w, event{streamNames[i], string(b)})
		}
		e.pending[i] = nil
	}
	return e.err
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
