package modalfake

import (
	"context"
	"io"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"
	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestRouterRetries: what the SDK's retries of the router send again is
// done once: an exec started twice with one id runs once, input written
// again at an offset already written is not written twice, and output
// is read again from any offset. A call without the sandbox's JWT is
// refused.
func TestRouterRetries(t *testing.T) {
	f := newFake(t, Options{})
	c := client(t, f, testTokenID, testTokenSecret)
	sb := newSandbox(t, c, "router", nil)
	f.mu.Lock()
	s := f.sandboxes[sb.SandboxID]
	f.mu.Unlock()

	conn, err := grpc.NewClient(f.rtL.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rc := pb.NewTaskCommandRouterClient(conn)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+s.jwt)
	start := pb.TaskExecStartRequest_builder{TaskId: s.taskID, ExecId: "e1",
		CommandArgs: []string{"sh", "-c", "echo started >> /tmp/runs; cat"}}.Build()
	for range 2 {
		if _, err := rc.TaskExecStart(ctx, start); err != nil {
			t.Fatal(err)
		}
	}
	write := func(off uint64, data string, eof bool) {
		t.Helper()
		if _, err := rc.TaskExecStdinWrite(ctx, pb.TaskExecStdinWriteRequest_builder{TaskId: s.taskID, ExecId: "e1", Offset: off, Data: []byte(data), Eof: eof}.Build()); err != nil {
			t.Fatal(err)
		}
	}
	write(0, "hello ", false)
	write(0, "hello ", false) // a retry
	write(3, "lo world", false)
	write(11, "", true)
	if _, err := rc.TaskExecStdinWrite(ctx, pb.TaskExecStdinWriteRequest_builder{TaskId: s.taskID, ExecId: "e1", Offset: 99, Data: []byte("x")}.Build()); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a write past what was written: %v, want InvalidArgument", err)
	}
	wait, err := rc.TaskExecWait(ctx, pb.TaskExecWaitRequest_builder{TaskId: s.taskID, ExecId: "e1"}.Build())
	if err != nil || wait.GetCode() != 0 {
		t.Fatalf("wait: %v, %v", wait, err)
	}
	read := func(off uint64) string {
		t.Helper()
		st, err := rc.TaskExecStdioRead(ctx, pb.TaskExecStdioReadRequest_builder{TaskId: s.taskID, ExecId: "e1", Offset: off}.Build())
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		for {
			m, err := st.Recv()
			if err == io.EOF {
				return string(out)
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, m.GetData()...)
		}
	}
	if got := read(0); got != "hello world" {
		t.Errorf("stdout %q, want %q", got, "hello world")
	}
	if got := read(6); got != "world" {
		t.Errorf("stdout from 6: %q", got)
	}
	out, _, _ := execute(t, sb, "", nil, "cat", "/tmp/runs")
	if out != "started\n" {
		t.Errorf("the exec started twice ran %q, want once", out)
	}
	bad := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer nope")
	if _, err := rc.TaskExecStart(bad, start); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a wrong JWT: %v, want Unauthenticated", err)
	}
}

// TestTimeout: a sandbox ends at its timeout, its machine with it.
func TestTimeout(t *testing.T) {
	f := newFake(t, Options{})
	c := client(t, f, testTokenID, testTokenSecret)
	ctx := t.Context()
	app, err := c.Apps.FromName(ctx, "fake-test", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes.ExperimentalCreate(ctx, app, c.Images.FromRegistry("alpine", nil), &modal.SandboxCreateParams{Name: "short", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	code, err := sb.Wait(ctx, nil)
	if err != nil || code != 124 {
		t.Errorf("wait for a sandbox past its timeout: %d, %v; want 124", code, err)
	}
	if _, err := farm.Machine(sb.SandboxID); err == nil {
		t.Error("the machine of a sandbox past its timeout is still there")
	}
	if f.Sandboxes() != 0 {
		t.Error("a sandbox runs past its timeout")
	}
}
