package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/provider"
)

// MaxOutput is the most a tool's output handed to the model may hold.
const MaxOutput = 16 << 10

// Shell command timeouts.
const (
	DefaultShellTimeout = 2 * time.Minute
	MaxShellTimeout     = 30 * time.Minute
)

// The tools' names.
const (
	Shell      = "shell"
	ReadFile   = "read_file"
	WriteFile  = "write_file"
	EditFile   = "edit_file"
	ApplyPatch = "apply_patch"
	ListFiles  = "list_files"
)

// The terminal of a shell command run with tty: wide enough that
// tables and columns seldom wrap.
const (
	TerminalRows = 40
	TerminalCols = 120
)

// Version is a version of the tools as a workflow offers them to the
// model and runs their calls: a workflow replaying its history must
// keep to the version it ran, each later one being offered only to
// workflows that started using it (workflow.GetVersion).
type Version int

const (
	// VersionBase is the tools as first offered.
	VersionBase Version = iota
	// VersionShellTTY adds shell's tty parameter.
	VersionShellTTY
	// Latest is the newest version: Definitions' and Run's.
	Latest = VersionShellTTY
)

// Definitions describes the tools of the Latest version to the model.
func Definitions() []chat.ToolDef { return DefinitionsAt(Latest) }

// DefinitionsAt describes the tools of version v to the model.
func DefinitionsAt(v Version) []chat.ToolDef {
	shellDesc := "Run a shell command line (sh -c) in the workspace's root directory and return its exit code and output. Output longer than 16 KiB is cut in the middle."
	shellProps := `"command":{"type":"string","description":"the command line"},"timeout_seconds":{"type":"integer","description":"stop the command after this long (default 120, at most 1800)"}`
	if v >= VersionShellTTY {
		shellDesc += fmt.Sprintf(" With tty, the command runs on a terminal (%dx%d, TERM=xterm-256color) for programs that behave differently without one: colors, isatty checks, REPLs, progress displays."+
			" On a terminal stdout and stderr are one stream, lines end in \\r\\n and escape sequences are kept; the terminal takes no input, so a program waiting for keys waits until the timeout: give input with a pipe or a here-document, or use the program's non-interactive flags.", TerminalCols, TerminalRows)
		shellProps += `,"tty":{"type":"boolean","description":"run the command on a terminal (default false)"}`
	}
	return []chat.ToolDef{
		{Name: Shell, Description: shellDesc, Parameters: schema("{"+shellProps+"}", "command")},
		{Name: ReadFile, Description: "Read a text file of the workspace, each line prefixed by its number and a tab (the numbers are not part of the file). At most 16 KiB are returned; give a line range to read on.",
			Parameters: schema(`{"path":{"type":"string","description":"relative to the workspace's root"},"start_line":{"type":"integer","description":"first line to read, from 1"},"end_line":{"type":"integer","description":"last line to read"}}`, "path")},
		{Name: WriteFile, Description: "Create or replace a file of the workspace with the given content, creating its directories.",
			Parameters: schema(`{"path":{"type":"string"},"content":{"type":"string"}}`, "path", "content")},
		{Name: EditFile, Description: "Replace exactly one occurrence of old_string in a file by new_string. Refused when old_string is not in the file, or is there more than once: include enough surrounding lines to make it unique.",
			Parameters: schema(`{"path":{"type":"string"},"old_string":{"type":"string","description":"the exact text to replace, whitespace included"},"new_string":{"type":"string"}}`, "path", "old_string", "new_string")},
		{Name: ApplyPatch, Description: "Apply a unified diff (as git diff or diff -u write it: ---/+++ headers, @@ hunks; new, deleted and renamed files too), to all its files or, when any hunk does not apply, to none.",
			Parameters: schema(`{"patch":{"type":"string","description":"the unified diff"}}`, "patch")},
		{Name: ListFiles, Description: "List a directory of the workspace: directories end with /, files show their size.",
			Parameters: schema(`{"path":{"type":"string","description":"default: the workspace's root"},"depth":{"type":"integer","description":"levels to descend (default 1, at most 3)"}}`)},
	}
}

func schema(props string, required ...string) json.RawMessage {
	req, _ := json.Marshal(append([]string{}, required...))
	return json.RawMessage(`{"type":"object","properties":` + props + `,"required":` + string(req) + `,"additionalProperties":false}`)
}

// Result is what a tool call gives the model.
type Result struct {
	// Output is what the model reads: the tool's output, or what went
	// wrong, at most MaxOutput bytes.
	Output string `json:"output"`
	// Failed: the tool did not do what it was asked.
	Failed bool `json:"failed,omitempty"`
}

// Run runs a tool call of the Latest version on ws.
func Run(ws Workspace, call chat.ToolCall) Result { return RunAt(Latest, ws, call) }

// RunAt runs a tool call of version v on ws: a parameter added later is
// ignored, as it was then.
func RunAt(v Version, ws Workspace, call chat.ToolCall) Result {
	var (
		out string
		err error
	)
	switch call.Name {
	case Shell:
		var a struct {
			Command        string `json:"command"`
			TimeoutSeconds int    `json:"timeout_seconds"`
		}
		var t struct {
			TTY bool `json:"tty"`
		}
		if err = args(call, &a); err == nil && v >= VersionShellTTY {
			err = args(call, &t)
		}
		if err == nil {
			out, err = shell(ws, a.Command, a.TimeoutSeconds, t.TTY)
		}
	case ReadFile:
		var a struct {
			Path      string `json:"path"`
			StartLine int    `json:"start_line"`
			EndLine   int    `json:"end_line"`
		}
		if err = args(call, &a); err == nil {
			out, err = readFile(ws, a.Path, a.StartLine, a.EndLine)
		}
	case WriteFile:
		var a struct {
			Path    string  `json:"path"`
			Content *string `json:"content"`
		}
		if err = args(call, &a); err == nil {
			out, err = writeFile(ws, a.Path, a.Content)
		}
	case EditFile:
		var a struct {
			Path      string `json:"path"`
			OldString string `json:"old_string"`
			NewString string `json:"new_string"`
		}
		if err = args(call, &a); err == nil {
			out, err = editFile(ws, a.Path, a.OldString, a.NewString)
		}
	case ApplyPatch:
		var a struct {
			Patch string `json:"patch"`
		}
		if err = args(call, &a); err == nil {
			out, err = applyPatch(ws, a.Patch)
		}
	case ListFiles:
		var a struct {
			Path  string `json:"path"`
			Depth int    `json:"depth"`
		}
		if err = args(call, &a); err == nil {
			out, err = listFiles(ws, a.Path, a.Depth)
		}
	default:
		err = fmt.Errorf("there is no tool %q; the tools are %s, %s, %s, %s, %s and %s",
			call.Name, Shell, ReadFile, WriteFile, EditFile, ApplyPatch, ListFiles)
	}
	if err != nil {
		return Result{Output: capOutput("error: " + err.Error()), Failed: true}
	}
	return Result{Output: out}
}

// args decodes a call's arguments.
func args(call chat.ToolCall, v any) error {
	if err := json.Unmarshal([]byte(call.Arguments), v); err != nil {
		return fmt.Errorf("the arguments of %s are not a JSON object of its parameters: %v", call.Name, err)
	}
	return nil
}

func checkPath(p string) error {
	if !validPath(p) {
		return fmt.Errorf("bad path %q: give a path relative to the workspace's root, inside it", p)
	}
	return nil
}

func shell(ws Workspace, command string, timeoutSeconds int, tty bool) (string, error) {
	if strings.TrimSpace(command) == "" {
		return "", errors.New("no command given")
	}
	timeout := DefaultShellTimeout
	if timeoutSeconds > 0 {
		timeout = min(time.Duration(timeoutSeconds)*time.Second, MaxShellTimeout)
	}
	res, err := ws.Exec(command, ExecOptions{Timeout: timeout, TTY: tty})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	switch {
	case res.TimedOut:
		fmt.Fprintf(&b, "timed out after %v and was stopped\n", timeout)
	default:
		fmt.Fprintf(&b, "exit code %d\n", res.ExitCode)
	}
	if res.Stdout != "" {
		b.WriteString(res.Stdout)
		if !strings.HasSuffix(res.Stdout, "\n") {
			b.WriteString("\n")
		}
	}
	if res.Stderr != "" {
		b.WriteString("stderr:\n")
		b.WriteString(res.Stderr)
	}
	if res.Truncated {
		b.WriteString("\n[the output was too large to keep whole: its middle is gone; redirect it to a file and read_file that file by line ranges]")
	}
	return capHint(b.String(), "run the command again with its output redirected to a file (cmd > out.txt 2>&1), then read_file out.txt with start_line and end_line"), nil
}

// maxReadLines bounds a read of a file too large to read whole.
const maxReadLines = 2000

func readFile(ws Workspace, p string, start, end int) (string, error) {
	if err := checkPath(p); err != nil {
		return "", err
	}
	if start < 1 {
		start = 1
	}
	if end != 0 && end < start {
		return "", fmt.Errorf("end_line %d is before start_line %d", end, start)
	}
	data, err := ws.ReadFile(p)
	var lines []string
	total := -1 // unknown for a file read in part
	switch {
	case errors.Is(err, ErrTooLarge):
		// Too large for the handle: read the range with sed instead.
		last := end
		if last == 0 {
			last = start + maxReadLines - 1
		}
		res, xerr := ws.Exec(fmt.Sprintf("sed -n '%d,%dp' -- %s", start, last, quote(p)), ExecOptions{Timeout: time.Minute})
		if xerr != nil || res.ExitCode != 0 {
			return "", fmt.Errorf("%s is too large to read whole, and reading lines %d-%d failed: %v %s", p, start, last, xerr, res.Stderr)
		}
		lines, _ = splitLines(res.Stdout)
		end = start + len(lines) - 1
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%s does not exist; list_files shows what does", p)
	case err != nil:
		return "", err
	default:
		lines, _ = splitLines(string(data))
		total = len(lines)
		if start > total && total > 0 {
			return "", fmt.Errorf("%s has %d lines; start_line %d is past its end", p, total, start)
		}
		if end == 0 || end > total {
			end = total
		}
		lines = lines[min(start-1, len(lines)):end]
	}
	var b strings.Builder
	shown := start - 1
	for i, l := range lines {
		line := strconv.Itoa(start+i) + "\t" + l + "\n"
		if b.Len()+len(line) > MaxOutput-200 {
			break
		}
		b.WriteString(line)
		shown = start + i
	}
	switch {
	case shown < end:
		fmt.Fprintf(&b, "[cut at 16 KiB: showed lines %d-%d of %s; call read_file with start_line %d to read on]", start, shown, count(total), shown+1)
	case total < 0:
		fmt.Fprintf(&b, "[showed lines %d-%d of a file too large to read whole; call read_file with start_line %d to read on]", start, shown, shown+1)
	case total == 0:
		b.WriteString("[the file is empty]")
	}
	return b.String(), nil
}

func count(total int) string {
	if total < 0 {
		return "a larger file"
	}
	return strconv.Itoa(total)
}

func writeFile(ws Workspace, p string, content *string) (string, error) {
	if err := checkPath(p); err != nil {
		return "", err
	}
	if content == nil {
		return "", errors.New("no content given")
	}
	if err := ws.WriteFiles(provider.File{Path: p, Data: []byte(*content), Mode: modeOf(ws, p)}); err != nil {
		return "", err
	}
	return fmt.Sprintf("wrote %d bytes to %s", len(*content), p), nil
}

func editFile(ws Workspace, p, old, new string) (string, error) {
	if err := checkPath(p); err != nil {
		return "", err
	}
	if old == "" {
		return "", errors.New("old_string is empty; to write a whole file use write_file")
	}
	data, err := ws.ReadFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%s does not exist; to create it use write_file", p)
	case errors.Is(err, ErrTooLarge):
		return "", fmt.Errorf("%s is too large to edit whole; use apply_patch or a shell command", p)
	case err != nil:
		return "", err
	}
	text := string(data)
	switch n := strings.Count(text, old); n {
	case 0:
		return "", fmt.Errorf("old_string is not in %s; read_file it to see its text as it is now (whitespace counts)", p)
	case 1:
	default:
		var at []string
		for i, rest := 0, text; len(at) < 5; {
			j := strings.Index(rest, old)
			if j < 0 {
				break
			}
			at = append(at, strconv.Itoa(strings.Count(text[:i+j], "\n")+1))
			i, rest = i+j+len(old), rest[j+len(old):]
		}
		return "", fmt.Errorf("old_string is in %s %d times (at lines %s); include more of the surrounding text to make it unique", p, n, strings.Join(at, ", "))
	}
	i := strings.Index(text, old)
	text = text[:i] + new + text[i+len(old):]
	if err := ws.WriteFiles(provider.File{Path: p, Data: []byte(text), Mode: modeOf(ws, p)}); err != nil {
		return "", err
	}
	return fmt.Sprintf("edited %s at line %d", p, strings.Count(text[:i], "\n")+1), nil
}

func applyPatch(ws Workspace, patch string) (string, error) {
	c, err := planPatch(ws, patch)
	if err != nil {
		return "", fmt.Errorf("the patch was not applied, nothing changed: %w", err)
	}
	if len(c.write) > 0 {
		if err := ws.WriteFiles(c.write...); err != nil {
			return "", fmt.Errorf("the patch was not applied: %w", err)
		}
	}
	for _, p := range c.remove {
		if err := ws.Remove(p); err != nil {
			return "", fmt.Errorf("the patch was applied but for removing %s: %w", p, err)
		}
	}
	return "applied:\n" + strings.Join(c.summary, "\n"), nil
}

// Limits of list_files.
const (
	maxListDepth   = 3
	maxListEntries = 1000
	maxListDirs    = 50
)

func listFiles(ws Workspace, dir string, depth int) (string, error) {
	if dir == "" {
		dir = "."
	}
	if dir != "." {
		if err := checkPath(dir); err != nil {
			return "", err
		}
	}
	depth = min(max(depth, 1), maxListDepth)
	var (
		b       strings.Builder
		entries int
		listed  int
		cut     bool
	)
	var walk func(d, indent string, level int) error
	walk = func(d, indent string, level int) error {
		infos, err := ws.ListFiles(d)
		if err != nil {
			return err
		}
		listed++
		for _, fi := range infos {
			if entries >= maxListEntries {
				cut = true
				return nil
			}
			entries++
			switch {
			case fi.IsDir():
				fmt.Fprintf(&b, "%s%s/\n", indent, fi.Name)
				if level < depth && fi.Name != ".git" && listed < maxListDirs {
					if err := walk(path.Join(d, fi.Name), indent+"  ", level+1); err != nil {
						return err
					}
				} else if level < depth {
					cut = true
				}
			case fi.Target != "":
				fmt.Fprintf(&b, "%s%s -> %s\n", indent, fi.Name, fi.Target)
			default:
				fmt.Fprintf(&b, "%s%s (%d bytes)\n", indent, fi.Name, fi.Size)
			}
		}
		return nil
	}
	err := walk(dir, "", 1)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%s does not exist", dir)
	case err != nil:
		return "", err
	}
	if entries == 0 {
		return dir + " is empty", nil
	}
	if cut {
		b.WriteString("[not all shown: list the directories of interest on their own, or run find in the shell]\n")
	}
	return capHint(b.String(), "list a subdirectory on its own"), nil
}

// capOutput caps s at MaxOutput bytes.
func capOutput(s string) string { return capHint(s, "") }

// capHint caps s at MaxOutput bytes, keeping its head and tail, with a
// note of what was cut and how to see it.
func capHint(s, how string) string {
	if len(s) <= MaxOutput {
		return s
	}
	const noteRoom = 400 // the note is shorter
	keep := MaxOutput - noteRoom
	head, tail := keep*2/3, keep-keep*2/3
	note := fmt.Sprintf("\n[... %d of %d bytes cut here ...", len(s)-keep, len(s))
	if how != "" {
		note += " to see them: " + how
	}
	note += "]\n"
	// A rune cut in two at either edge goes.
	return strings.ToValidUTF8(s[:head], "") + note + strings.ToValidUTF8(s[len(s)-tail:], "")
}

// quote quotes a word for sh.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Instructions returns base followed by the workspace's AGENTS.md, when
// it has one, as the agent's instructions.
func Instructions(ws Workspace, base string) string {
	data, err := ws.ReadFile("AGENTS.md")
	if err != nil || len(data) == 0 {
		return base
	}
	return base + "\n\n# AGENTS.md (instructions from the workspace's root)\n\n" + capHint(string(data), "read_file AGENTS.md")
}
