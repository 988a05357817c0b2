package agentcore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	ac "github.com/aws/aws-sdk-go-v2/service/bedrockagentcore"
	"github.com/aws/aws-sdk-go-v2/service/bedrockagentcore/types"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/remote"
)

// API is AgentCore's Code Interpreter as a remote.API and
// remote.Checker.
type API struct {
	cfg Config
	c   *ac.Client
	log *slog.Logger
	// The credentials' secrets, kept out of every error.
	secretKey, accessKey string

	mu    sync.Mutex
	known map[string]known // by session id
	named map[string]string
}

// known is what the API has read of one session: its labels file.
type known struct {
	name    string
	labels  map[string]string
	timeout time.Duration
}

var (
	_ remote.API     = (*API)(nil)
	_ remote.Checker = (*API)(nil)
)

// Paths in a session. dir is root's alone once the daemon is uploaded:
// the relay's socket, the daemon's start file and the labels are in it.
const (
	dir        = "/opt/berth-agentcore"
	labelsFile = dir + "/labels.json"
	startFile  = dir + "/start.env"
	socket     = dir + "/relay.sock"
)

// Bounds of the service (its API reference and developer guide).
const (
	// MaxLifetime is the longest session: a session ends at its
	// timeout, whatever it does, and cannot be kept alive.
	MaxLifetime = 8 * time.Hour
	// minTimeout is the shortest session timeout the service takes.
	// (It recommends 60 s; a sandbox's lifetime shorter than that is
	// the session's all the same, so that the session ends with it.)
	minTimeout = time.Second
	maxName    = 100
	listPage   = 100
	maxPages   = 50
	maxLabels  = 64
	// maxLabelsFile bounds the labels file List reads of each session.
	maxLabelsFile = 64 << 10
	// maxUpload bounds a file Upload sends (the daemon is a few MiB).
	maxUpload = 64 << 20
	// maxResult bounds what the API reads of one tool's result.
	maxResult = 4 << 20
	// callTimeout bounds one call of the service but the relay's.
	callTimeout = time.Minute
)

var identifierRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// New returns the API over AgentCore, its credentials and region from
// the AWS default chain as cfg narrows it.
func New(ctx context.Context, cfg Config) (*API, error) {
	if cfg.Identifier == "" {
		cfg.Identifier = DefaultIdentifier
	}
	if cfg.DaemonPath == "" {
		cfg.DaemonPath = remote.DefaultRemotePath
	}
	if cfg.MaxLifetime <= 0 || cfg.MaxLifetime > MaxLifetime {
		cfg.MaxLifetime = MaxLifetime
	}
	if cfg.UploadChunk <= 0 {
		cfg.UploadChunk = DefaultUploadChunk
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var opts []func(*awsconfig.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	if cfg.Profile != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(cfg.Profile))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: the AWS configuration: %s", errdefs.ErrBadInput, Name, firstLine(err.Error()))
	}
	if awsCfg.Region == "" {
		return nil, fmt.Errorf("%w: %s: no region (set the region setting, or AWS_REGION)", errdefs.ErrBadInput, Name)
	}
	a := &API{cfg: cfg, log: cfg.Logger, known: map[string]known{}, named: map[string]string{}}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	creds, err := awsCfg.Credentials.Retrieve(cctx)
	cancel()
	if err != nil || !creds.HasKeys() {
		return nil, fmt.Errorf("%w: %s: no AWS credentials in the default chain", errdefs.ErrProviderAuth, Name)
	}
	a.secretKey, a.accessKey = creds.SecretAccessKey, creds.AccessKeyID
	a.c = ac.NewFromConfig(awsCfg, func(o *ac.Options) {
		if cfg.EndpointURL != "" {
			o.BaseEndpoint = aws.String(cfg.EndpointURL)
		}
	})
	return a, nil
}

// Name implements remote.API.
func (a *API) Name() string { return Name }

func (a *API) classify(op string, err error) error {
	return classify(op, err, a.secretKey, a.accessKey)
}

// clientToken is the idempotency token of one Create's start of a
// session: the SDK's retries of the start, after a lost answer, carry
// it and make no second session. It is new for every Create: a token
// the service has seen answers the session it made then, which may
// have ended since (a sandbox destroyed and made again under its
// name); a Create retried by berth finds the session by name instead.
func clientToken() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return "berth-" + hex.EncodeToString(b)
}

// labelsDoc is the labels file of a session.
type labelsDoc struct {
	Labels  map[string]string `json:"labels"`
	Timeout int64             `json:"timeout_seconds"`
}

// Create implements remote.API. A session of that name that is ready
// is a retry's: it is the one returned (its labels written if the first
// Create did not get to it). The session's timeout is the lifetime,
// at most MaxLifetime.
func (a *API) Create(ctx context.Context, req remote.CreateRequest) (remote.Machine, error) {
	switch {
	case len(req.Name) == 0 || len(req.Name) > maxName:
		return remote.Machine{}, fmt.Errorf("%w: %s: a session's name has 1 to %d characters", errdefs.ErrBadInput, Name, maxName)
	case len(req.Labels) > maxLabels:
		return remote.Machine{}, fmt.Errorf("%w: %s: %d labels, at most %d", errdefs.ErrBadInput, Name, len(req.Labels), maxLabels)
	case req.Image != "" && req.Image != a.cfg.Identifier:
		return remote.Machine{}, fmt.Errorf("%w: %s: a session runs the code interpreter %s, no image of its own", errdefs.ErrUnsupported, Name, a.cfg.Identifier)
	case req.CPU > 0 || req.Memory > 0 || req.Disk > 0:
		return remote.Machine{}, fmt.Errorf("%w: %s: a session has its code interpreter's size", errdefs.ErrUnsupported, Name)
	}
	timeout := min(max(req.Lifetime, minTimeout), a.cfg.MaxLifetime)
	timeout = (timeout + time.Second - 1).Truncate(time.Second)
	doc := labelsDoc{Labels: maps.Clone(req.Labels), Timeout: int64(timeout / time.Second)}
	sum, err := a.byName(ctx, req.Name)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return remote.Machine{}, err
	}
	if err != nil {
		out, serr := a.c.StartCodeInterpreterSession(ctx, &ac.StartCodeInterpreterSessionInput{
			CodeInterpreterIdentifier: &a.cfg.Identifier,
			Name:                      &req.Name,
			SessionTimeoutSeconds:     aws.Int32(int32(timeout / time.Second)),
			ClientToken:               aws.String(clientToken()),
		})
		if serr != nil {
			serr = a.classify("start session", serr)
			if !errors.Is(serr, errdefs.ErrAlreadyExists) {
				return remote.Machine{}, serr
			}
			if sum, err = a.byName(ctx, req.Name); err != nil {
				return remote.Machine{}, err
			}
		} else {
			sum = types.CodeInterpreterSessionSummary{SessionId: out.SessionId, CreatedAt: out.CreatedAt, Name: &req.Name, Status: types.CodeInterpreterSessionStatusReady}
		}
	} else if k, ok := a.cached(aws.ToString(sum.SessionId)); ok {
		return a.machine(sum, k), nil
	} else if k, err := a.readLabels(ctx, sum); err == nil {
		return a.machine(sum, k), nil
	}
	id := aws.ToString(sum.SessionId)
	b, err := json.Marshal(doc)
	if err != nil {
		return remote.Machine{}, err
	}
	if _, err := a.invoke(ctx, "write labels", id, types.ToolNameWriteFiles, &types.ToolArguments{
		Content: []types.InputContentBlock{{Path: aws.String(labelsFile), Text: aws.String(string(b))}},
	}); err != nil {
		return remote.Machine{}, err
	}
	k := known{name: req.Name, labels: doc.Labels, timeout: timeout}
	a.remember(id, k)
	return a.machine(sum, k), nil
}

// byName finds the ready session named name: the newest, should a
// retry of the service have made two.
func (a *API) byName(ctx context.Context, name string) (types.CodeInterpreterSessionSummary, error) {
	var found types.CodeInterpreterSessionSummary
	err := a.each(ctx, func(s types.CodeInterpreterSessionSummary) bool {
		if aws.ToString(s.Name) == name && (found.CreatedAt == nil || s.CreatedAt != nil && s.CreatedAt.After(*found.CreatedAt)) {
			found = s
		}
		return true
	})
	if err != nil {
		return found, err
	}
	if found.SessionId == nil {
		return found, fmt.Errorf("%w: %s: no session named %q", errdefs.ErrNotFound, Name, name)
	}
	return found, nil
}

// each calls f with every ready session of the code interpreter, page
// by page, until f returns false.
func (a *API) each(ctx context.Context, f func(types.CodeInterpreterSessionSummary) bool) error {
	var next *string
	for range maxPages {
		out, err := a.c.ListCodeInterpreterSessions(ctx, &ac.ListCodeInterpreterSessionsInput{
			CodeInterpreterIdentifier: &a.cfg.Identifier,
			MaxResults:                aws.Int32(listPage),
			NextToken:                 next,
			Status:                    types.CodeInterpreterSessionStatusReady,
		})
		if err != nil {
			return a.classify("list sessions", err)
		}
		for _, s := range out.Items {
			if s.Status != types.CodeInterpreterSessionStatusReady || s.SessionId == nil {
				continue
			}
			if !f(s) {
				return nil
			}
		}
		if out.NextToken == nil || *out.NextToken == "" || len(out.Items) == 0 {
			return nil
		}
		next = out.NextToken
	}
	return fmt.Errorf("%w: %s: more than %d sessions", errdefs.ErrProviderUnavailable, Name, listPage*maxPages)
}

func (a *API) cached(id string) (known, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k, ok := a.known[id]
	return k, ok
}

func (a *API) remember(id string, k known) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.known[id] = k
	a.named[k.name] = id
}

func (a *API) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if k, ok := a.known[id]; ok && a.named[k.name] == id {
		delete(a.named, k.name)
	}
	delete(a.known, id)
}

// readLabels reads the labels file of session s: one that has none is
// no session of berth's (or one whose Create was cut short).
func (a *API) readLabels(ctx context.Context, s types.CodeInterpreterSessionSummary) (known, error) {
	id := aws.ToString(s.SessionId)
	res, err := a.invoke(ctx, "read labels", id, types.ToolNameReadFiles, &types.ToolArguments{Paths: []string{labelsFile}})
	if err != nil {
		return known{}, err
	}
	var raw []byte
	for _, c := range res.Content {
		switch {
		case c.Resource != nil && c.Resource.Text != nil:
			raw = []byte(*c.Resource.Text)
		case c.Resource != nil && c.Resource.Blob != nil:
			raw = c.Resource.Blob
		}
	}
	if raw == nil || aws.ToBool(res.IsError) {
		return known{}, fmt.Errorf("%w: %s: session %s has no labels", errdefs.ErrNotFound, Name, id)
	}
	if len(raw) > maxLabelsFile {
		return known{}, fmt.Errorf("%w: %s: session %s: a labels file of %d bytes", errdefs.ErrBadInput, Name, id, len(raw))
	}
	var doc labelsDoc
	if err := json.Unmarshal(raw, &doc); err != nil || len(doc.Labels) > maxLabels {
		return known{}, fmt.Errorf("%w: %s: session %s: its labels file is not berth's", errdefs.ErrNotFound, Name, id)
	}
	k := known{name: aws.ToString(s.Name), labels: doc.Labels, timeout: time.Duration(doc.Timeout) * time.Second}
	a.remember(id, k)
	return k, nil
}

// machine is session s, its labels k, as package remote sees it.
func (a *API) machine(s types.CodeInterpreterSessionSummary, k known) remote.Machine {
	m := remote.Machine{ID: aws.ToString(s.SessionId), Name: aws.ToString(s.Name), Labels: maps.Clone(k.labels), State: remote.MachineRunning}
	if s.CreatedAt != nil {
		m.CreatedAt = *s.CreatedAt
		if k.timeout > 0 {
			m.ExpiresAt = m.CreatedAt.Add(k.timeout)
		}
	}
	if s.Status != types.CodeInterpreterSessionStatusReady {
		m.State = remote.MachineStopped
	}
	return m
}

// Find implements remote.API: the session the API knows by the name is
// asked for (one call), else the ready sessions are listed.
func (a *API) Find(ctx context.Context, name string) (remote.Machine, error) {
	a.mu.Lock()
	id, ok := a.named[name]
	k := a.known[id]
	a.mu.Unlock()
	if ok {
		out, err := a.c.GetCodeInterpreterSession(ctx, &ac.GetCodeInterpreterSessionInput{CodeInterpreterIdentifier: &a.cfg.Identifier, SessionId: &id})
		err = a.classify("get session", err)
		switch {
		case err == nil && out.Status == types.CodeInterpreterSessionStatusReady && aws.ToString(out.Name) == name:
			return a.machine(types.CodeInterpreterSessionSummary{SessionId: out.SessionId, Name: out.Name, CreatedAt: out.CreatedAt, Status: out.Status}, k), nil
		case err != nil && !errors.Is(err, errdefs.ErrNotFound):
			return remote.Machine{}, err
		}
		a.forget(id)
	}
	s, err := a.byName(ctx, name)
	if err != nil {
		return remote.Machine{}, err
	}
	k, ok = a.cached(aws.ToString(s.SessionId))
	if !ok {
		if k, err = a.readLabels(ctx, s); err != nil {
			return remote.Machine{}, err
		}
	}
	return a.machine(s, k), nil
}

// listReads bounds the labels files List reads at once.
const listReads = 8

// List implements remote.API: the ready sessions whose names are
// berth's, with their labels files read once each.
func (a *API) List(ctx context.Context, labels map[string]string) ([]remote.Machine, error) {
	var sums []types.CodeInterpreterSessionSummary
	if err := a.each(ctx, func(s types.CodeInterpreterSessionSummary) bool {
		if strings.HasPrefix(aws.ToString(s.Name), remote.NamePrefix) {
			sums = append(sums, s)
		}
		return true
	}); err != nil {
		return nil, err
	}
	out := make([]remote.Machine, len(sums))
	keep := make([]bool, len(sums))
	var wg sync.WaitGroup
	slots := make(chan struct{}, listReads)
	for i, s := range sums {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			k, ok := a.cached(aws.ToString(s.SessionId))
			if !ok {
				var err error
				if k, err = a.readLabels(ctx, s); err != nil {
					return // not berth's, or gone meanwhile
				}
			}
			for key, v := range labels {
				if k.labels[key] != v {
					return
				}
			}
			out[i], keep[i] = a.machine(s, k), true
		})
	}
	wg.Wait()
	var ms []remote.Machine
	for i := range out {
		if keep[i] {
			ms = append(ms, out[i])
		}
	}
	return ms, nil
}

// Delete implements remote.API: the session is stopped.
func (a *API) Delete(ctx context.Context, m remote.Machine) error {
	_, err := a.c.StopCodeInterpreterSession(ctx, &ac.StopCodeInterpreterSessionInput{CodeInterpreterIdentifier: &a.cfg.Identifier, SessionId: &m.ID})
	a.forget(m.ID)
	if err := a.classify("stop session", err); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

// Upload implements remote.API: the file goes in writeFiles of at most
// Config.UploadChunk bytes each, beside its path, and one command joins
// them, sets the mode and moves the file into place (so that a daemon
// running from the path is not written over), and makes the API's
// directory root's alone.
func (a *API) Upload(ctx context.Context, m remote.Machine, p string, r io.Reader) error {
	if !path.IsAbs(p) || strings.ContainsAny(p, "'\n") {
		return fmt.Errorf("%w: %s: upload path %q", errdefs.ErrBadInput, Name, p)
	}
	data, err := io.ReadAll(io.LimitReader(r, maxUpload+1))
	if err != nil {
		return fmt.Errorf("%s: upload %s: %w", Name, p, err)
	}
	if len(data) > maxUpload {
		return fmt.Errorf("%w: %s: upload %s: more than %d MiB", errdefs.ErrBadInput, Name, p, maxUpload>>20)
	}
	var parts []string
	for i := 0; i == 0 || i*a.cfg.UploadChunk < len(data); i++ {
		part := p + ".part" + strconv.Itoa(i)
		chunk := data[i*a.cfg.UploadChunk : min((i+1)*a.cfg.UploadChunk, len(data))]
		if _, err := a.invoke(ctx, "upload "+path.Base(p), m.ID, types.ToolNameWriteFiles, &types.ToolArguments{
			Content: []types.InputContentBlock{{Path: aws.String(part), Blob: chunk}},
		}); err != nil {
			return err
		}
		parts = append(parts, shellQuote(part))
	}
	tmp := shellQuote(p + ".new")
	cmd := fmt.Sprintf("set -e; install -d -m 0700 %s; cat %s > %s; rm -f %s; chmod 0755 %s; mv -f %s %s",
		dir, strings.Join(parts, " "), tmp, strings.Join(parts, " "), tmp, tmp, shellQuote(p))
	res, err := a.command(ctx, "install "+path.Base(p), m.ID, cmd)
	if err != nil {
		return err
	}
	if res.code != 0 {
		return fmt.Errorf("%s: install %s: exit %d: %s", Name, path.Base(p), res.code, firstLine(res.stderr))
	}
	return nil
}

// Start implements remote.API. env goes in a file of the API's
// directory, root's alone, that the command sources and removes, so
// that no command's text nor argv holds it; the relay's server starts
// first, beside the daemon rather than its child (a pause of the daemon
// stops only its descendants), and the daemon runs on as the task of a
// startCommandExecution.
func (a *API) Start(ctx context.Context, m remote.Machine, argv []string, env map[string]string) error {
	if len(argv) == 0 {
		return fmt.Errorf("%w: %s: no command", errdefs.ErrBadInput, Name)
	}
	port := ""
	for i, arg := range argv {
		if arg == "--listen" && i+1 < len(argv) {
			_, port, _ = strings.Cut(argv[i+1], ":")
		}
	}
	if _, err := strconv.Atoi(port); err != nil {
		return fmt.Errorf("%w: %s: the daemon's command names no --listen :PORT", errdefs.ErrBadInput, Name)
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !validEnvName(k) {
			return fmt.Errorf("%w: %s: environment variable name %q", errdefs.ErrBadInput, Name, k)
		}
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(env[k]))
	}
	if _, err := a.invoke(ctx, "write the start file", m.ID, types.ToolNameWriteFiles, &types.ToolArguments{
		Content: []types.InputContentBlock{{Path: aws.String(startFile), Text: aws.String(b.String())}},
	}); err != nil {
		return err
	}
	quoted := make([]string, len(argv))
	for i, arg := range argv {
		quoted[i] = shellQuote(arg)
	}
	cmd := fmt.Sprintf("cd / && . %s && rm -f %s && "+
		"( nohup %s relay serve --socket %s --target 127.0.0.1:%s </dev/null >/dev/null 2>&1 & ) && "+
		"exec %s </dev/null >/dev/null 2>&1",
		startFile, startFile, shellQuote(a.cfg.DaemonPath), socket, port, strings.Join(quoted, " "))
	if _, err := a.invoke(ctx, "start the daemon", m.ID, types.ToolNameStartCommandExecution, &types.ToolArguments{Command: &cmd}); err != nil {
		return err
	}
	return nil
}

// KeepAlive implements remote.API: a session cannot be kept past its
// timeout, which Create set to the lifetime (at most MaxLifetime).
func (a *API) KeepAlive(ctx context.Context, m remote.Machine, d time.Duration) error { return nil }

// Check implements remote.Checker: the cheapest listing there is.
func (a *API) Check(ctx context.Context) error {
	_, err := a.c.ListCodeInterpreterSessions(ctx, &ac.ListCodeInterpreterSessionsInput{
		CodeInterpreterIdentifier: &a.cfg.Identifier, MaxResults: aws.Int32(1),
	})
	return a.classify("list sessions", err)
}

// invoke calls one tool in session id and gathers its result events.
func (a *API) invoke(ctx context.Context, op, id string, tool types.ToolName, args *types.ToolArguments) (*types.CodeInterpreterResult, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, callTimeout)
		defer cancel()
	}
	out, err := a.c.InvokeCodeInterpreter(ctx, &ac.InvokeCodeInterpreterInput{
		CodeInterpreterIdentifier: &a.cfg.Identifier, SessionId: &id, Name: tool, Arguments: args,
	})
	if err != nil {
		return nil, a.classify(op, err)
	}
	stream := out.GetStream()
	defer stream.Close()
	res := &types.CodeInterpreterResult{}
	var stdout, stderr bytes.Buffer
	size := 0
	for ev := range stream.Events() {
		r, ok := ev.(*types.CodeInterpreterStreamOutputMemberResult)
		if !ok {
			continue
		}
		v := r.Value
		for _, c := range v.Content {
			size += len(aws.ToString(c.Text)) + len(c.Data)
			if c.Resource != nil {
				size += len(aws.ToString(c.Resource.Text)) + len(c.Resource.Blob)
			}
		}
		if sc := v.StructuredContent; sc != nil {
			stdout.WriteString(aws.ToString(sc.Stdout))
			stderr.WriteString(aws.ToString(sc.Stderr))
			size += len(aws.ToString(sc.Stdout)) + len(aws.ToString(sc.Stderr))
			if res.StructuredContent == nil {
				res.StructuredContent = &types.ToolResultStructuredContent{}
			}
			if sc.ExitCode != nil {
				res.StructuredContent.ExitCode = sc.ExitCode
			}
			if sc.TaskId != nil {
				res.StructuredContent.TaskId, res.StructuredContent.TaskStatus = sc.TaskId, sc.TaskStatus
			}
		}
		if size > maxResult+MaxRelayReply {
			return nil, fmt.Errorf("%w: %s: %s: a result of more than %d bytes", errdefs.ErrProviderUnavailable, Name, op, maxResult+MaxRelayReply)
		}
		res.Content = append(res.Content, v.Content...)
		if v.IsError != nil {
			res.IsError = v.IsError
		}
	}
	if err := stream.Err(); err != nil {
		return nil, a.classify(op, err)
	}
	if res.StructuredContent != nil {
		res.StructuredContent.Stdout = aws.String(stdout.String())
		res.StructuredContent.Stderr = aws.String(stderr.String())
	}
	return res, nil
}

// commandResult is what executeCommand says of a command.
type commandResult struct {
	stdout, stderr string
	code           int
}

// command runs cmd in session id with executeCommand.
func (a *API) command(ctx context.Context, op, id, cmd string) (commandResult, error) {
	res, err := a.invoke(ctx, op, id, types.ToolNameExecuteCommand, &types.ToolArguments{Command: &cmd})
	if err != nil {
		return commandResult{}, err
	}
	var out commandResult
	if sc := res.StructuredContent; sc != nil {
		out.stdout, out.stderr = aws.ToString(sc.Stdout), aws.ToString(sc.Stderr)
		if sc.ExitCode != nil {
			out.code = int(*sc.ExitCode)
		} else if aws.ToBool(res.IsError) {
			out.code = -1
		}
		return out, nil
	}
	// A result with no structured content: its text is the output.
	for _, c := range res.Content {
		if c.Type == types.ContentBlockTypeText {
			out.stdout += aws.ToString(c.Text)
		}
	}
	if aws.ToBool(res.IsError) {
		out.code, out.stderr, out.stdout = -1, out.stdout, ""
	}
	return out, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

func validEnvName(k string) bool {
	if k == "" || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for _, r := range k {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
