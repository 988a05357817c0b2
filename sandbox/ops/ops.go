// Package ops holds the Updates any workflow that owns a sandbox serves
// to let clients run commands and move files in it: exec, write_files,
// import, read_file, list_files, export and remove, with their
// validators; and signal and attach, which signal and follow a command
// by its id, the id of the exec Update that runs it. It is layer 3 of berth, beside the handle it drives
// (package sandbox): the standalone Sandbox workflow (package workflows)
// and the coding agent's Session (package agent) register the same
// Updates, under the same names and with the same JSON, so that one
// client drives either.
//
//	o, err := ops.Register(ctx, ops.Owner{Sandbox: func() *sandbox.Sandbox { return sbx }})
//
// A workflow that registers them must also serve the sandbox's blobs and
// take uploads through the relay (relay.Serve, package transfer/relay, with Uploads), and say
// which commands run (Ops.Running) to front ends that follow their
// output live.
package ops

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/transfer"
)

// The Updates' names. Arguments and results are JSON; see
// docs/protocol.md, "Commands and files".
const (
	UpdateExec       = "berth.exec"        // ExecRequest -> RunOutput
	UpdateWriteFiles = "berth.write_files" // WriteFilesRequest -> nothing
	UpdateImport     = "berth.import"      // ImportRequest -> nothing
	UpdateReadFile   = "berth.read_file"   // PathRequest -> transfer.Output
	UpdateListFiles  = "berth.list_files"  // PathRequest -> []provider.FileInfo
	UpdateExport     = "berth.export"      // PathRequest -> transfer.Output (a tar in the blob store)
	UpdateRemove     = "berth.remove"      // PathRequest -> nothing
)

// QuerySandbox is the Query a workflow that registers the Updates
// answers with its sandbox's state: a Status, or a struct that holds
// its fields and more (the standalone sandbox's adds its settings).
const QuerySandbox = "berth.sandbox"

// Status is a sandbox's state as QuerySandbox answers it.
type Status struct {
	sandbox.Status
	// Created is when the workflow's sandbox was asked for, when the
	// workflow keeps it.
	Created time.Time `json:"created,omitzero"`
	// Running lists the commands the Updates run, for front ends that
	// follow their output live.
	Running []CommandStatus `json:"running,omitempty"`
}

// ExecRequest is a command. Exactly one of Argv and Shell is set.
type ExecRequest struct {
	Argv    []string          `json:"argv,omitempty"`
	Shell   string            `json:"shell,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Dir     string            `json:"dir,omitempty"`
	Timeout time.Duration     `json:"timeout,omitempty"` // nanoseconds
	Stdin   []byte            `json:"stdin,omitempty"`   // base64
	// MaxOutput caps what is stored of each output stream; zero means
	// transfer.DefaultMaxOutput.
	MaxOutput int64 `json:"max_output,omitempty"`
	// TTY runs the command on a terminal of this size; see terminal.go.
	TTY *provider.TerminalSize `json:"tty,omitempty"`
}

// RunOutput is what became of a command. Kind names why the command did
// not run to its own end, when it did not (a errdefs.Kind: Timeout,
// OutOfMemory, CommandNotFound...).
type RunOutput struct {
	ExitCode int             `json:"exit_code"`
	Signal   string          `json:"signal,omitempty"`
	Kind     errdefs.Kind    `json:"kind,omitempty"`
	Message  string          `json:"message,omitempty"`
	Stdout   transfer.Output `json:"stdout"`
	Stderr   transfer.Output `json:"stderr"`
	Duration time.Duration   `json:"duration"`
	Sandbox  string          `json:"sandbox"`
}

// WriteFilesRequest carries files inline, at most
// transfer.MaxInlineFiles bytes in all.
type WriteFilesRequest struct {
	Files []provider.File `json:"files"`
}

// ImportRequest names a tar stream a front end stored in the output blob
// store, under the workflow's transfer.UploadPrefix (through the relay:
// see the SDK, package berth), to unpack into the workspace. Parts is the
// number of parts it is stored in; zero means one object.
type ImportRequest struct {
	Blob  string `json:"blob"`
	Parts int    `json:"parts,omitempty"`
}

// PathRequest names a workspace path.
type PathRequest struct {
	Path string `json:"path"`
}

// CommandStatus says where a running command's output is stored.
type CommandStatus struct {
	Update  string `json:"update"` // the id of the update that runs it: the command's id
	Command string `json:"command"`
	Stdout  string `json:"stdout"` // blob keys
	Stderr  string `json:"stderr"`
}

// Owner is what a workflow gives Register of itself.
type Owner struct {
	// Sandbox returns the workflow's handle, nil while it is being
	// made: operations that come then wait for it. It is asked at each
	// operation, so a workflow may change its handle.
	Sandbox func() *sandbox.Sandbox
	// Open refuses operations, in their validators, once the workflow
	// takes no more (it stops, it ends): a typed error (sandbox.Failure).
	// Nil means always open.
	Open func() error
	// Using, when set, is called as each operation starts to use the
	// sandbox.
	Using func(ctx workflow.Context)
	// Ended are the commands that ended in the workflow's run before,
	// as Ops.Ended gave them, for berth.attach.
	Ended []EndedCommand
}

// Ops are the operations a workflow registered, and the commands they
// run.
type Ops struct {
	owner   Owner
	running map[string]CommandStatus // by update id; Command empty until sent to the sandbox
	ended   []EndedCommand           // the last that ended, oldest first
}

// Register registers the Updates for the workflow's sandbox. Call it
// first thing, in every run (a run continued as new calls it again).
func Register(ctx workflow.Context, owner Owner) (*Ops, error) {
	if owner.Open == nil {
		owner.Open = func() error { return nil }
	}
	o := &Ops{owner: owner, running: map[string]CommandStatus{}, ended: owner.Ended}
	handlers := []struct {
		name      string
		handler   any
		validator any
	}{
		{UpdateExec, o.exec, o.validateExec},
		{UpdateWriteFiles, o.writeFiles, o.validateWriteFiles},
		{UpdateImport, o.importBlob, o.validateImport},
		{UpdateReadFile, o.readFile, o.validatePath},
		{UpdateListFiles, o.listFiles, o.validatePath},
		{UpdateExport, o.export, o.validatePath},
		{UpdateRemove, o.remove, o.validatePath},
		{UpdateSignal, o.signal, o.validateSignal},
		{UpdateAttach, o.attach, o.validateAttach},
	}
	for _, h := range handlers {
		err := workflow.SetUpdateHandlerWithOptions(ctx, h.name, h.handler,
			workflow.UpdateHandlerOptions{Validator: h.validator})
		if err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Running lists the commands under way that were sent to the sandbox,
// by id.
func (o *Ops) Running() []CommandStatus {
	var rs []CommandStatus
	for _, c := range o.running {
		if c.Command != "" {
			rs = append(rs, c)
		}
	}
	slices.SortFunc(rs, func(a, b CommandStatus) int { return strings.Compare(a.Update, b.Update) })
	return rs
}

// Validators reject what would fail anyway before it enters history.

func (o *Ops) validateExec(ctx workflow.Context, req ExecRequest) error {
	if err := o.owner.Open(); err != nil {
		return err
	}
	if err := validateTerminal(req); err != nil {
		return sandbox.Failure(err)
	}
	return sandbox.Failure(provider.ValidateExec(provider.ExecRequest{Argv: req.Argv, Shell: req.Shell,
		Env: req.Env, Dir: req.Dir, Timeout: req.Timeout, TTY: req.TTY}))
}

func (o *Ops) validateWriteFiles(ctx workflow.Context, req WriteFilesRequest) error {
	if err := o.owner.Open(); err != nil {
		return err
	}
	return sandbox.Failure(ValidateFiles(req.Files))
}

func (o *Ops) validateImport(ctx workflow.Context, req ImportRequest) error {
	if err := o.owner.Open(); err != nil {
		return err
	}
	if err := transfer.CheckUpload(req.Blob); err != nil {
		return sandbox.Failure(fmt.Errorf("%w: %v", errdefs.ErrBadInput, err))
	}
	// Only what was uploaded for this workflow: not another's.
	own, err := transfer.UploadPrefix(workflow.GetInfo(ctx).WorkflowExecution.ID)
	if err != nil || !strings.HasPrefix(req.Blob, own) {
		return sandbox.Failure(fmt.Errorf("%w: %s is not an upload of this sandbox's", errdefs.ErrBadInput, req.Blob))
	}
	return nil
}

func (o *Ops) validatePath(ctx workflow.Context, req PathRequest) error {
	if err := o.owner.Open(); err != nil {
		return err
	}
	if _, err := provider.WorkspacePath(req.Path); err != nil {
		return sandbox.Failure(err)
	}
	return nil
}

// ValidateFiles checks files to write: their paths stay in the
// workspace, and they fit in history.
func ValidateFiles(files []provider.File) error {
	total := 0
	for _, f := range files {
		if _, err := provider.WorkspacePath(f.Path); err != nil {
			return err
		}
		total += len(f.Data)
	}
	if total > transfer.MaxInlineFiles {
		return fmt.Errorf("%w: %d bytes of files through workflow history; at most %d", errdefs.ErrBadInput, total, transfer.MaxInlineFiles)
	}
	return nil
}

// Handlers.

// sandbox waits until the sandbox exists, operations may come while it
// is being made, and returns it.
func (o *Ops) sandbox(ctx workflow.Context) (*sandbox.Sandbox, error) {
	if err := workflow.Await(ctx, func() bool { return o.owner.Sandbox() != nil }); err != nil {
		return nil, err
	}
	if o.owner.Using != nil {
		o.owner.Using(ctx)
	}
	return o.owner.Sandbox(), nil
}

func (o *Ops) exec(ctx workflow.Context, req ExecRequest) (out RunOutput, err error) {
	update := workflow.GetCurrentUpdateInfo(ctx).ID
	o.begin(update)
	defer func() { o.end(update, out, err) }()
	sbx, err := o.sandbox(ctx)
	if err != nil {
		return RunOutput{}, err
	}
	opts := []sandbox.ExecOption{
		sandbox.WithExecEnv(req.Env), sandbox.WithDir(req.Dir), sandbox.WithStdin(req.Stdin),
		// Named by the update: its handlers may run in another order
		// when a workflow task is retried after a crash, and an update
		// sent again must find the command it started.
		sandbox.WithKey(update),
		sandbox.OnStart(func(id string) { o.started(update, sbx.ID(), id) }),
	}
	if req.Timeout > 0 {
		opts = append(opts, sandbox.WithExecTimeout(req.Timeout))
	}
	opts = append(opts, sandbox.WithMaxOutput(req.MaxOutput))
	if req.TTY != nil {
		opts = append(opts, terminalOption(ctx, *req.TTY, update))
	}
	var res sandbox.Result
	if req.Shell != "" {
		res, err = sbx.Exec(ctx, req.Shell, opts...)
	} else {
		res, err = sbx.ExecArgv(ctx, req.Argv, opts...)
	}
	out, err = Output(res, sbx.ID(), err)
	return out, sandbox.Failure(err)
}

func (o *Ops) writeFiles(ctx workflow.Context, req WriteFilesRequest) error {
	sbx, err := o.sandbox(ctx)
	if err != nil {
		return err
	}
	return sandbox.Failure(sbx.WriteFiles(ctx, req.Files...))
}

func (o *Ops) importBlob(ctx workflow.Context, req ImportRequest) error {
	sbx, err := o.sandbox(ctx)
	if err != nil {
		return err
	}
	return sandbox.Failure(sbx.Import(ctx, req.Blob, req.Parts))
}

func (o *Ops) readFile(ctx workflow.Context, req PathRequest) (transfer.Output, error) {
	sbx, err := o.sandbox(ctx)
	if err != nil {
		return transfer.Output{}, err
	}
	out, err := sbx.ReadFileOutput(ctx, req.Path)
	return out, sandbox.Failure(err)
}

func (o *Ops) export(ctx workflow.Context, req PathRequest) (transfer.Output, error) {
	sbx, err := o.sandbox(ctx)
	if err != nil {
		return transfer.Output{}, err
	}
	out, err := sbx.Export(ctx, req.Path)
	return out, sandbox.Failure(err)
}

func (o *Ops) listFiles(ctx workflow.Context, req PathRequest) ([]provider.FileInfo, error) {
	sbx, err := o.sandbox(ctx)
	if err != nil {
		return nil, err
	}
	infos, err := sbx.ListFiles(ctx, req.Path)
	return infos, sandbox.Failure(err)
}

func (o *Ops) remove(ctx workflow.Context, req PathRequest) error {
	sbx, err := o.sandbox(ctx)
	if err != nil {
		return err
	}
	return sandbox.Failure(sbx.Remove(ctx, req.Path))
}

// resultKinds are the ends of a command that are its result, not a
// failure to run it: RunOutput.Kind names them. Anything else (bad
// input, a sandbox not found or lost) fails the operation.
var resultKinds = map[errdefs.Kind]bool{
	errdefs.Timeout:         true,
	errdefs.OutOfMemory:     true,
	errdefs.CommandNotFound: true,
}

// Output turns what a command's Exec returned into a RunOutput, or the
// error it failed with.
func Output(res sandbox.Result, sbx string, err error) (RunOutput, error) {
	out := RunOutput{ExitCode: res.ExitCode, Signal: res.Signal, Stdout: res.Output[0],
		Stderr: res.Output[1], Duration: res.Duration, Sandbox: sbx}
	if err != nil {
		kind := errdefs.KindOf(err)
		if !resultKinds[kind] {
			return RunOutput{}, err
		}
		out.Kind, out.Message = kind, err.Error()
	}
	return out, nil
}
