package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/termtext"
)

// commandResult is what became of a command (berth run, berth sandbox
// exec, berth logs), as -o json prints it, and as the last event of -o
// jsonl, without the output.
type commandResult struct {
	// ID is the run's id, or the sandbox's for exec.
	ID       string `json:"id"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	// Kind and Message say why the command did not run to its own end:
	// Timeout, OutOfMemory, CommandNotFound...
	Kind    string `json:"kind,omitempty"`
	Message string `json:"message,omitempty"`
	// Stdout and Stderr are the output as text (-o json only); bytes
	// that are not UTF-8 are replaced by U+FFFD.
	Stdout *string `json:"stdout,omitempty"`
	Stderr *string `json:"stderr,omitempty"`
	// StdoutBytes and StderrBytes are the size of the whole streams;
	// the dropped counts what of them was not kept (past --max-output),
	// between their start and end.
	StdoutBytes   int64 `json:"stdout_bytes"`
	StderrBytes   int64 `json:"stderr_bytes"`
	StdoutDropped int64 `json:"stdout_dropped"`
	StderrDropped int64 `json:"stderr_dropped"`
	// Truncated says the output printed is not the whole of it; Error
	// then says why, and berth exits 125.
	Truncated bool    `json:"truncated"`
	Error     string  `json:"error,omitempty"`
	Duration  float64 `json:"duration_seconds"`
	// Sandbox is the id of the sandbox at its provider.
	Sandbox string `json:"sandbox"`
}

// sink is where a command's output goes, as -o says: to berth's own
// stdout and stderr (text), into memory to print in one document (json),
// or as events, one a line, as it comes (jsonl).
type sink struct {
	f      format
	out    io.Writer
	bufs   [2]bytes.Buffer
	events *events
	// clean, in text, are the writers cleaning the output (--sanitize).
	clean []*termtext.Writer
}

// resultFlags are -o and --sanitize, on run, exec and logs.
type resultFlags struct {
	format   *format
	sanitize bool
}

func addResultFlags(fs *pflag.FlagSet) *resultFlags {
	r := &resultFlags{format: addFormat(fs, formatJSON, formatJSONL)}
	fs.BoolVar(&r.sanitize, "sanitize", false, "in text, drop escape sequences and control characters but newline and tab from the output, so that it cannot act on the terminal (by default it is printed as it is, as docker exec does)")
	return r
}

func (r *resultFlags) sink() *sink {
	s := &sink{f: *r.format, out: os.Stdout}
	switch {
	case s.f == formatJSONL:
		s.events = &events{w: s.out}
	case s.f == formatText && r.sanitize:
		s.clean = []*termtext.Writer{termtext.NewWriter(os.Stdout), termtext.NewWriter(os.Stderr)}
	}
	return s
}

// writers are where the command's stdout and stderr are written.
func (s *sink) writers() (stdout, stderr io.Writer) {
	switch {
	case s.f == formatJSON:
		return &s.bufs[0], &s.bufs[1]
	case s.f == formatJSONL:
		return s.events.stream(0), s.events.stream(1)
	case s.clean != nil:
		return s.clean[0], s.clean[1]
	}
	return os.Stdout, os.Stderr
}

// result ends the command: it prints the result in the sink's format
// and says how berth exits, as runResult does for text; what names the
// command in error messages.
func (s *sink) result(what, id string, out *berth.Result, err error) error {
	if out == nil {
		out = &berth.Result{}
	}
	for _, w := range s.clean {
		_ = w.Close() // a carriage return held at the end; nothing to do if the terminal is gone
	}
	if s.f == formatText || err != nil && !errors.Is(err, berth.ErrIncomplete) {
		return runResult(what, out, err)
	}
	r := commandResult{
		ID: id, ExitCode: out.ExitCode, Signal: out.Signal, Kind: string(out.Kind), Message: out.Message,
		StdoutBytes: out.StdoutSize, StderrBytes: out.StderrSize,
		StdoutDropped: out.StdoutDropped, StderrDropped: out.StderrDropped,
		Truncated: err != nil, Duration: out.Duration.Seconds(), Sandbox: out.Instance,
	}
	if err != nil {
		r.Error = err.Error()
	}
	switch s.f {
	case formatJSON:
		o, e := strings.ToValidUTF8(s.bufs[0].String(), "\uFFFD"), strings.ToValidUTF8(s.bufs[1].String(), "\uFFFD")
		r.Stdout, r.Stderr = &o, &e
	case formatJSONL:
		if ferr := s.events.flush(); ferr != nil {
			return fmt.Errorf("%s: write the output: %w", what, ferr)
		}
	}
	if werr := writeJSON(s.out, r); werr != nil {
		return fmt.Errorf("%s: write the result: %w", what, werr)
	}
	return runResult(what, out, err)
}
