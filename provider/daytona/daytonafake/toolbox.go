package daytonafake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// The markers the daemon puts before each line of a session command's
// log: stdout's and stderr's.
var (
	stdoutMark = []byte{1, 1, 1}
	stderrMark = []byte{2, 2, 2}
)

// toolboxPrefix names the toolbox's operations: the proxy's path before
// the document's.
const toolboxPrefix = "/toolbox/{sandboxId}"

// serveToolbox serves <URL>/toolbox/<id>/<path>: Daytona's proxy before
// the sandbox's daemon, which the document describes from <path> on.
func (s *Server) serveToolbox(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r, writeToolboxError) {
		return
	}
	id, sub, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/toolbox/"), "/")
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/" + sub
	r2.URL.RawPath = ""
	s.validated(w, r2, s.toolboxRouter, toolboxPrefix, writeToolboxError, func(w http.ResponseWriter, r *http.Request, p map[string]string) {
		s.mu.Lock()
		sb := s.sandboxes[id]
		switch {
		case sb == nil:
			s.mu.Unlock()
			writeToolboxError(w, r, http.StatusNotFound, "sandbox container not found: Sandbox with ID "+id+" not found")
			return
		case sb.state != stateStarted || sb.machine == nil:
			s.mu.Unlock()
			writeToolboxError(w, r, http.StatusBadRequest, "no IP address found. Is the Sandbox started?")
			return
		}
		sb.inflight++
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			sb.inflight--
			sb.activity = time.Now()
			s.mu.Unlock()
		}()
		t := &toolbox{s: s, sb: sb, m: sb.machine, user: UserName, home: sb.machine.Home()}
		if sb.user == "root" {
			t.user, t.home = "root", "/root"
		}
		t.serve(w, r, p)
	})
}

// toolbox serves one request to a sandbox's daemon, which acts as the
// sandbox's user.
type toolbox struct {
	s    *Server
	sb   *sandbox
	m    *remotefake.Machine
	user string
	home string
}

func (t *toolbox) serve(w http.ResponseWriter, r *http.Request, p map[string]string) {
	switch op := r.Method + " " + r.URL.Path; {
	case op == "GET /user-home-dir", op == "GET /work-dir":
		writeJSON(w, http.StatusOK, map[string]any{"dir": t.home})
	case op == "GET /version":
		writeJSON(w, http.StatusOK, map[string]any{"version": daemonVersion})
	case op == "POST /files/upload":
		t.upload(w, r)
	case op == "GET /files/download":
		t.download(w, r)
	case op == "POST /files/folder":
		t.folder(w, r)
	case op == "POST /files/permissions":
		t.permissions(w, r)
	case op == "GET /files/info":
		t.info(w, r)
	case op == "DELETE /files":
		t.deleteFile(w, r)
	case op == "POST /process/execute":
		t.execute(w, r)
	case op == "POST /process/session":
		t.createSession(w, r)
	case op == "GET /process/session":
		t.listSessions(w)
	case r.URL.Path == "/process/session/"+p["sessionId"]:
		if r.Method == http.MethodDelete {
			t.deleteSession(w, r, p["sessionId"])
		} else {
			t.getSession(w, r, p["sessionId"])
		}
	case op == "POST /process/session/"+p["sessionId"]+"/exec":
		t.sessionExec(w, r, p["sessionId"])
	case p["commandId"] != "" && strings.HasSuffix(r.URL.Path, "/logs"):
		t.logs(w, r, p["sessionId"], p["commandId"])
	case p["commandId"] != "" && r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/input"):
		t.getCommand(w, r, p["sessionId"], p["commandId"])
	default:
		writeToolboxError(w, r, http.StatusNotImplemented, "the fake does not serve this operation")
	}
}

// abs makes a path of a request absolute, as the daemon's working
// directory, the user's home, does.
func (t *toolbox) abs(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(t.home, p)
}

// run runs a shell script in the machine as the toolbox's user, from its
// home, its arguments $1..., with stdin when set.
func (t *toolbox) run(ctx context.Context, script string, stdin io.Reader, args ...string) (stdout, stderr string, code int, err error) {
	p, err := t.m.Start(ctx, remotefake.Command{
		Argv: append([]string{"/bin/sh", "-c", script, "sh"}, args...), User: t.user, Dir: t.home, Stdin: stdin != nil,
	})
	if err != nil {
		return "", "", -1, err
	}
	var ob, eb bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(&ob, p.Stdout()) }()
	go func() { defer wg.Done(); io.Copy(&eb, p.Stderr()) }()
	if stdin != nil {
		_, werr := io.Copy(p.Stdin(), stdin)
		p.Stdin().Close()
		if werr != nil {
			t.s.log.Debug("daytonafake: write a process's input", "err", werr)
		}
	}
	wg.Wait()
	code, err = p.Wait()
	return ob.String(), eb.String(), code, err
}

// failure is the first line of a script's stderr, for an error's message.
func failure(stderr string, code int) string {
	if line, _, _ := strings.Cut(strings.TrimSpace(stderr), "\n"); line != "" {
		return line
	}
	return "exit status " + strconv.Itoa(code)
}

func (t *toolbox) upload(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeToolboxError(w, r, http.StatusBadRequest, "path is required")
		return
	}
	f, _, err := r.FormFile("file")
	if err != nil {
		writeToolboxError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	defer f.Close()
	// As gin's SaveUploadedFile in the daemon: the directories made,
	// the file written in place, all the user's.
	_, stderr, code, err := t.run(r.Context(), `mkdir -p -- "$(dirname -- "$1")" && cat > "$1"`, f, t.abs(p))
	if err != nil {
		writeToolboxError(w, r, http.StatusInternalServerError, firstLine(err))
		return
	}
	if code != 0 {
		writeToolboxError(w, r, http.StatusBadRequest, failure(stderr, code))
		return
	}
	// The daemon's body is empty, which its document's gin.H (an
	// object) does not allow: the fake's is the empty object, which the
	// SDK reads as it reads nothing.
	writeJSON(w, http.StatusOK, map[string]any{})
}

// download serves a file, read as root: the fake does not check that
// the user may read it.
func (t *toolbox) download(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeToolboxError(w, r, http.StatusBadRequest, "path is required")
		return
	}
	abs := t.abs(p)
	rc, err := t.m.ReadFile(r.Context(), abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeToolboxError(w, r, http.StatusNotFound, "stat "+abs+": no such file or directory")
		return
	case errors.Is(err, errdefs.ErrBadInput):
		writeToolboxError(w, r, http.StatusBadRequest, "path must be a file")
		return
	case err != nil:
		writeToolboxError(w, r, http.StatusBadRequest, firstLine(err))
		return
	}
	defer rc.Close()
	name := path.Base(abs)
	w.Header().Set("Content-Description", "File Transfer")
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	w.Header().Set("Content-Transfer-Encoding", "binary")
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, rc)
}

var octal = regexp.MustCompile(`^[0-7]{1,4}$`)

func (t *toolbox) folder(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, mode := q.Get("path"), q.Get("mode")
	if p == "" {
		writeToolboxError(w, r, http.StatusBadRequest, "path is required")
		return
	}
	if mode == "" {
		mode = "0755"
	}
	if !octal.MatchString(mode) {
		writeToolboxError(w, r, http.StatusBadRequest, "invalid mode format")
		return
	}
	t.script(w, r, http.StatusCreated, `mkdir -p -m "$2" -- "$1"`, t.abs(p), mode)
}

// script runs a script with args and answers ok, or 400 with its error.
func (t *toolbox) script(w http.ResponseWriter, r *http.Request, ok int, script string, args ...string) {
	_, stderr, code, err := t.run(r.Context(), script, nil, args...)
	switch {
	case err != nil:
		writeToolboxError(w, r, http.StatusInternalServerError, firstLine(err))
	case code == 44:
		writeToolboxError(w, r, http.StatusNotFound, failure(stderr, code))
	case code != 0:
		writeToolboxError(w, r, http.StatusBadRequest, failure(stderr, code))
	default:
		w.WriteHeader(ok)
	}
}

// notThere ends a script with 44, which script answers 404, when its $1
// does not exist.
const notThere = `[ -e "$1" ] || [ -L "$1" ] || { echo "stat $1: no such file or directory" >&2; exit 44; }; `

func (t *toolbox) permissions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, mode, owner, group := q.Get("path"), q.Get("mode"), q.Get("owner"), q.Get("group")
	if p == "" {
		writeToolboxError(w, r, http.StatusBadRequest, "path is required")
		return
	}
	if mode != "" && !octal.MatchString(mode) {
		writeToolboxError(w, r, http.StatusBadRequest, "invalid mode format")
		return
	}
	own := owner
	if group != "" {
		own += ":" + group
	}
	t.script(w, r, http.StatusOK, notThere+
		`if [ -n "$2" ]; then out=$(chmod "$2" -- "$1" 2>&1) || { echo "failed to change mode: $out" >&2; exit 1; }; fi; `+
		`if [ -n "$3" ]; then out=$(chown -- "$3" "$1" 2>&1) || { echo "failed to change ownership: $out" >&2; exit 1; }; fi`,
		t.abs(p), mode, own)
}

func (t *toolbox) info(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		writeToolboxError(w, r, http.StatusBadRequest, "path is required")
		return
	}
	out, stderr, code, err := t.run(r.Context(), notThere+`stat -c '%s|%a|%A|%U|%G|%F|%Y' -- "$1"`, nil, t.abs(p))
	switch {
	case err != nil:
		writeToolboxError(w, r, http.StatusInternalServerError, firstLine(err))
		return
	case code == 44:
		writeToolboxError(w, r, http.StatusNotFound, failure(stderr, code))
		return
	case code != 0:
		writeToolboxError(w, r, http.StatusBadRequest, failure(stderr, code))
		return
	}
	f := strings.Split(strings.TrimSpace(out), "|")
	if len(f) != 7 {
		writeToolboxError(w, r, http.StatusInternalServerError, "unreadable stat: "+out)
		return
	}
	size, _ := strconv.Atoi(f[0])
	perm, _ := strconv.ParseUint(f[1], 8, 32)
	mtime, _ := strconv.ParseInt(f[6], 10, 64)
	isDir := f[5] == "directory"
	mode := fs.FileMode(perm)
	if isDir {
		mode |= fs.ModeDir
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"name": path.Base(t.abs(p)), "size": size, "mode": mode.String(),
		"permissions": fmt.Sprintf("%#o", perm), "owner": f[3], "group": f[4],
		"isDir": isDir, "modTime": time.Unix(mtime, 0).UTC().String(),
	})
}

func (t *toolbox) deleteFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		writeToolboxError(w, r, http.StatusBadRequest, "path is required")
		return
	}
	t.script(w, r, http.StatusNoContent, notThere+
		`if [ -d "$1" ] && [ ! -L "$1" ] && [ "$2" != true ]; then echo "cannot delete directory without recursive flag" >&2; exit 1; fi; rm -rf -- "$1"`,
		t.abs(p), q.Get("recursive"))
}

// shell is the shell the daemon runs commands with: its GetShell, from
// the machine's /etc/shells.
func (t *toolbox) shell(ctx context.Context) string {
	if rc, err := t.m.ReadFile(ctx, "/etc/shells"); err == nil {
		b, _ := io.ReadAll(io.LimitReader(rc, 1<<16))
		rc.Close()
		var lines []string
		for l := range strings.Lines(string(b)) {
			if !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
		all := strings.Join(lines, "")
		for _, sh := range []string{"/usr/bin/zsh", "/bin/zsh", "/usr/bin/bash", "/bin/bash"} {
			if strings.Contains(all, sh) {
				return sh
			}
		}
	}
	if sh := t.sb.env["SHELL"]; sh != "" {
		return sh
	}
	return "sh"
}

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// killGroup kills the process group a process leads, as the daemon
// kills a command past its timeout: every process of the machine's
// docker exec leads its own.
func (t *toolbox) killGroup(pid int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := t.m.Start(ctx, remotefake.Command{Argv: []string{"/bin/sh", "-c", `kill -KILL -"$1"`, "sh", strconv.Itoa(pid)}})
	if err != nil {
		t.s.log.Debug("daytonafake: kill a process group", "err", err)
		return
	}
	go io.Copy(io.Discard, p.Stdout())
	go io.Copy(io.Discard, p.Stderr())
	p.Wait()
}

// execute serves /process/execute as the daemon does: the command is the
// standard input of the shell, whose output, stdout and stderr together,
// is the result.
func (t *toolbox) execute(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Command string            `json:"command"`
		Cwd     *string           `json:"cwd"`
		Envs    map[string]string `json:"envs"`
		Timeout *int              `json:"timeout"`
	}
	if err := decode(r, &req); err != nil {
		writeToolboxError(w, r, http.StatusBadRequest, "command is required")
		return
	}
	if strings.TrimSpace(req.Command) == "" {
		writeToolboxError(w, r, http.StatusBadRequest, "empty command")
		return
	}
	for k := range req.Envs {
		if !envKey.MatchString(k) {
			writeToolboxError(w, r, http.StatusBadRequest, "invalid environment variable name: '"+k+"'")
			return
		}
	}
	dir := t.home
	if req.Cwd != nil {
		dir = t.abs(*req.Cwd)
	}
	// The daemon's command runs on in the background when the client
	// goes: so does the fake's.
	ctx := context.WithoutCancel(r.Context())
	// One pipe for stdout and stderr, as exec.Cmd's CombinedOutput
	// makes it, so that their order is kept.
	p, err := t.m.Start(ctx, remotefake.Command{Argv: []string{"/bin/sh", "-c", `exec "$0" 2>&1`, t.shell(ctx)}, Env: req.Envs, Dir: dir, User: t.user, Stdin: true})
	if errors.Is(err, errdefs.ErrBadInput) {
		// The daemon's exec.Cmd fails to start (no such directory).
		writeJSON(w, http.StatusOK, map[string]any{"exitCode": -1, "result": ""})
		return
	}
	if err != nil {
		writeToolboxError(w, r, http.StatusInternalServerError, firstLine(err))
		return
	}
	var mu sync.Mutex
	var out bytes.Buffer
	var wg sync.WaitGroup
	for _, rd := range []io.Reader{p.Stdout(), p.Stderr()} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := rd.Read(buf)
				mu.Lock()
				out.Write(buf[:n])
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	_, _ = io.WriteString(p.Stdin(), req.Command)
	p.Stdin().Close()
	var timedOut bool
	if req.Timeout != nil && *req.Timeout > 0 {
		timer := time.AfterFunc(time.Duration(*req.Timeout)*time.Second, func() {
			mu.Lock()
			timedOut = true
			mu.Unlock()
			t.killGroup(p.PID())
		})
		defer timer.Stop()
	}
	wg.Wait()
	code, err := p.Wait()
	mu.Lock()
	defer mu.Unlock()
	switch {
	case timedOut:
		writeToolboxError(w, r, http.StatusRequestTimeout, "command execution timeout")
	case err != nil:
		writeToolboxError(w, r, http.StatusBadRequest, firstLine(err))
	default:
		writeJSON(w, http.StatusOK, map[string]any{"exitCode": code, "result": out.String()})
	}
}
