package agentcorefake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// tools are InvokeCodeInterpreter's.
var tools = map[string]bool{
	"executeCommand": true, "startCommandExecution": true, "getTask": true, "stopTask": true,
	"writeFiles": true, "readFiles": true, "listFiles": true, "removeFiles": true, "executeCode": true,
}

var (
	sessionIDRE = regexp.MustCompile(`^[0-9a-zA-Z]{1,40}$`)
	tokenRE     = regexp.MustCompile(`^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,256}$`)
)

// maxString is MaxLenString's bound, 100,000,000 characters; maxInline
// bounds the files of one writeFiles (100 MB inline, as the developer
// guide says).
const (
	maxString = 100_000_000
	maxInline = 100_000_000
)

// inputBlock is an InputContentBlock.
type inputBlock struct {
	Path *string `json:"path"`
	Text *string `json:"text"`
	Blob []byte  `json:"blob"`
}

// toolArguments is a ToolArguments.
type toolArguments struct {
	Code          *string      `json:"code"`
	Language      *string      `json:"language"`
	ClearContext  *bool        `json:"clearContext"`
	Command       *string      `json:"command"`
	Path          *string      `json:"path"`
	Paths         []string     `json:"paths"`
	Content       []inputBlock `json:"content"`
	DirectoryPath *string      `json:"directoryPath"`
	TaskID        *string      `json:"taskId"`
	Runtime       *string      `json:"runtime"`
}

// The result event's members (CodeInterpreterResult).
type (
	resourceContent struct {
		Type     string  `json:"type"`
		URI      *string `json:"uri,omitempty"`
		MimeType *string `json:"mimeType,omitempty"`
		Text     *string `json:"text,omitempty"`
		Blob     []byte  `json:"blob,omitempty"`
	}
	contentBlock struct {
		Type     string           `json:"type"`
		Text     *string          `json:"text,omitempty"`
		Name     *string          `json:"name,omitempty"`
		URI      *string          `json:"uri,omitempty"`
		Size     *int64           `json:"size,omitempty"`
		Resource *resourceContent `json:"resource,omitempty"`
	}
	structured struct {
		TaskID        *string  `json:"taskId,omitempty"`
		TaskStatus    *string  `json:"taskStatus,omitempty"`
		Stdout        *string  `json:"stdout,omitempty"`
		Stderr        *string  `json:"stderr,omitempty"`
		ExitCode      *int     `json:"exitCode,omitempty"`
		ExecutionTime *float64 `json:"executionTime,omitempty"`
	}
	result struct {
		Content           []contentBlock `json:"content"`
		StructuredContent *structured    `json:"structuredContent,omitempty"`
		IsError           *bool          `json:"isError,omitempty"`
	}
)

func ptr[T any](v T) *T { return &v }

func textResult(s string, isErr bool) result {
	return result{Content: []contentBlock{{Type: "text", Text: ptr(s)}}, IsError: ptr(isErr)}
}

func (s *Server) invoke(w http.ResponseWriter, req *request) {
	var in struct {
		Name      string         `json:"name"`
		Arguments *toolArguments `json:"arguments"`
	}
	if !s.decode(w, req, &in) {
		return
	}
	if !tools[in.Name] {
		s.invalid(w, req, "tool %q", in.Name)
		return
	}
	args := in.Arguments
	if args == nil {
		args = &toolArguments{}
	}
	for _, p := range []*string{args.Code, args.Command, args.Path, args.DirectoryPath, args.TaskID} {
		if p != nil && len(*p) > maxString {
			s.invalid(w, req, "an argument of %d characters, over %d", len(*p), maxString)
			return
		}
	}
	id := req.r.Header.Get("X-Amzn-Code-Interpreter-Session-Id")
	if !sessionIDRE.MatchString(id) {
		s.invalid(w, req, "x-amzn-code-interpreter-session-id %q breaks its pattern", id)
		return
	}
	ss := s.lookup(req, id)
	s.mu.Lock()
	ready := ss != nil && ss.status == statusReady
	s.mu.Unlock()
	if !ready {
		writeError(w, "ResourceNotFoundException", 404, "session "+id+" not found or not ready")
		return
	}
	ctx := req.r.Context()
	var res result
	var err error
	switch in.Name {
	case "executeCommand":
		res, err = s.executeCommand(ctx, ss, args)
	case "executeCode":
		res, err = s.executeCode(ctx, ss, args)
	case "startCommandExecution":
		res, err = s.startTask(ctx, ss, args)
	case "getTask":
		res, err = s.getTask(ss, args)
	case "stopTask":
		res, err = s.stopTask(ctx, ss, args)
	case "writeFiles":
		res, err = s.writeFiles(ctx, ss, args)
	case "readFiles":
		res, err = s.readFiles(ctx, ss, args)
	case "listFiles":
		res, err = s.listFiles(ctx, ss, args)
	case "removeFiles":
		res, err = s.removeFiles(ctx, ss, args)
	}
	var bad *badInput
	switch {
	case errors.As(err, &bad):
		s.invalid(w, req, "%s: %s", in.Name, bad.msg)
		return
	case errors.Is(err, errdefs.ErrSandboxLost) || errors.Is(err, errdefs.ErrNotFound) && s.Machine(ss.id) == nil:
		writeError(w, "ResourceNotFoundException", 404, "session "+id+" not found")
		return
	case err != nil:
		res = textResult(oneLine(err.Error()), true)
	}
	payload, err := json.Marshal(res)
	if err != nil {
		writeError(w, "InternalServerException", 500, "encode the result")
		return
	}
	var msg eventstream.Message
	msg.Headers.Set(":event-type", eventstream.StringValue("result"))
	msg.Headers.Set(":message-type", eventstream.StringValue("event"))
	msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	msg.Payload = payload
	var buf bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&buf, msg); err != nil {
		writeError(w, "InternalServerException", 500, "encode the event")
		return
	}
	w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
	w.Header().Set("X-Amzn-Code-Interpreter-Session-Id", id)
	w.WriteHeader(200)
	_, _ = w.Write(buf.Bytes())
}

type badInput struct{ msg string }

func (b *badInput) Error() string { return b.msg }

func bad(format string, args ...any) error { return &badInput{fmt.Sprintf(format, args...)} }

// run runs argv as root in / of the session's machine, to its end,
// with input on its standard input.
func (s *Server) run(ctx context.Context, ss *session, argv []string, input string) (stdout, stderr string, code int, err error) {
	p, err := ss.machine.Start(ctx, remotefake.Command{Argv: argv, Stdin: input != ""})
	if err != nil {
		return "", "", 0, err
	}
	if input != "" {
		go func() {
			_, _ = io.WriteString(p.Stdin(), input)
			p.Stdin().Close()
		}()
	}
	var out, errb bytes.Buffer
	var wg sync.WaitGroup
	wg.Go(func() { copyCapped(&out, p.Stdout(), s.opts.MaxOutput) })
	wg.Go(func() { copyCapped(&errb, p.Stderr(), s.opts.MaxOutput) })
	select {
	case <-p.Done():
	case <-ctx.Done():
		_ = p.Signal(context.Background(), syscall.SIGKILL)
		<-p.Done()
	}
	wg.Wait()
	code, err = p.Wait()
	return out.String(), errb.String(), code, err
}

// copyCapped keeps the first max bytes of r and drops the rest.
func copyCapped(w *bytes.Buffer, r io.Reader, max int) {
	_, _ = io.Copy(w, io.LimitReader(r, int64(max)))
	_, _ = io.Copy(io.Discard, r)
}

func commandResult(stdout, stderr string, code int, took time.Duration) result {
	ms := float64(took) / float64(time.Millisecond)
	return result{
		Content:           []contentBlock{{Type: "text", Text: ptr(stdout)}},
		StructuredContent: &structured{Stdout: ptr(stdout), Stderr: ptr(stderr), ExitCode: ptr(code), ExecutionTime: &ms},
		IsError:           ptr(code != 0),
	}
}

func (s *Server) executeCommand(ctx context.Context, ss *session, args *toolArguments) (result, error) {
	if args.Command == nil || *args.Command == "" {
		return result{}, bad("no command")
	}
	s.ran(*args.Command)
	start := time.Now()
	out, errOut, code, err := s.run(ctx, ss, []string{"/bin/sh", "-c", *args.Command}, "")
	if err != nil {
		return result{}, err
	}
	return commandResult(out, errOut, code, time.Since(start)), nil
}

func (s *Server) executeCode(ctx context.Context, ss *session, args *toolArguments) (result, error) {
	if args.Code == nil {
		return result{}, bad("no code")
	}
	if args.Language != nil && *args.Language != "python" {
		return textResult("the fake runs python alone", true), nil
	}
	start := time.Now()
	out, errOut, code, err := s.run(ctx, ss, []string{"python3", "-"}, *args.Code+"\n")
	if err != nil {
		return result{}, err
	}
	return commandResult(out, errOut, code, time.Since(start)), nil
}

// task is a command of startCommandExecution.
type task struct {
	p        *remotefake.Process
	mu       sync.Mutex
	out, err bytes.Buffer
	status   string
	code     int
}

func (s *Server) startTask(ctx context.Context, ss *session, args *toolArguments) (result, error) {
	if args.Command == nil || *args.Command == "" {
		return result{}, bad("no command")
	}
	s.ran(*args.Command)
	p, err := ss.machine.Start(ctx, remotefake.Command{Argv: []string{"/bin/sh", "-c", *args.Command}})
	if err != nil {
		return result{}, err
	}
	t := &task{p: p, status: "working"}
	id := newID()
	ss.taskMu.Lock()
	ss.tasks[id] = t
	ss.taskMu.Unlock()
	capped := func(b *bytes.Buffer, r io.Reader) {
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			t.mu.Lock()
			if b.Len() < s.opts.MaxOutput {
				b.Write(buf[:min(n, s.opts.MaxOutput-b.Len())])
			}
			t.mu.Unlock()
			if err != nil {
				return
			}
		}
	}
	go capped(&t.out, p.Stdout())
	go capped(&t.err, p.Stderr())
	go func() {
		code, err := p.Wait()
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.status == "working" {
			t.status, t.code = "completed", code
			if err != nil {
				t.status = "failed"
			}
		}
	}()
	return result{
		Content:           []contentBlock{{Type: "text", Text: ptr("started task " + id)}},
		StructuredContent: &structured{TaskID: ptr(id), TaskStatus: ptr("working")},
		IsError:           ptr(false),
	}, nil
}

func (ss *session) task(args *toolArguments) (string, *task, error) {
	if args.TaskID == nil {
		return "", nil, bad("no taskId")
	}
	ss.taskMu.Lock()
	defer ss.taskMu.Unlock()
	t := ss.tasks[*args.TaskID]
	if t == nil {
		return "", nil, fmt.Errorf("no task %s", *args.TaskID)
	}
	return *args.TaskID, t, nil
}

func (s *Server) getTask(ss *session, args *toolArguments) (result, error) {
	id, t, err := ss.task(args)
	if err != nil {
		return result{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := &structured{TaskID: ptr(id), TaskStatus: ptr(t.status), Stdout: ptr(t.out.String()), Stderr: ptr(t.err.String())}
	if t.status != "working" {
		st.ExitCode = ptr(t.code)
	}
	return result{Content: []contentBlock{{Type: "text", Text: ptr(t.status)}}, StructuredContent: st, IsError: ptr(false)}, nil
}

func (s *Server) stopTask(ctx context.Context, ss *session, args *toolArguments) (result, error) {
	id, t, err := ss.task(args)
	if err != nil {
		return result{}, err
	}
	t.mu.Lock()
	if t.status == "working" {
		t.status = "canceled"
	}
	t.mu.Unlock()
	_ = t.p.Signal(ctx, syscall.SIGKILL)
	return result{Content: []contentBlock{{Type: "text", Text: ptr("stopped " + id)}},
		StructuredContent: &structured{TaskID: ptr(id), TaskStatus: ptr("canceled")}, IsError: ptr(false)}, nil
}

func checkPath(p string) (string, error) {
	if p == "" || len(p) > 4096 || strings.ContainsRune(p, 0) {
		return "", bad("path %q", p)
	}
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // relative to the session's root, as the fake's working directory
	}
	return path.Clean(p), nil
}

func (s *Server) writeFiles(ctx context.Context, ss *session, args *toolArguments) (result, error) {
	if len(args.Content) == 0 {
		return result{}, bad("no content")
	}
	total := 0
	for _, b := range args.Content {
		if b.Path == nil {
			return result{}, bad("a content block with no path")
		}
		if (b.Text == nil) == (b.Blob == nil) {
			return result{}, bad("content for %s: text or blob, one of them", *b.Path)
		}
		total += len(b.Blob)
		if b.Text != nil {
			total += len(*b.Text)
		}
	}
	if total > maxInline {
		return result{}, bad("%d bytes of files inline, over %d", total, maxInline)
	}
	var wrote []string
	for _, b := range args.Content {
		p, err := checkPath(*b.Path)
		if err != nil {
			return result{}, err
		}
		data := b.Blob
		if b.Text != nil {
			data = []byte(*b.Text)
		}
		if err := ss.machine.WriteFile(ctx, p, bytes.NewReader(data), 0o644); err != nil {
			return textResult("write "+p+": "+oneLine(err.Error()), true), nil
		}
		wrote = append(wrote, p)
	}
	return textResult("Successfully wrote "+strings.Join(wrote, ", "), false), nil
}

// maxRead bounds a file readFiles returns.
const maxRead = 100 << 20

func (s *Server) readFiles(ctx context.Context, ss *session, args *toolArguments) (result, error) {
	if len(args.Paths) == 0 {
		return result{}, bad("no paths")
	}
	var res result
	res.IsError = ptr(false)
	for _, raw := range args.Paths {
		p, err := checkPath(raw)
		if err != nil {
			return result{}, err
		}
		r, err := ss.machine.ReadFile(ctx, p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errdefs.ErrNotFound) {
				return textResult("No such file: "+p, true), nil
			}
			return result{}, err
		}
		data, err := io.ReadAll(io.LimitReader(r, maxRead+1))
		r.Close()
		if err != nil {
			return result{}, err
		}
		if len(data) > maxRead {
			return textResult("file too large: "+p, true), nil
		}
		rc := &resourceContent{Type: "blob", URI: ptr("file://" + p), Blob: data}
		if json.Valid(data) || isText(data) {
			rc = &resourceContent{Type: "text", URI: ptr("file://" + p), Text: ptr(string(data))}
		}
		res.Content = append(res.Content, contentBlock{Type: "resource", Resource: rc})
	}
	return res, nil
}

func isText(b []byte) bool {
	return !bytes.ContainsRune(b, 0) && strings.ToValidUTF8(string(b), "\uFFFD") == string(b)
}

func (s *Server) listFiles(ctx context.Context, ss *session, args *toolArguments) (result, error) {
	dir := "/"
	if args.DirectoryPath != nil {
		var err error
		if dir, err = checkPath(*args.DirectoryPath); err != nil {
			return result{}, err
		}
	}
	out, _, code, err := s.run(ctx, ss, []string{"find", dir, "-mindepth", "1", "-maxdepth", "1", "-printf", "%s %f\\n"}, "")
	if err != nil {
		return result{}, err
	}
	if code != 0 {
		return textResult("No such directory: "+dir, true), nil
	}
	res := result{IsError: ptr(false), Content: []contentBlock{}}
	for line := range strings.Lines(out) {
		var size int64
		var name string
		if _, err := fmt.Sscanf(strings.TrimSuffix(line, "\n"), "%d %s", &size, &name); err != nil {
			continue
		}
		res.Content = append(res.Content, contentBlock{Type: "resource_link", Name: ptr(name), URI: ptr("file://" + path.Join(dir, name)), Size: ptr(size)})
	}
	return res, nil
}

func (s *Server) removeFiles(ctx context.Context, ss *session, args *toolArguments) (result, error) {
	if len(args.Paths) == 0 {
		return result{}, bad("no paths")
	}
	argv := []string{"rm", "-rf", "--"}
	for _, raw := range args.Paths {
		p, err := checkPath(raw)
		if err != nil {
			return result{}, err
		}
		argv = append(argv, p)
	}
	if _, errOut, code, err := s.run(ctx, ss, argv, ""); err != nil || code != 0 {
		if err != nil {
			return result{}, err
		}
		return textResult(oneLine(errOut), true), nil
	}
	return textResult("Removed "+strings.Join(args.Paths, ", "), false), nil
}

func oneLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}
