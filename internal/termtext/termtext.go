// Package termtext makes text that came from a model or a sandbox safe
// to show on a terminal.
//
// Such text is untrusted: an escape sequence in it could move the
// cursor, rewrite what is on the screen, retitle the window, write to
// the clipboard (OSC 52) or show a link that goes elsewhere (OSC 8); a
// carriage return or a bidirectional override could hide part of a
// command from the person asked to approve it. Clean and Filter drop all
// of that from text meant to be read; Visible keeps every character of
// text meant to be checked, a command, and shows the dangerous ones.
package termtext

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/charmbracelet/x/ansi"
)

// Filter cleans a stream that arrives in pieces: an escape sequence or a
// character cut between two pieces is still recognised, which cleaning
// each piece alone would miss. Its zero value is ready to use.
//
// What passes: printable characters, newlines and tabs. A carriage
// return alone becomes a newline, so that a line written over (a
// progress bar) shows each time rather than hiding what it covered.
// Escape sequences are dropped whole; so are other control characters
// (C0, C1, DEL) and bidirectional embeddings, overrides and isolates.
// Bytes that are not UTF-8 become U+FFFD.
type Filter struct {
	p    *ansi.Parser
	out  []byte
	cr   bool   // a carriage return was the last thing seen
	tail []byte // the start of a character cut at the end of a piece
}

// Append appends the clean form of b to dst, and returns it. A trailing
// carriage return or a sequence still open is held for the next piece.
func (f *Filter) Append(dst, b []byte) []byte {
	if f.p == nil {
		f.p = ansi.NewParser()
		// The filter keeps nothing of a sequence: its data need not
		// be kept either (a zero size would mean unbounded).
		f.p.SetDataSize(1)
		f.p.SetHandler(ansi.Handler{Print: f.print, Execute: f.execute})
	}
	if len(f.tail) > 0 {
		b = append(f.tail, b...)
		f.tail = nil
	}
	// The parser decodes a character by its first byte's say-so: bytes
	// that are not UTF-8 are made so first, or a broken character
	// would swallow the bytes after it. A character the piece cuts is
	// kept for the next.
	cut := len(b)
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				cut = i
			}
			break
		}
	}
	f.tail = append(f.tail, b[cut:]...)
	f.out = dst
	for _, c := range bytes.ToValidUTF8(b[:cut], []byte("\uFFFD")) {
		f.p.Advance(c)
	}
	dst, f.out = f.out, nil
	return dst
}

// Flush appends to dst what a stream's end completes: a carriage return
// held.
func (f *Filter) Flush(dst []byte) []byte {
	if len(f.tail) > 0 {
		f.tail = nil
		dst = f.Append(dst, []byte("\uFFFD"))
	}
	if f.cr {
		f.cr = false
		dst = append(dst, '\n')
	}
	return dst
}

func (f *Filter) print(r rune) {
	f.newlineForCR()
	if r == utf8.RuneError || !utf8.ValidRune(r) {
		r = utf8.RuneError
	} else if hidden(r) {
		return
	}
	f.out = utf8.AppendRune(f.out, r)
}

func (f *Filter) execute(c byte) {
	switch c {
	case '\r':
		f.newlineForCR()
		f.cr = true
	case '\n':
		f.cr = false
		f.out = append(f.out, '\n')
	case '\t':
		f.newlineForCR()
		f.out = append(f.out, '\t')
	}
	// Any other control character is dropped.
}

// newlineForCR turns a carriage return not followed by a newline into
// one.
func (f *Filter) newlineForCR() {
	if f.cr {
		f.cr = false
		f.out = append(f.out, '\n')
	}
}

// hidden says whether r is a control character that printing as such
// could use to hide or reorder text: C0 and C1 controls, DEL, and the
// bidirectional embeddings, overrides and isolates.
func hidden(r rune) bool {
	switch {
	case r < 0x20 && r != '\n' && r != '\t', r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// Clean is s made safe to print, as a Filter makes it.
func Clean(s string) string {
	var f Filter
	return string(f.Flush(f.Append(nil, []byte(s))))
}

// Writer writes to an underlying writer through a Filter.
type Writer struct {
	w   io.Writer
	f   Filter
	buf []byte
}

// NewWriter returns a Writer that cleans what is written to it before
// writing it to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write cleans p and writes what it gives. It reports len(p) written
// when the underlying write succeeds, since what reaches w is not p.
func (w *Writer) Write(p []byte) (int, error) {
	w.buf = w.f.Append(w.buf[:0], p)
	if len(w.buf) > 0 {
		if _, err := w.w.Write(w.buf); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Close writes what the stream's end completes (a carriage return
// held). It does not close the underlying writer.
func (w *Writer) Close() error {
	if b := w.f.Flush(nil); len(b) > 0 {
		_, err := w.w.Write(b)
		return err
	}
	return nil
}

// Visible is s with every character kept, for a person to check it
// exactly (a command asking for approval): newlines and tabs as they
// are, the other control characters as their Unicode control pictures
// (ESC as ␛, a carriage return as ␍), C1 controls and bidirectional
// controls as ⟨U+XXXX⟩, and bytes that are not UTF-8 as ⟨\xNN⟩. Nothing
// in the result can act on a terminal.
func Visible(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, "⟨\\x%02x⟩", s[0])
		case r == '\n', r == '\t':
			b.WriteRune(r)
		case r < 0x20:
			b.WriteRune(0x2400 + r) // ␀ to ␟
		case r == 0x7f:
			b.WriteRune('␡')
		case hidden(r):
			fmt.Fprintf(&b, "⟨U+%04X⟩", r)
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// Blank space that could push part of a command out of sight is shown
// shortened, and marked: runs of more than maxBlankLines blank lines,
// and runs of more than maxBlanks spaces and tabs within a line.
const (
	maxBlankLines = 2
	maxBlanks     = 40
)

// Command is a command shown for a person to read and approve: Visible,
// with long runs of blank lines and of blanks within a line shortened
// to a marker that says how many there were, so that no part of the
// command hides below a screenful of nothing or past the edge of the
// window.
func Command(s string) string {
	lines := strings.Split(Visible(s), "\n")
	var out []string
	for i := 0; i < len(lines); {
		j := i
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if n := j - i; n > maxBlankLines {
			out = append(out, fmt.Sprintf("⟨%d blank lines⟩", n))
			i = j
			continue
		}
		if j == i {
			out = append(out, shortenBlanks(lines[i]))
			j++
		} else {
			out = append(out, lines[i:j]...)
		}
		i = j
	}
	return strings.Join(out, "\n")
}

// shortenBlanks replaces each run of more than maxBlanks spaces and tabs
// in line with a marker.
func shortenBlanks(line string) string {
	var b strings.Builder
	for len(line) > 0 {
		i := strings.IndexAny(line, " \t")
		if i < 0 {
			b.WriteString(line)
			break
		}
		b.WriteString(line[:i])
		line = line[i:]
		n := len(line) - len(strings.TrimLeft(line, " \t"))
		if n > maxBlanks {
			fmt.Fprintf(&b, " ⟨%d blanks⟩ ", n)
		} else {
			b.WriteString(line[:n])
		}
		line = line[n:]
	}
	return b.String()
}

// Line is s on one line, for a person to read where a line is all there
// is (a workflow's summary, a table's cell): Command's form, each
// newline shown as ⏎, and cut to at most max bytes on a character's
// boundary, the cut marked with …; max <= 0 means no bound.
func Line(s string, max int) string {
	line := strings.ReplaceAll(Command(s), "\n", "⏎")
	if max <= 0 || len(line) <= max {
		return line
	}
	const mark = "…"
	n := max - len(mark)
	for n > 0 && !utf8.RuneStart(line[n]) {
		n--
	}
	if n < 0 {
		n = 0
	}
	return line[:n] + mark
}
