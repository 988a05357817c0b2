package termtext

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// attacks are what a model or a sandbox can send a terminal, each with
// what must be shown of it.
var attacks = []struct{ name, in, clean string }{
	{"plain", "hello, wörld\n\tindented", "hello, wörld\n\tindented"},
	{"colour", "\x1b[31mred\x1b[0m", "red"},
	{"erase line", "id > PWNED; echo x #\r\x1b[2Kls -la", "id > PWNED; echo x #\nls -la"},
	{"title", "a\x1b]0;owned\x07b", "ab"},
	{"title ST", "a\x1b]0;owned\x1b\\b", "ab"},
	{"hyperlink", "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\", "click"},
	{"clipboard", "x\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07y", "xy"},
	{"DCS", "a\x1bP1$qm\x1b\\b", "ab"},
	{"8-bit CSI", "a\xc2\x9b2Jb", "a2Jb"},
	{"CRLF", "one\r\ntwo\r\n", "one\ntwo\n"},
	{"progress", "10%\r50%\r100%\n", "10%\n50%\n100%\n"},
	{"trailing CR", "done\r", "done\n"},
	{"bell and backspace", "a\x07b\x08c", "abc"},
	{"bidi override", "ls \u202e; rm -rf ~ \u202c", "ls ; rm -rf ~ "},
	{"not UTF-8", "a\xffb", "a\uFFFDb"},
	{"broken character", "a\xe2\x82;b", "a\uFFFD;b"},
	{"cut character at the end", "a\xe2\x82", "a\uFFFD"},
	{"raw CSI byte", "a\x9b2Jb", "a\uFFFD2Jb"},
}

func TestClean(t *testing.T) {
	for _, a := range attacks {
		if got := Clean(a.in); got != a.clean {
			t.Errorf("%s: Clean(%q) = %q, want %q", a.name, a.in, got, a.clean)
		}
	}
}

// TestFilterPieces cuts every attack at every byte: a sequence cut in two
// is still dropped whole.
func TestFilterPieces(t *testing.T) {
	for _, a := range attacks {
		for cut := 0; cut <= len(a.in); cut++ {
			var f Filter
			out := f.Append(nil, []byte(a.in[:cut]))
			out = f.Append(out, []byte(a.in[cut:]))
			out = f.Flush(out)
			if string(out) != a.clean {
				t.Errorf("%s cut at %d: %q, want %q", a.name, cut, out, a.clean)
			}
		}
	}
}

func TestWriter(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	for _, piece := range []string{"a\x1b]52;c;", "c2VjcmV0", "\x07b\r"} {
		if n, err := w.Write([]byte(piece)); err != nil || n != len(piece) {
			t.Fatalf("Write(%q) = %d, %v", piece, n, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if b.String() != "ab\n" {
		t.Fatalf("wrote %q, want %q", b.String(), "ab\n")
	}
}

func TestVisible(t *testing.T) {
	for in, want := range map[string]string{
		"ls -la\n\tcd x":                      "ls -la\n\tcd x",
		"id > PWNED; echo x #\r\x1b[2Kls -la": "id > PWNED; echo x #␍␛[2Kls -la",
		"ls \u202e; rm -rf ~":                 "ls ⟨U+202E⟩; rm -rf ~",
		"a\xffb\x7f\u0085":                    "a⟨\\xff⟩b␡⟨U+0085⟩",
		"x\x00y":                              "x␀y",
	} {
		if got := Visible(in); got != want {
			t.Errorf("Visible(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzClean checks that nothing Clean or Visible gives can act on a
// terminal: no escape, no control character but newline and tab, valid
// UTF-8.
func FuzzClean(f *testing.F) {
	for _, a := range attacks {
		f.Add(a.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, out := range []string{Clean(s), Visible(s)} {
			if !utf8.ValidString(out) {
				t.Fatalf("%q gave invalid UTF-8 %q", s, out)
			}
			if i := strings.IndexFunc(out, hidden); i >= 0 {
				t.Fatalf("%q gave %q, with a control character at %d", s, out, i)
			}
			if strings.ContainsRune(out, '\r') {
				t.Fatalf("%q gave %q, with a carriage return", s, out)
			}
		}
	})
}

func TestCommand(t *testing.T) {
	hidden := "id > PWNED" + strings.Repeat("\n", 60) + "ls -la"
	if got, want := Command(hidden), "id > PWNED\n⟨59 blank lines⟩\nls -la"; got != want {
		t.Errorf("Command(60 newlines) = %q, want %q", got, want)
	}
	wide := "ls" + strings.Repeat(" ", 300) + "; rm -rf ~"
	if got, want := Command(wide), "ls ⟨300 blanks⟩ ; rm -rf ~"; got != want {
		t.Errorf("Command(300 spaces) = %q, want %q", got, want)
	}
	// What a person writes is shown as it is.
	for _, s := range []string{"make test", "cat <<EOF\n\n\tindented\n\nEOF", "a\n\n\nb"} {
		if got := Command(s); got != s {
			t.Errorf("Command(%q) = %q", s, got)
		}
	}
	if got, want := Command("echo x #\r\x1b[2Kls"), "echo x #␍␛[2Kls"; got != want {
		t.Errorf("Command = %q, want %q", got, want)
	}
}

func TestLine(t *testing.T) {
	tests := []struct {
		name, in string
		max      int
		want     string
	}{
		{"plain", "pytest -q", 200, "pytest -q"},
		{"newlines", "cd src\nmake", 200, "cd src⏎make"},
		{"escapes", "echo x\r\x1b]52;c;AAAA\x07", 200, "echo x␍␛]52;c;AAAA␇"},
		{"blank lines", "a" + strings.Repeat("\n", 10) + "b", 200, "a⏎⟨9 blank lines⟩⏎b"},
		{"cut", strings.Repeat("x", 300), 10, "xxxxxxx…"},
		{"cut on a character", "ééééé", 8, "éé…"},
		{"unbounded", strings.Repeat("x", 300), 0, strings.Repeat("x", 300)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Line(tt.in, tt.max)
			if got != tt.want {
				t.Errorf("Line(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
			if tt.max > 0 && len(got) > tt.max {
				t.Errorf("Line(%q, %d) is %d bytes", tt.in, tt.max, len(got))
			}
			if strings.ContainsAny(got, "\n\r\x1b") {
				t.Errorf("Line(%q) = %q: not one safe line", tt.in, got)
			}
		})
	}
}
