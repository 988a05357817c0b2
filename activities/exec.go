package activities

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/activity"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
	"github.com/berth-dev/berth/transfer"
)

// ExecInput is a command to run in a sandbox.
type ExecInput struct {
	Sandbox refs.Sandbox `json:"sandbox"`
	// ID is the command's id in the sandbox's journal. The workflow
	// chooses it, and it stays the same across retries: that is what
	// makes the command run once.
	ID      string            `json:"id"`
	Argv    []string          `json:"argv,omitempty"`
	Shell   string            `json:"shell,omitempty"`
	Stdin   []byte            `json:"stdin,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Dir     string            `json:"dir,omitempty"`
	Timeout time.Duration     `json:"timeout,omitempty"`
	// MaxOutput caps what is stored of each output stream; zero means
	// transfer.DefaultMaxOutput.
	MaxOutput int64 `json:"max_output,omitempty"`
	// TTY runs the command on a terminal of this size, whose input comes
	// from the upload stream Input (see transfer.TerminalEvent). Its
	// output is stdout alone.
	TTY   *provider.TerminalSize `json:"tty,omitempty"`
	Input string                 `json:"input,omitempty"`
}

// ExecOutput is what became of a command. A command that timed out or
// ran out of memory is a result, not an activity failure: retrying would
// not change it.
type ExecOutput struct {
	ExitCode  int             `json:"exit_code"`
	Signal    string          `json:"signal,omitempty"`
	TimedOut  bool            `json:"timed_out,omitempty"`
	OOMKilled bool            `json:"oom_killed,omitempty"`
	Duration  time.Duration   `json:"duration"`
	Stdout    transfer.Output `json:"stdout"`
	Stderr    transfer.Output `json:"stderr"`
	// Attached: the command had been started by an earlier attempt.
	Attached bool `json:"attached,omitempty"`
}

// LocalExecOutput is what ExecLocal made of a command: its result, or
// why the Exec activity must take over.
type LocalExecOutput struct {
	ExecOutput
	// Handed: the command was still running after LocalWindow; this
	// worker keeps it for the Exec activity, which takes it over with
	// its output so far.
	Handed bool `json:"handed,omitempty"`
	// Elsewhere: this worker is not the sandbox's host; only the Exec
	// activity, on the host's queue, can run the command.
	Elsewhere bool `json:"elsewhere,omitempty"`
}

// execProgress is an Exec's heartbeat: the output parts stored so far.
type execProgress struct {
	Parts [2]int `json:"parts"`
	// Input is the next part of a terminal's input to read.
	Input int `json:"input,omitempty"`
}

// errNoCommandID: a command without an id could run twice after a retry.
var errNoCommandID = fmt.Errorf("%w: exec without a command id cannot be made exactly-once", errdefs.ErrBadInput)

// LiveEvery is how often a running command's output is stored for
// readers following it live.
const LiveEvery = 100 * time.Millisecond

// heartbeatEvery is how often a running command's activity heartbeats;
// the SDK sends at most one per heartbeat timeout's fraction anyway.
const heartbeatEvery = 2 * time.Second

// LocalWindow is how long ExecLocal waits for a command before handing
// it to the Exec activity. Most tool calls (cat, ls, a file write, git
// status) end well within it; the workflow task stays open meanwhile,
// so it must stay far below the workflow task timeout.
const LocalWindow = 500 * time.Millisecond

// handoffGrace is how long a command handed over by ExecLocal waits for
// the Exec activity to take it. Past it, the worker stops following the
// command, which goes on in the sandbox: an Exec activity arriving later,
// on this worker or another, attaches to it through the sandbox's
// journal like any retry.
const handoffGrace = time.Minute

// Exec runs a command, or takes it over from ExecLocal, or attaches to
// it when an earlier attempt started it, streaming its output into the
// blob store and heartbeating the progress a retry resumes from.
func (a *Activities) Exec(ctx context.Context, in ExecInput) (ExecOutput, error) {
	return returned(a.exec(ctx, in))
}

func (a *Activities) exec(ctx context.Context, in ExecInput) (ExecOutput, error) {
	if in.ID == "" {
		return ExecOutput{}, errNoCommandID
	}
	run := a.handoffs.take(in)
	if run == nil {
		var prog execProgress
		if activity.HasHeartbeatDetails(ctx) {
			_ = activity.GetHeartbeatDetails(ctx, &prog)
		}
		var err error
		if run, err = a.startExec(ctx, in, prog); err != nil {
			return ExecOutput{}, err
		}
	}
	return run.wait(ctx, func() { activity.RecordHeartbeat(ctx, run.progress()) })
}

// ExecLocal is Exec as a local activity, run by the worker of the
// workflow that asks for it, without a round trip through the server:
// it runs the command when this worker is the sandbox's host, and waits
// for it at most LocalWindow. A longer command is handed, still running
// and with its output so far, to the Exec activity, which the workflow
// then schedules on the same worker: nothing is run twice, and nothing
// is lost. If this worker dies meanwhile, the workflow task is retried
// elsewhere and ExecLocal or Exec attaches to the command through the
// sandbox's journal.
//
// A worker that did not register Activities calls ExecLocal on a nil
// receiver: it answers Elsewhere.
func (a *Activities) ExecLocal(ctx context.Context, in ExecInput) (LocalExecOutput, error) {
	return returned(a.execLocal(ctx, in))
}

func (a *Activities) execLocal(ctx context.Context, in ExecInput) (LocalExecOutput, error) {
	if a == nil || in.Sandbox.Queue != a.HostQueue || a.Providers[in.Sandbox.Provider] == nil {
		return LocalExecOutput{Elsewhere: true}, nil
	}
	if in.ID == "" {
		return LocalExecOutput{}, errNoCommandID
	}
	// A workflow task retried on this worker finds its command here.
	run := a.handoffs.take(in)
	if run == nil {
		var err error
		// The run outlives this activity when it is handed over.
		if run, err = a.startExec(context.WithoutCancel(ctx), in, execProgress{}); err != nil {
			return LocalExecOutput{}, err
		}
	}
	window := time.NewTimer(LocalWindow)
	defer window.Stop()
	select {
	case <-run.done:
		return LocalExecOutput{ExecOutput: run.out}, run.err
	case <-window.C:
		a.handoffs.put(in, run)
		return LocalExecOutput{Handed: true}, nil
	case <-ctx.Done():
		run.stop()
		return LocalExecOutput{}, ctx.Err()
	}
}

// execRun is a command running in a sandbox, its output streaming into
// the blob store; the activity that waits for it can change, from
// ExecLocal to Exec.
type execRun struct {
	streams [2]*capture
	input   atomic.Int64 // the next part of a terminal's input
	cancel  context.CancelFunc
	done    chan struct{}
	out     ExecOutput // set when done closes
	err     error      // likewise
}

// startExec starts running (or attaching to) a command, resuming its
// stored output after prog.
func (a *Activities) startExec(ctx context.Context, in ExecInput, prog execProgress) (*execRun, error) {
	sb, err := a.execSandbox(ctx, in.Sandbox)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &execRun{cancel: cancel, done: make(chan struct{})}
	r.input.Store(int64(prog.Input))
	r.streams = [2]*capture{
		newCapture(ctx, a, transfer.OutputKey(in.Sandbox.ID, in.ID, "stdout"), prog.Parts[0], in.MaxOutput),
		newCapture(ctx, a, transfer.OutputKey(in.Sandbox.ID, in.ID, "stderr"), prog.Parts[1], in.MaxOutput),
	}
	go r.run(ctx, a, sb, in)
	return r, nil
}

func (r *execRun) run(ctx context.Context, a *Activities, sb provider.Sandbox, in ExecInput) {
	defer close(r.done)
	defer r.cancel()
	period := LiveEvery
	var term provider.Terminal
	if in.TTY != nil {
		var ok bool
		if term, ok = sb.(provider.Terminal); !ok {
			r.err = fmt.Errorf("%w: provider %s runs no command on a terminal", errdefs.ErrUnsupported, in.Sandbox.Provider)
			return
		}
		period = transfer.TerminalPoll
	}
	stop := make(chan struct{})
	if term != nil && in.Input != "" {
		go r.feed(ctx, a, term, in, stop)
	}
	endLive := every(period, func() {
		r.streams[0].flushLive()
		r.streams[1].flushLive()
	})
	req := provider.ExecRequest{
		ID: in.ID, Argv: in.Argv, Shell: in.Shell, Env: in.Env, Dir: in.Dir, Timeout: in.Timeout,
		Stdout: r.streams[0], Stderr: r.streams[1],
		StdoutOffset: r.streams[0].committed(), StderrOffset: r.streams[1].committed(),
		TTY: in.TTY,
	}
	if len(in.Stdin) > 0 {
		req.Stdin = bytes.NewReader(in.Stdin)
	}
	start := time.Now()
	a.metrics().CommandStarted(in.Sandbox.Provider, in.Sandbox.ID)
	pctx, end := a.traceProvider(ctx, "exec", in.Sandbox.Provider, in.Sandbox.ID)
	res, err := sb.Exec(pctx, req)
	end(err)
	a.metrics().CommandEnded(in.Sandbox.Provider, in.Sandbox.ID, time.Since(start))
	endLive()
	close(stop)
	if err != nil {
		// A handle that failed is fetched afresh for the next command.
		a.handles.forget(in.Sandbox)
	}
	r.out, r.err = r.result(res, err)
}

// every calls f every period until the returned func is called; once
// that returns, no call is under way or to come. It stores a running
// command's output for readers following it live: a timer rather than a
// goroutine, because most commands end before it first fires, and then
// cost neither a goroutine nor a wake-up.
func every(period time.Duration, f func()) (end func()) {
	var mu sync.Mutex
	ended := false
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(period, func() {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			return
		}
		f()
		t.Reset(period)
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		ended = true
		t.Stop()
	}
}

// execSandbox is a.sandbox for a command: the handle the last command
// in the same sandbox used, when there is one. A provider's Get reads
// the sandbox's record, file-system calls that cost more than a short
// command's round trip to its daemon; a sandbox id names one sandbox
// for its whole life (one re-created gets a new id), so the handle
// stays good until a command through it fails, when it is dropped.
func (a *Activities) execSandbox(ctx context.Context, ref refs.Sandbox) (provider.Sandbox, error) {
	sb := a.handles.get(ref)
	if sb == nil {
		sb, err := a.sandbox(ctx, ref)
		if err == nil {
			a.handles.put(ref, sb)
		}
		return sb, err
	}
	if err := a.unpark(ctx, ref, sb); err != nil {
		return nil, err
	}
	return sb, nil
}

// maxHandles bounds the sandbox handles kept for commands: past it,
// they are all dropped, and fetched again as commands come.
const maxHandles = 256

// handles are the sandbox handles commands ran through, by provider and
// sandbox id. The zero value is ready.
type handles struct {
	mu sync.Mutex
	m  map[refs.Sandbox]provider.Sandbox
}

func handleKey(ref refs.Sandbox) refs.Sandbox {
	return refs.Sandbox{Provider: ref.Provider, ID: ref.ID}
}

func (h *handles) get(ref refs.Sandbox) provider.Sandbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[handleKey(ref)]
}

func (h *handles) put(ref refs.Sandbox, sb provider.Sandbox) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHandles {
		h.m = make(map[refs.Sandbox]provider.Sandbox)
	}
	h.m[handleKey(ref)] = sb
}

func (h *handles) forget(ref refs.Sandbox) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, handleKey(ref))
}

// result turns what the provider returned into the activity's result.
func (r *execRun) result(res provider.ExecResult, err error) (ExecOutput, error) {
	switch {
	case errors.Is(err, errdefs.ErrTimeout), errors.Is(err, errdefs.ErrOutOfMemory):
		// Results, not failures: see ExecOutput.
	case err != nil:
		return ExecOutput{}, err
	}
	out := ExecOutput{ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut,
		OOMKilled: res.OOMKilled, Duration: res.Duration, Attached: res.Attached}
	if out.Stdout, err = r.streams[0].finish(res.Truncated); err != nil {
		return ExecOutput{}, err
	}
	if out.Stderr, err = r.streams[1].finish(res.Truncated); err != nil {
		return ExecOutput{}, err
	}
	return out, nil
}

func (r *execRun) progress() execProgress {
	return execProgress{Parts: [2]int{r.streams[0].progress(), r.streams[1].progress()}, Input: int(r.input.Load())}
}

// wait waits for the command's end, calling beat every heartbeatEvery.
// When ctx ends first it stops following the command.
func (r *execRun) wait(ctx context.Context, beat func()) (ExecOutput, error) {
	tick := time.NewTicker(heartbeatEvery)
	defer tick.Stop()
	for {
		select {
		case <-r.done:
			return r.out, r.err
		case <-tick.C:
			beat()
		case <-ctx.Done():
			r.stop()
			return ExecOutput{}, ctx.Err()
		}
	}
}

// stop stops following the command and waits until the run has let go.
func (r *execRun) stop() {
	r.cancel()
	<-r.done
}

// handoffs holds the commands ExecLocal handed over, until the Exec
// activity takes them or their grace runs out. The zero value is ready.
type handoffs struct {
	grace time.Duration // zero means handoffGrace
	mu    sync.Mutex
	runs  map[string]*execRun
}

func handoffKey(in ExecInput) string { return in.Sandbox.ID + "/" + in.ID }

func (h *handoffs) put(in ExecInput, r *execRun) {
	key := handoffKey(in)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.runs == nil {
		h.runs = make(map[string]*execRun)
	}
	h.runs[key] = r
	grace := h.grace
	if grace == 0 {
		grace = handoffGrace
	}
	time.AfterFunc(grace, func() {
		h.mu.Lock()
		abandoned := h.runs[key] == r
		if abandoned {
			delete(h.runs, key)
		}
		h.mu.Unlock()
		if abandoned {
			r.stop()
		}
	})
}

// take removes and returns the run handed over for in, if any.
func (h *handoffs) take(in ExecInput) *execRun {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.runs) == 0 {
		return nil // the common case: no command was handed over
	}
	key := handoffKey(in)
	r := h.runs[key]
	delete(h.runs, key)
	return r
}

// SignalInput names a running command and the signal it is to get.
type SignalInput struct {
	Sandbox refs.Sandbox `json:"sandbox"`
	ID      string       `json:"id"`     // the command's id, ExecInput.ID
	Signal  string       `json:"signal"` // a name of provider.Signals
}

// Signal signals a running command (provider.Signaler). It is retried
// only when an attempt's outcome was lost, which may deliver the signal
// twice: callers send the signals whose repetition means the same (an
// interrupt, a termination, a kill).
func (a *Activities) Signal(ctx context.Context, in SignalInput) error {
	return toTemporal(a.signal(ctx, in))
}

func (a *Activities) signal(ctx context.Context, in SignalInput) error {
	sb, err := a.sandbox(ctx, in.Sandbox)
	if err != nil {
		return err
	}
	sg, ok := sb.(provider.Signaler)
	if !ok {
		return fmt.Errorf("%w: provider %s cannot signal a command", errdefs.ErrUnsupported, in.Sandbox.Provider)
	}
	ctx, end := a.traceProvider(ctx, "signal", in.Sandbox.Provider, in.Sandbox.ID)
	err = sg.Signal(ctx, in.ID, in.Signal)
	end(err)
	return err
}
