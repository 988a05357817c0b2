package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/berth-dev/berth/provider"
)

// filePatch is one file's part of a unified diff.
type filePatch struct {
	old, new string // paths; empty for /dev/null
	mode     fs.FileMode
	hunks    []hunk
	created  bool // "new file mode": there is no old file
	deleted  bool // "deleted file mode"
}

// hunk is one @@ section.
type hunk struct {
	header             string
	oldStart, oldCount int // oldStart is 1-based
	newStart, newCount int
	lines              []string // with their ' ', '-' or '+'
	oldNoEOL           bool     // "\ No newline at end of file" on the old side
	newNoEOL           bool
}

// parsePatch reads a unified diff, as git diff or diff -u write it.
func parsePatch(text string) ([]*filePatch, error) {
	lines := strings.Split(text, "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var (
		files []*filePatch
		cur   *filePatch
		git   bool // cur began with "diff --git": its paths have a/ and b/
	)
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSuffix(lines[i], "\r")
		switch {
		case strings.HasPrefix(l, "diff --git "):
			a, b, ok := gitPaths(strings.TrimPrefix(l, "diff --git "))
			if !ok {
				return nil, fmt.Errorf("line %d: cannot read the paths of %q", i+1, l)
			}
			cur, git = &filePatch{old: a, new: b}, true
			files = append(files, cur)
		case cur != nil && len(cur.hunks) == 0 && strings.HasPrefix(l, "new file mode "):
			cur.created, cur.old = true, ""
			cur.mode = gitMode(strings.TrimPrefix(l, "new file mode "))
		case cur != nil && len(cur.hunks) == 0 && strings.HasPrefix(l, "deleted file mode "):
			cur.deleted, cur.new = true, ""
		case cur != nil && len(cur.hunks) == 0 && strings.HasPrefix(l, "new mode "):
			cur.mode = gitMode(strings.TrimPrefix(l, "new mode "))
		case cur != nil && len(cur.hunks) == 0 && strings.HasPrefix(l, "rename from "):
			cur.old = unquote(strings.TrimPrefix(l, "rename from "))
		case cur != nil && len(cur.hunks) == 0 && strings.HasPrefix(l, "rename to "):
			cur.new = unquote(strings.TrimPrefix(l, "rename to "))
		case strings.HasPrefix(l, "Binary files ") || l == "GIT binary patch":
			return nil, fmt.Errorf("line %d: binary patches are not supported; write the file with write_file", i+1)
		case strings.HasPrefix(l, "copy from ") || strings.HasPrefix(l, "copy to "):
			return nil, fmt.Errorf("line %d: copies are not supported; write the copy with write_file", i+1)
		case strings.HasPrefix(l, "--- ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "+++ "):
			old := headerPath(strings.TrimPrefix(l, "--- "))
			new := headerPath(strings.TrimPrefix(strings.TrimSuffix(lines[i+1], "\r"), "+++ "))
			i++
			if cur == nil || !git || len(cur.hunks) > 0 {
				cur, git = &filePatch{}, false
				files = append(files, cur)
				old, new = stripPrefixes(old, new)
			} else {
				old, new = strings.TrimPrefix(old, "a/"), strings.TrimPrefix(new, "b/")
			}
			// diff -N marks a file that is not there by /dev/null, or
			// (diff -ruN) by the epoch as its date.
			if old == "/dev/null" || strings.Contains(l, "\t1970-01-01 ") {
				cur.created = true
				if old == "/dev/null" {
					old = new
				}
			}
			if new == "/dev/null" || strings.Contains(lines[i], "\t1970-01-01 ") {
				cur.deleted = true
				if new == "/dev/null" {
					new = old
				}
			}
			if cur.created {
				old = ""
			}
			if cur.deleted {
				new = ""
			}
			cur.old, cur.new = old, new
		case strings.HasPrefix(l, "@@ "):
			if cur == nil {
				return nil, fmt.Errorf("line %d: a hunk before any file header (--- and +++ lines)", i+1)
			}
			h, next, err := parseHunk(lines, i)
			if err != nil {
				return nil, err
			}
			cur.hunks = append(cur.hunks, h)
			i = next - 1
		}
		// Anything else (index lines, similarity, a diff command line,
		// commit messages around a git format-patch) says nothing to do.
	}
	if len(files) == 0 {
		return nil, errors.New("no file in the patch: it needs --- and +++ lines, or diff --git headers, and @@ hunks")
	}
	for _, f := range files {
		if f.old == "" && f.new == "" {
			return nil, errors.New("a file of the patch has no path")
		}
		for _, p := range []string{f.old, f.new} {
			if p != "" && !validPath(p) {
				return nil, fmt.Errorf("bad path %q in the patch", p)
			}
		}
	}
	return files, nil
}

// parseHunk reads the hunk whose header is lines[i], returning the
// index of the line after it.
func parseHunk(lines []string, i int) (hunk, int, error) {
	header := strings.TrimSuffix(lines[i], "\r")
	h := hunk{header: header}
	var ok bool
	rest, _, found := strings.Cut(strings.TrimPrefix(header, "@@ "), " @@")
	if found {
		o, n, cut := strings.Cut(rest, " ")
		if cut && strings.HasPrefix(o, "-") && strings.HasPrefix(n, "+") {
			h.oldStart, h.oldCount, ok = rangeOf(o[1:])
			if ok {
				h.newStart, h.newCount, ok = rangeOf(n[1:])
			}
		}
	}
	if !ok {
		return h, 0, fmt.Errorf("line %d: bad hunk header %q (want @@ -start,count +start,count @@)", i+1, header)
	}
	olds, news := 0, 0
	i++
	for ; i < len(lines) && (olds < h.oldCount || news < h.newCount); i++ {
		l := strings.TrimSuffix(lines[i], "\r")
		if l == "" {
			l = " " // a context line whose space an editor stripped
		}
		switch l[0] {
		case ' ':
			olds++
			news++
		case '-':
			olds++
		case '+':
			news++
		case '\\':
			h.markNoEOL()
			continue
		default:
			return h, 0, fmt.Errorf("line %d: %q in hunk %q: a hunk's lines begin with a space, - or +; are its counts right?", i+1, shorten(l), header)
		}
		h.lines = append(h.lines, l)
	}
	if olds != h.oldCount || news != h.newCount {
		return h, 0, fmt.Errorf("hunk %q is cut short: it has %d old and %d new lines, its header says %d and %d",
			header, olds, news, h.oldCount, h.newCount)
	}
	if i < len(lines) && strings.HasPrefix(lines[i], "\\") {
		h.markNoEOL()
		i++
	}
	return h, i, nil
}

// markNoEOL notes "\ No newline at end of file" after the hunk's last line.
func (h *hunk) markNoEOL() {
	if len(h.lines) == 0 {
		return
	}
	switch h.lines[len(h.lines)-1][0] {
	case ' ':
		h.oldNoEOL, h.newNoEOL = true, true
	case '-':
		h.oldNoEOL = true
	case '+':
		h.newNoEOL = true
	}
}

// rangeOf reads "start,count" or "start" (a count of one).
func rangeOf(s string) (start, count int, ok bool) {
	a, b, has := strings.Cut(s, ",")
	start, err := strconv.Atoi(a)
	if err != nil || start < 0 {
		return 0, 0, false
	}
	count = 1
	if has {
		if count, err = strconv.Atoi(b); err != nil || count < 0 {
			return 0, 0, false
		}
	}
	return start, count, count < 1<<24
}

// gitPaths splits "a/x b/y" of a diff --git line.
func gitPaths(s string) (string, string, bool) {
	if strings.HasPrefix(s, `"`) {
		a, rest, ok := cutQuoted(s)
		if !ok {
			return "", "", false
		}
		b := unquote(strings.TrimPrefix(rest, " "))
		return strings.TrimPrefix(a, "a/"), strings.TrimPrefix(b, "b/"), true
	}
	// Without quotes the paths have no special characters; when they
	// have spaces, "a/x y b/x y" splits where both halves are the same.
	if i := strings.Index(s, " b/"); i >= 0 && strings.HasPrefix(s, "a/") {
		if j := len(s)/2 - 1; j > 0 && s[j] == ' ' && s[2:j] == s[j+3:] {
			i = j
		}
		return s[2:i], s[i+3:], true
	}
	return "", "", false
}

// headerPath is the path of a ---/+++ line: without diff -u's date after
// a tab, unquoted.
func headerPath(s string) string {
	s, _, _ = strings.Cut(s, "\t")
	return unquote(strings.TrimSpace(s))
}

// stripPrefixes drops the first component of both paths of a ---/+++
// pair when they are a/ and b/ (git) or two directories compared
// (diff -ru old new); paths of files compared in place stay.
func stripPrefixes(old, new string) (string, string) {
	first := func(p string) (string, string, bool) {
		if p == "/dev/null" {
			return "", p, false
		}
		return strings.Cut(p, "/")
	}
	oa, orest, ook := first(old)
	na, nrest, nok := first(new)
	switch {
	case ook && nok && oa != na:
		return orest, nrest
	case ook && !nok && new == "/dev/null" && oa == "a":
		return orest, new
	case nok && !ook && old == "/dev/null" && na == "b":
		return old, nrest
	}
	return old, new
}

func cutQuoted(s string) (string, string, bool) {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			u, err := strconv.Unquote(s[:i+1])
			return u, s[i+1:], err == nil
		}
	}
	return "", "", false
}

func unquote(s string) string {
	if strings.HasPrefix(s, `"`) {
		if u, _, ok := cutQuoted(s); ok {
			return u
		}
	}
	return s
}

func gitMode(s string) fs.FileMode {
	m, err := strconv.ParseUint(strings.TrimSpace(s), 8, 32)
	if err != nil {
		return 0
	}
	return fs.FileMode(m).Perm()
}

// validPath accepts relative paths that stay in the workspace.
func validPath(p string) bool {
	if p == "" || strings.ContainsRune(p, 0) || path.IsAbs(p) {
		return false
	}
	c := path.Clean(p)
	return c != "." && c != ".." && !strings.HasPrefix(c, "../")
}

// change is what applying a patch does to the workspace.
type change struct {
	write   []provider.File
	remove  []string
	summary []string // "M path", "A path", "D path", "R old -> new"
}

// planPatch applies a patch in memory, reading the files it changes:
// either every hunk applies and the change says what to write and
// remove, or nothing is to be done and the error says why.
func planPatch(ws Workspace, text string) (change, error) {
	files, err := parsePatch(text)
	if err != nil {
		return change{}, err
	}
	var c change
	touched := map[string]bool{}
	for _, f := range files {
		for _, p := range []string{f.old, f.new} {
			if p != "" && touched[p] {
				return change{}, fmt.Errorf("%s appears twice in the patch", p)
			}
		}
		touched[f.old], touched[f.new] = true, true
		var (
			lines []string
			eol   = true
			mode  = f.mode
		)
		target := f.new
		if target == "" {
			target = f.old
		}
		create := f.created
		if create {
			if exists(ws, target) {
				return change{}, fmt.Errorf("%s: the patch creates it, but it exists already", target)
			}
		} else {
			data, err := ws.ReadFile(f.old)
			if err != nil {
				return change{}, fmt.Errorf("%s: %w", f.old, err)
			}
			lines, eol = splitLines(string(data))
			if mode == 0 {
				mode = modeOf(ws, f.old)
			}
		}
		for i, h := range f.hunks {
			if lines, eol, err = applyHunk(lines, eol, h, i); err != nil {
				return change{}, fmt.Errorf("%s: %w", target, err)
			}
		}
		switch {
		case f.deleted:
			if len(lines) > 0 {
				return change{}, fmt.Errorf("%s: the patch deletes it, but it has lines the patch does not remove", f.old)
			}
			c.remove = append(c.remove, f.old)
			c.summary = append(c.summary, "D "+f.old)
		default:
			c.write = append(c.write, provider.File{Path: f.new, Data: []byte(joinLines(lines, eol)), Mode: mode})
			switch {
			case create:
				c.summary = append(c.summary, "A "+f.new)
			case f.old != f.new:
				c.remove = append(c.remove, f.old)
				c.summary = append(c.summary, "R "+f.old+" -> "+f.new)
			default:
				c.summary = append(c.summary, "M "+f.new)
			}
		}
	}
	return c, nil
}

// applyHunk applies hunk h (the n-th of its file) to lines: where its
// header says, else at the nearest place its old lines are found, as
// patch does with an offset, and no fuzz.
func applyHunk(lines []string, eol bool, h hunk, n int) ([]string, bool, error) {
	var old, new []string
	for _, l := range h.lines {
		switch l[0] {
		case ' ':
			old, new = append(old, l[1:]), append(new, l[1:])
		case '-':
			old = append(old, l[1:])
		case '+':
			new = append(new, l[1:])
		}
	}
	want := h.oldStart - 1
	if h.oldCount == 0 {
		want = h.oldStart // a pure insertion comes after its line
	}
	// Old lines said to end the file without a newline must be there.
	fits := func(p int) bool {
		return p >= 0 && matches(lines, p, old) && (!h.oldNoEOL || (p+len(old) == len(lines) && !eol))
	}
	at := -1
	for d := 0; d <= len(lines); d++ {
		if p := want - d; fits(p) {
			at = p
			break
		}
		if p := want + d; d > 0 && fits(p) {
			at = p
			break
		}
	}
	if at < 0 {
		first := ""
		if len(old) > 0 {
			first = fmt.Sprintf(" (its first line: %q)", shorten(old[0]))
		}
		return nil, false, fmt.Errorf("hunk %d (%s) does not apply: its %d context and removed lines are not in the file%s; read_file the file and make the patch again",
			n+1, h.header, len(old), first)
	}
	out := make([]string, 0, len(lines)-len(old)+len(new))
	out = append(append(append(out, lines[:at]...), new...), lines[at+len(old):]...)
	if at+len(old) == len(lines) {
		// The hunk reaches the end of the file: it says how it ends.
		eol = !h.newNoEOL
	}
	return out, eol, nil
}

func matches(lines []string, at int, want []string) bool {
	if at+len(want) > len(lines) {
		return false
	}
	for i, w := range want {
		if lines[at+i] != w {
			return false
		}
	}
	return true
}

// splitLines splits text into lines and whether it ends with a newline.
func splitLines(s string) ([]string, bool) {
	if s == "" {
		return nil, true
	}
	eol := strings.HasSuffix(s, "\n")
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n"), eol
}

func joinLines(lines []string, eol bool) string {
	if len(lines) == 0 {
		return ""
	}
	s := strings.Join(lines, "\n")
	if eol {
		s += "\n"
	}
	return s
}

// exists says whether path is there.
func exists(ws Workspace, p string) bool {
	_, ok := stat(ws, p)
	return ok
}

// stat finds a file's entry in its directory.
func stat(ws Workspace, p string) (provider.FileInfo, bool) {
	dir, name := path.Split(path.Clean(p))
	if dir == "" {
		dir = "."
	}
	infos, err := ws.ListFiles(dir)
	if err != nil {
		return provider.FileInfo{}, false
	}
	for _, fi := range infos {
		if fi.Name == name {
			return fi, true
		}
	}
	return provider.FileInfo{}, false
}

// modeOf is a file's permissions, kept when it is rewritten; zero (the
// default) when it cannot be known.
func modeOf(ws Workspace, p string) fs.FileMode {
	fi, ok := stat(ws, p)
	if !ok {
		return 0
	}
	return fi.Mode.Perm()
}

// shorten keeps quoted lines short in messages.
func shorten(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}
