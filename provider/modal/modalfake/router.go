package modalfake

import (
	"context"
	"errors"
	"io"
	"maps"
	"sync"
	"syscall"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// Bounds of an exec.
const (
	maxOutput  = 64 << 20 // kept of a stream; past it the command waits
	readChunk  = 64 << 10 // sent in one message
	maxExecs   = 4096     // kept per sandbox
	maxStdinIn = 16 << 20 // of one write
)

// router is the fake's modal.task_command_router.TaskCommandRouter.
type router struct {
	pb.UnimplementedTaskCommandRouterServer
	s *Server
}

// execution is one command started by TaskExecStart.
type execution struct {
	proc           *remotefake.Process
	stdout, stderr *output
	stdinMu        sync.Mutex
	stdinOff       uint64
	stdinEOF       bool
	done           chan struct{}
	code           int
	lost           bool
}

// output keeps what a stream printed, to be read from any offset.
type output struct {
	mu      sync.Mutex
	data    []byte
	closed  bool
	changed chan struct{}
}

func newOutput() *output { return &output{changed: make(chan struct{})} }

func (o *output) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.data = append(o.data, b...)
	close(o.changed)
	o.changed = make(chan struct{})
	return len(b), nil
}

func (o *output) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	close(o.changed)
	o.changed = make(chan struct{})
}

// from is what follows offset (at most readChunk), whether the stream
// has ended there, and a channel closed when more comes.
func (o *output) from(off uint64) ([]byte, bool, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if off < uint64(len(o.data)) {
		end := min(off+readChunk, uint64(len(o.data)))
		return o.data[off:end], false, nil
	}
	return nil, o.closed, o.changed
}

// copyBounded copies r into o up to maxOutput, then stops reading, as
// a full pipe stops its writer.
func copyBounded(o *output, r io.Reader) {
	_, _ = io.Copy(o, io.LimitReader(r, maxOutput))
	o.close()
}

// task is the running sandbox of a task id.
func (s *Server) task(id string) (*sandbox, error) {
	s.mu.Lock()
	sb := s.tasks[id]
	made := sb != nil && sb.machine != nil
	s.mu.Unlock()
	if !made {
		return nil, status.Errorf(codes.NotFound, "task %s not found", id)
	}
	if sb.finished() {
		return nil, status.Errorf(codes.FailedPrecondition, "task %s has finished", id)
	}
	return sb, nil
}

func (sb *sandbox) exec(id string) (*execution, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	e := sb.execs[id]
	if e == nil {
		return nil, status.Errorf(codes.NotFound, "exec %s not found", id)
	}
	return e, nil
}

func (r *router) TaskExecStart(ctx context.Context, req *pb.TaskExecStartRequest) (*pb.TaskExecStartResponse, error) {
	s := r.s
	sb, err := s.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if len(req.GetCommandArgs()) == 0 || req.GetExecId() == "" {
		return nil, status.Error(codes.InvalidArgument, "an exec needs an id and a command")
	}
	if req.GetPtyInfo() != nil || len(req.GetSecretIds()) > 0 || req.GetContainerId() != "" {
		s.violation("TaskExecStart: PTYs, secrets by id and sidecars are not the fake's")
		return nil, status.Error(codes.Unimplemented, "not supported by the fake")
	}
	env := maps.Clone(req.GetEnv())
	if env == nil {
		env = map[string]string{}
	}
	for _, src := range req.GetSecretSources() {
		if src.HasSecretId() {
			s.violation("TaskExecStart: a secret by id")
			return nil, status.Error(codes.Unimplemented, "not supported by the fake")
		}
		maps.Copy(env, src.GetEnv().GetContents())
	}
	sb.mu.Lock()
	if _, ok := sb.execs[req.GetExecId()]; ok {
		// A retry of a start whose answer was lost: it runs once.
		sb.mu.Unlock()
		return pb.TaskExecStartResponse_builder{}.Build(), nil
	}
	if len(sb.execs) >= maxExecs {
		sb.mu.Unlock()
		return nil, status.Error(codes.ResourceExhausted, "too many execs in this sandbox")
	}
	e := &execution{stdout: newOutput(), stderr: newOutput(), done: make(chan struct{})}
	sb.execs[req.GetExecId()] = e
	sb.mu.Unlock()
	proc, err := sb.machine.Start(ctx, remotefake.Command{Argv: req.GetCommandArgs(), Env: env, Dir: req.GetWorkdir(), Stdin: true})
	if err != nil {
		sb.mu.Lock()
		delete(sb.execs, req.GetExecId())
		sb.mu.Unlock()
		if errors.Is(err, errdefs.ErrSandboxLost) {
			return nil, status.Errorf(codes.NotFound, "task %s is gone", sb.taskID)
		}
		return nil, status.Errorf(codes.InvalidArgument, "could not start the command: %v", err)
	}
	e.proc = proc
	go copyBounded(e.stdout, proc.Stdout())
	go copyBounded(e.stderr, proc.Stderr())
	go func() {
		code, err := proc.Wait()
		e.code, e.lost = code, err != nil
		close(e.done)
	}()
	if t := req.GetTimeoutSecs(); t > 0 {
		go func() {
			select {
			case <-e.done:
			case <-time.After(time.Duration(t) * time.Second):
				_ = proc.Signal(context.Background(), syscall.SIGKILL)
			}
		}()
	}
	return pb.TaskExecStartResponse_builder{}.Build(), nil
}

func (r *router) TaskExecStdinWrite(ctx context.Context, req *pb.TaskExecStdinWriteRequest) (*pb.TaskExecStdinWriteResponse, error) {
	sb, err := r.s.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	e, err := sb.exec(req.GetExecId())
	if err != nil {
		return nil, err
	}
	if len(req.GetData()) > maxStdinIn {
		return nil, status.Error(codes.InvalidArgument, "stdin write too large")
	}
	e.stdinMu.Lock()
	defer e.stdinMu.Unlock()
	off, data := req.GetOffset(), req.GetData()
	switch {
	case off > e.stdinOff:
		return nil, status.Errorf(codes.InvalidArgument, "stdin offset %d past %d written", off, e.stdinOff)
	case off < e.stdinOff:
		// A retry: what was written already is not written again.
		skip := min(e.stdinOff-off, uint64(len(data)))
		data = data[skip:]
	}
	if len(data) > 0 {
		if e.stdinEOF {
			return nil, status.Error(codes.FailedPrecondition, "stdin is closed")
		}
		n, err := e.proc.Stdin().Write(data)
		e.stdinOff += uint64(n)
		if err != nil {
			// The command stopped reading: the rest is dropped, as by a
			// closed pipe.
			e.stdinEOF = true
		}
	}
	if req.GetEof() && !e.stdinEOF {
		e.stdinEOF = true
		_ = e.proc.Stdin().Close()
	}
	return pb.TaskExecStdinWriteResponse_builder{}.Build(), nil
}

func (r *router) TaskExecStdioRead(req *pb.TaskExecStdioReadRequest, stream grpc.ServerStreamingServer[pb.TaskExecStdioReadResponse]) error {
	sb, err := r.s.task(req.GetTaskId())
	if err != nil {
		return err
	}
	e, err := sb.exec(req.GetExecId())
	if err != nil {
		return err
	}
	o := e.stdout
	if req.GetFileDescriptor() == pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR {
		o = e.stderr
	}
	off := req.GetOffset()
	for {
		data, ended, more := o.from(off)
		if len(data) > 0 {
			if err := stream.Send(pb.TaskExecStdioReadResponse_builder{Data: data}.Build()); err != nil {
				return err
			}
			off += uint64(len(data))
			continue
		}
		if ended {
			return nil
		}
		select {
		case <-more:
		case <-stream.Context().Done():
			return status.FromContextError(stream.Context().Err()).Err()
		case <-r.s.ctx.Done():
			return status.Error(codes.Unavailable, "the fake is closing")
		}
	}
}

func (r *router) TaskExecWait(ctx context.Context, req *pb.TaskExecWaitRequest) (*pb.TaskExecWaitResponse, error) {
	sb, err := r.s.task(req.GetTaskId())
	if err != nil {
		return nil, err
	}
	e, err := sb.exec(req.GetExecId())
	if err != nil {
		return nil, err
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if e.lost {
		return nil, status.Errorf(codes.NotFound, "task %s is gone", sb.taskID)
	}
	code := int32(e.code)
	return pb.TaskExecWaitResponse_builder{Code: &code}.Build(), nil
}
