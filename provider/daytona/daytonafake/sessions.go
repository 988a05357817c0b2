package daytonafake

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// entrypointSession is the daemon's own session, which clients may not
// make, run in or delete.
const entrypointSession = "entrypoint"

// session is a shell in the machine that runs its commands one after
// the other, each sourced, as the daemon's sessions do.
type session struct {
	id    string
	dir   string // its commands' directories' parent, in the machine
	shell *remotefake.Process
	done  chan struct{} // closed when the shell has ended

	mu      sync.Mutex // serializes what goes to the shell
	cmds    map[string]*command
	order   []string
	endOnce sync.Once
	t       *toolbox // the toolbox that made it: its machine and user
}

type command struct {
	id, text string
	exitCode *int
}

// end kills the shell's process group: its commands, and whatever they
// left running.
func (ss *session) end() {
	ss.endOnce.Do(func() {
		select {
		case <-ss.done:
		default:
			ss.t.killGroup(ss.shell.PID())
		}
	})
}

// lookupSession returns the sandbox's session, or answers 404.
func (t *toolbox) lookupSession(w http.ResponseWriter, r *http.Request, id string) *session {
	t.s.mu.Lock()
	ss := t.sb.sessions[id]
	t.s.mu.Unlock()
	if ss == nil {
		writeToolboxError(w, r, http.StatusNotFound, "session not found")
	}
	return ss
}

func (t *toolbox) createSession(w http.ResponseWriter, r *http.Request) {
	var req struct {
		SessionID string `json:"sessionId"`
	}
	if err := decode(r, &req); err != nil || req.SessionID == "" {
		writeToolboxError(w, r, http.StatusBadRequest, "invalid request body")
		return
	}
	if req.SessionID == entrypointSession {
		writeToolboxError(w, r, http.StatusBadRequest, "provided session ID is reserved and cannot be created/overridden")
		return
	}
	if strings.ContainsAny(req.SessionID, "/\x00") || req.SessionID == "." || req.SessionID == ".." {
		writeToolboxError(w, r, http.StatusBadRequest, "invalid session ID")
		return
	}
	t.s.mu.Lock()
	_, exists := t.sb.sessions[req.SessionID]
	t.s.mu.Unlock()
	if exists {
		writeToolboxError(w, r, http.StatusConflict, "session already exists")
		return
	}
	ctx := context.WithoutCancel(r.Context())
	p, err := t.m.Start(ctx, remotefake.Command{Argv: []string{t.shell(ctx)}, User: t.user, Dir: t.home, Stdin: true})
	if err != nil {
		writeToolboxError(w, r, http.StatusInternalServerError, firstLine(err))
		return
	}
	ss := &session{id: req.SessionID, dir: path.Join(t.home, ".daytona", "sessions", req.SessionID),
		shell: p, done: make(chan struct{}), cmds: map[string]*command{}, t: t}
	go io.Copy(io.Discard, p.Stdout())
	go io.Copy(io.Discard, p.Stderr())
	go func() { p.Wait(); close(ss.done) }()
	t.s.mu.Lock()
	if t.sb.sessions == nil {
		t.sb.sessions = map[string]*session{}
	}
	_, exists = t.sb.sessions[req.SessionID]
	started := t.sb.state == stateStarted
	if !exists && started {
		t.sb.sessions[req.SessionID] = ss
	}
	t.s.mu.Unlock()
	switch {
	case exists:
		ss.end()
		writeToolboxError(w, r, http.StatusConflict, "session already exists")
		return
	case !started:
		ss.end()
		writeToolboxError(w, r, http.StatusBadRequest, "no IP address found. Is the Sandbox started?")
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (t *toolbox) deleteSession(w http.ResponseWriter, r *http.Request, id string) {
	if id == entrypointSession {
		writeToolboxError(w, r, http.StatusBadRequest, "can't delete entrypoint session")
		return
	}
	t.s.mu.Lock()
	ss := t.sb.sessions[id]
	delete(t.sb.sessions, id)
	t.s.mu.Unlock()
	if ss == nil {
		writeToolboxError(w, r, http.StatusNotFound, "session not found")
		return
	}
	ss.end()
	t.run(r.Context(), `rm -rf -- "$1"`, nil, ss.dir)
	w.WriteHeader(http.StatusNoContent)
}

// sessionJSON is the document's Session.
func (t *toolbox) sessionJSON(ctx context.Context, ss *session) map[string]any {
	ss.mu.Lock()
	cmds := make([]*command, 0, len(ss.order))
	for _, id := range ss.order {
		cmds = append(cmds, ss.cmds[id])
	}
	ss.mu.Unlock()
	list := make([]map[string]any, 0, len(cmds))
	for _, c := range cmds {
		list = append(list, t.commandJSON(ctx, ss, c))
	}
	return map[string]any{"sessionId": ss.id, "commands": list}
}

func (t *toolbox) listSessions(w http.ResponseWriter) {
	t.s.mu.Lock()
	all := make([]*session, 0, len(t.sb.sessions))
	for _, ss := range t.sb.sessions {
		all = append(all, ss)
	}
	t.s.mu.Unlock()
	out := make([]map[string]any, 0, len(all))
	for _, ss := range all {
		out = append(out, t.sessionJSON(context.Background(), ss))
	}
	writeJSON(w, http.StatusOK, out)
}

func (t *toolbox) getSession(w http.ResponseWriter, r *http.Request, id string) {
	if ss := t.lookupSession(w, r, id); ss != nil {
		writeJSON(w, http.StatusOK, t.sessionJSON(r.Context(), ss))
	}
}

// exitCode reads a command's exit code from its file, once it is there.
func (t *toolbox) exitCode(ctx context.Context, ss *session, c *command) *int {
	ss.mu.Lock()
	known := c.exitCode
	ss.mu.Unlock()
	if known != nil {
		return known
	}
	rc, err := t.m.ReadFile(ctx, path.Join(ss.dir, c.id, "exit_code"))
	if err != nil {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(rc, 64))
	rc.Close()
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
		return nil // not written whole yet
	}
	ss.mu.Lock()
	c.exitCode = &n
	ss.mu.Unlock()
	return &n
}

func (t *toolbox) commandJSON(ctx context.Context, ss *session, c *command) map[string]any {
	v := map[string]any{"id": c.id, "command": c.text}
	if code := t.exitCode(ctx, ss, c); code != nil {
		v["exitCode"] = *code
	}
	return v
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// wrap is what the session's shell reads to run a command, as the
// daemon's wrapper does: the command's text in a file of its own
// directory, sourced there with no input, each line of its stdout and
// stderr marked and appended to output.log, then its status to
// exit_code once the log is whole. Its variables begin with __dtf_, so
// as not to meet the user's.
func wrap(dir, text string) string {
	q := shellQuote(dir)
	label := func(mark, pipe string) string {
		return `( while IFS= read -r __dtf_l || [ -n "$__dtf_l" ]; do printf '` + mark + `%s\n' "$__dtf_l"; done < "$__dtf_d/` + pipe + `" ) >> "$__dtf_d/output.log" &`
	}
	return "{\n" +
		"__dtf_d=" + q + "\n" +
		`mkdir -p "$__dtf_d" && printf '%s' ` + shellQuote(text) + ` > "$__dtf_d/cmd.sh" && : > "$__dtf_d/output.log" && rm -f "$__dtf_d/out.pipe" "$__dtf_d/err.pipe" && mkfifo "$__dtf_d/out.pipe" "$__dtf_d/err.pipe"` + "\n" +
		label(`\001\001\001`, "out.pipe") + "\n__dtf_r1=$!\n" +
		label(`\002\002\002`, "err.pipe") + "\n__dtf_r2=$!\n" +
		`{ . "$__dtf_d/cmd.sh"; } < /dev/null > "$__dtf_d/out.pipe" 2> "$__dtf_d/err.pipe"` + "\n" +
		"__dtf_x=$?\n" +
		`wait "$__dtf_r1" "$__dtf_r2"` + "\n" +
		`rm -f "$__dtf_d/out.pipe" "$__dtf_d/err.pipe"` + "\n" +
		`echo "$__dtf_x" > "$__dtf_d/exit_code"` + "\n" +
		"}\n"
}

func (t *toolbox) sessionExec(w http.ResponseWriter, r *http.Request, id string) {
	if id == entrypointSession {
		writeToolboxError(w, r, http.StatusBadRequest, "can't execute command in entrypoint session")
		return
	}
	var req struct {
		Command           string `json:"command"`
		RunAsync          bool   `json:"runAsync"`
		Async             bool   `json:"async"`
		SuppressInputEcho bool   `json:"suppressInputEcho"`
	}
	if err := decode(r, &req); err != nil {
		writeToolboxError(w, r, http.StatusBadRequest, "invalid request body: "+err.Error())
		return
	}
	if strings.TrimSpace(req.Command) == "" {
		writeToolboxError(w, r, http.StatusBadRequest, "command cannot be empty")
		return
	}
	async := req.RunAsync || req.Async
	ss := t.lookupSession(w, r, id)
	if ss == nil {
		return
	}
	c := &command{id: newUUID(), text: req.Command}
	ss.mu.Lock()
	ss.cmds[c.id] = c
	ss.order = append(ss.order, c.id)
	_, err := io.WriteString(ss.shell.Stdin(), wrap(path.Join(ss.dir, c.id), c.text))
	ss.mu.Unlock()
	if err != nil {
		writeToolboxError(w, r, http.StatusBadRequest, "failed to execute command: failed to write command: "+err.Error())
		return
	}
	if async {
		writeJSON(w, http.StatusAccepted, map[string]any{"cmdId": c.id})
		return
	}
	ctx := r.Context()
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		if code := t.exitCode(ctx, ss, c); code != nil {
			log, err := t.readLog(ctx, ss, c)
			if err != nil {
				writeToolboxError(w, r, http.StatusBadRequest, "failed to execute command: "+firstLine(err))
				return
			}
			stdout, stderr := demux(log)
			writeJSON(w, http.StatusOK, map[string]any{"cmdId": c.id, "output": string(log),
				"stdout": string(stdout), "stderr": string(stderr), "exitCode": *code})
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ss.done:
			writeToolboxError(w, r, http.StatusBadRequest, "failed to execute command: session cancelled")
			return
		case <-time.After(delay):
		}
	}
}

// readLog reads a command's log.
func (t *toolbox) readLog(ctx context.Context, ss *session, c *command) ([]byte, error) {
	rc, err := t.m.ReadFile(ctx, path.Join(ss.dir, c.id, "output.log"))
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// demux splits a log into its stdout and its stderr, by their marks.
func demux(log []byte) (stdout, stderr []byte) {
	var cur *[]byte
	for len(log) > 0 {
		i := markAt(log)
		if i < 0 {
			i = len(log)
		}
		if cur != nil {
			*cur = append(*cur, log[:i]...)
		}
		if i == len(log) {
			break
		}
		if bytes.HasPrefix(log[i:], stdoutMark) {
			cur = &stdout
		} else {
			cur = &stderr
		}
		log = log[i+len(stdoutMark):]
	}
	return stdout, stderr
}

// markAt is where the first mark of b begins, or -1.
func markAt(b []byte) int {
	o, e := bytes.Index(b, stdoutMark), bytes.Index(b, stderrMark)
	switch {
	case o < 0:
		return e
	case e < 0 || o < e:
		return o
	}
	return e
}

// unmark drops the marks of a log: the combined output old clients get.
func unmark(b []byte) []byte {
	return bytes.ReplaceAll(bytes.ReplaceAll(b, stdoutMark, nil), stderrMark, nil)
}

func (t *toolbox) findCommand(w http.ResponseWriter, r *http.Request, sessionID, cmdID string) (*session, *command) {
	ss := t.lookupSession(w, r, sessionID)
	if ss == nil {
		return nil, nil
	}
	ss.mu.Lock()
	c := ss.cmds[cmdID]
	ss.mu.Unlock()
	if c == nil {
		writeToolboxError(w, r, http.StatusNotFound, "command not found")
		return nil, nil
	}
	return ss, c
}

func (t *toolbox) getCommand(w http.ResponseWriter, r *http.Request, sessionID, cmdID string) {
	if ss, c := t.findCommand(w, r, sessionID, cmdID); c != nil {
		writeJSON(w, http.StatusOK, t.commandJSON(r.Context(), ss, c))
	}
}

// sdkVersion is the X-Daytona-SDK-Version a request carries, as numbers,
// and whether it is a development one.
func sdkVersion(r *http.Request) (v [3]int, dev, ok bool) {
	h := r.Header.Get("X-Daytona-SDK-Version")
	if h == "" {
		return v, false, false
	}
	if strings.Contains(h, "dev") {
		return v, true, true
	}
	core, _, _ := strings.Cut(strings.TrimPrefix(h, "v"), "-")
	for i, f := range strings.SplitN(core, ".", 3) {
		v[i], _ = strconv.Atoi(f)
	}
	return v, false, true
}

func older(v [3]int, than [3]int) bool {
	for i := range v {
		if v[i] != than[i] {
			return v[i] < than[i]
		}
	}
	return false
}

// logForm is how the daemon answers a client for logs: JSON with stdout
// and stderr apart for SDKs from 0.167.0, its raw log otherwise, without
// marks for clients older than 0.27.0 or naming no version (unless they
// ask X-Daytona-Split-Output).
func logForm(r *http.Request) (json, combined bool) {
	v, dev, ok := sdkVersion(r)
	combined = (ok && !dev && older(v, [3]int{0, 27, 0})) || (!ok && r.Header.Get("X-Daytona-Split-Output") != "true")
	json = ok && (dev || !older(v, [3]int{0, 167, 0}))
	return json && !combined, combined
}

func (t *toolbox) logs(w http.ResponseWriter, r *http.Request, sessionID, cmdID string) {
	ss, c := t.findCommand(w, r, sessionID, cmdID)
	if c == nil {
		return
	}
	asJSON, combined := logForm(r)
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		t.follow(w, r, ss, c, combined)
		return
	}
	log, err := t.readLog(r.Context(), ss, c)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeToolboxError(w, r, http.StatusNotFound, "open "+path.Join(ss.dir, c.id, "output.log")+": no such file or directory")
		return
	case err != nil:
		writeToolboxError(w, r, http.StatusBadRequest, firstLine(err))
		return
	}
	if asJSON {
		stdout, stderr := demux(log)
		writeJSON(w, http.StatusOK, map[string]any{"output": string(log), "stdout": string(stdout), "stderr": string(stderr)})
		return
	}
	if combined {
		log = unmark(log)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(log)
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

// follow streams a command's log over a WebSocket as it grows, raw (the
// SDK splits it by its marks) unless combined, and closes it normally
// once the command has ended and all of its log is sent.
func (t *toolbox) follow(w http.ResponseWriter, r *http.Request, ss *session, c *command, combined bool) {
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer conn.Close()
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	ctx := context.Background()
	var sent int
	var pending []byte // a mark may be cut at a read's end
	send := func() error {
		log, err := t.readLog(ctx, ss, c)
		if err != nil || len(log) <= sent {
			return nil
		}
		chunk := log[sent:]
		sent = len(log)
		if combined {
			chunk = append(pending, chunk...)
			pending = nil
			if k := partialMark(chunk); k > 0 {
				pending = append([]byte(nil), chunk[len(chunk)-k:]...)
				chunk = chunk[:len(chunk)-k]
			}
			chunk = unmark(chunk)
		}
		if len(chunk) == 0 {
			return nil
		}
		return conn.WriteMessage(websocket.BinaryMessage, chunk)
	}
	for delay := 5 * time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		ended := t.exitCode(ctx, ss, c) != nil
		if err := send(); err != nil {
			return
		}
		if ended {
			if len(pending) > 0 {
				_ = conn.WriteMessage(websocket.BinaryMessage, pending)
			}
			_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
			return
		}
		select {
		case <-gone:
			return
		case <-ss.done:
			_ = send()
			_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
			return
		case <-time.After(delay):
		}
	}
}

// partialMark is how many bytes at b's end may begin a mark.
func partialMark(b []byte) int {
	for k := min(len(b), len(stdoutMark)-1); k > 0; k-- {
		tail := b[len(b)-k:]
		if bytes.Equal(tail, stdoutMark[:k]) || bytes.Equal(tail, stderrMark[:k]) {
			return k
		}
	}
	return 0
}
