package devserver_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/devserver"
	"github.com/berth-dev/berth/internal/testkit"
)

// Environment of a child process that runs only a server (see TestMain).
const (
	childDataDirEnv = "BERTH_DEVSERVER_TEST_CHILD_DATA_DIR"
	childAddressEnv = "BERTH_DEVSERVER_TEST_CHILD_ADDRESS"
	childReady      = "ready "
	// childNamespace is not "default", to cover creating a namespace, and
	// finding it again after a restart.
	childNamespace = "restart-test"
)

// TestMain doubles as the entry point of a server child process, so that a
// test can SIGKILL a server without killing itself.
func TestMain(m *testing.M) {
	if dir := os.Getenv(childDataDirEnv); dir != "" {
		os.Exit(runChild(dir, os.Getenv(childAddressEnv)))
	}
	os.Exit(m.Run())
}

// runChild serves until its stdin closes, which also happens when the parent
// dies: a failed test run leaves no server behind.
func runChild(dataDir, address string) int {
	srv, err := devserver.Start(context.Background(), devserver.Options{
		DataDir:   dataDir,
		Address:   address,
		Namespace: childNamespace,
		Logger:    testLogger(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	fmt.Println(childReady + srv.Address())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = srv.Stop()
	return 0
}

func TestStart(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	// A port found free may be taken by another test before the UI binds
	// it: try again with another.
	var srv *devserver.Server
	var err error
	for range 3 {
		srv, err = devserver.Start(t.Context(), devserver.Options{
			DataDir: dataDir,
			Address: "127.0.0.1:0",
			UIPort:  testkit.FreePort(t),
			Logger:  testLogger(),
		})
		if !errors.Is(err, devserver.ErrAddressInUse) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})

	t.Run("address", func(t *testing.T) {
		_, port, err := net.SplitHostPort(srv.Address())
		if err != nil || port == "0" {
			t.Errorf("Address() = %q, want a real port", srv.Address())
		}
		if srv.Namespace() != "default" {
			t.Errorf("Namespace() = %q, want default", srv.Namespace())
		}
	})

	t.Run("workflow with activity", func(t *testing.T) {
		c := dial(t, srv.ClientOptions())
		tq := newTaskQueue()
		startWorker(t, c, tq)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq}, greetWorkflow, "berth")
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if err := run.Get(ctx, &got); err != nil {
			t.Fatal(err)
		}
		if want := "hello, berth"; got != want {
			t.Errorf("result = %q, want %q", got, want)
		}
	})

	t.Run("web ui", func(t *testing.T) {
		resp, err := http.Get("http://" + srv.UIAddress() + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET / = %s, want 200", resp.Status)
		}
	})

	t.Run("data dir in use", func(t *testing.T) {
		// Uses the running server's directory: fails fast, before any start.
		_, err := devserver.Start(t.Context(), devserver.Options{DataDir: dataDir, Address: "127.0.0.1:0"})
		if !errors.Is(err, devserver.ErrDataDirInUse) {
			t.Errorf("second Start on the same DataDir: err = %v, want ErrDataDirInUse", err)
		}
	})
}

// TestRestart kills a server process mid-workflow with SIGKILL, starts a new
// one on the same directory and port, and checks the workflow finishes.
func TestRestart(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()

	first, address := startChild(t, dataDir, "127.0.0.1:0")
	c := dial(t, client.Options{HostPort: address, Namespace: childNamespace})
	tq := newTaskQueue()
	stopWorker := startWorker(t, c, tq)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq}, waitWorkflow, "berth")
	if err != nil {
		t.Fatal(err)
	}
	waitForStage(ctx, t, c, run.GetID(), "waiting")
	// Stop this worker while its server is alive: its shutdown hands the
	// workflow's sticky queue back, so the next worker is not kept waiting.
	stopWorker()

	if err := first.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = first.Wait()

	_, again := startChild(t, dataDir, address)
	if again != address {
		t.Fatalf("restarted server at %s, want %s", again, address)
	}
	c = dial(t, client.Options{HostPort: address, Namespace: childNamespace})
	startWorker(t, c, tq)
	if err := c.SignalWorkflow(ctx, run.GetID(), "", finishSignal, "after restart"); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := c.GetWorkflow(ctx, run.GetID(), "").Get(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if want := "hello, berth; after restart"; got != want {
		t.Errorf("result = %q, want %q", got, want)
	}
}

func TestStartRejectsBadOptions(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = taken.Close() })
	takenPort := taken.Addr().(*net.TCPAddr).Port
	closed := strconv.Itoa(testkit.FreePort(t)) // nothing listens there

	tests := []struct {
		name    string
		opts    devserver.Options
		wantIs  error
		wantMsg string
	}{
		{name: "no data dir", opts: devserver.Options{}, wantMsg: "DataDir is required"},
		{name: "address in use", opts: devserver.Options{Address: taken.Addr().String()}, wantIs: devserver.ErrAddressInUse},
		{name: "ui port in use", opts: devserver.Options{Address: "127.0.0.1:0", UIPort: takenPort}, wantIs: devserver.ErrAddressInUse},
		{name: "address without port", opts: devserver.Options{Address: "127.0.0.1"}, wantMsg: "want host:port"},
		{name: "host name", opts: devserver.Options{Address: "example.com:7233"}, wantMsg: "must be an IP address"},
		{name: "unknown dynamic config key", opts: devserver.Options{DynamicConfig: map[string]any{"history.noSuchKey": 1}}, wantMsg: `"history.noSuchKey"`},
		{name: "postgres without address", opts: devserver.Options{Postgres: &devserver.Postgres{User: "temporal"}}, wantMsg: "needs Address"},
		{name: "postgres without user", opts: devserver.Options{Postgres: &devserver.Postgres{Address: "127.0.0.1:5432"}}, wantMsg: "and User"},
		{name: "postgres address without port", opts: devserver.Options{Postgres: &devserver.Postgres{Address: "db", User: "temporal"}}, wantMsg: "want host:port"},
		// The server's own check of the schema fails first, naming the
		// database and what to do, without the password.
		{name: "postgres unreachable", opts: devserver.Options{Address: "127.0.0.1:0",
			Postgres: &devserver.Postgres{Address: "127.0.0.1:" + closed, User: "temporal", Password: "hunter2"}},
			wantMsg: "postgres://temporal@127.0.0.1:" + closed + "/temporal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.name != "no data dir" {
				tt.opts.DataDir = t.TempDir()
			}
			// A bad option must fail fast, never hang in the server's startup.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			srv, err := devserver.Start(ctx, tt.opts)
			if err == nil {
				_ = srv.Stop()
				t.Fatal("Start succeeded, want an error")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("err = %v, want it to mention %q", err, tt.wantMsg)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("err = %v: it shows the database password", err)
			}
		})
	}
}

// --- workflows -------------------------------------------------------------

const finishSignal = "finish"

func greet(_ context.Context, name string) (string, error) {
	return "hello, " + name, nil
}

func greetWorkflow(ctx workflow.Context, name string) (string, error) {
	var s string
	err := workflow.ExecuteActivity(activityOptions(ctx), greet, name).Get(ctx, &s)
	return s, err
}

// waitWorkflow runs an activity, then waits for a signal: its state at the
// kill (an activity result, a pending signal wait) must survive a restart.
func waitWorkflow(ctx workflow.Context, name string) (string, error) {
	stage := "greeting"
	if err := workflow.SetQueryHandler(ctx, "stage", func() (string, error) { return stage, nil }); err != nil {
		return "", err
	}
	var greeting string
	if err := workflow.ExecuteActivity(activityOptions(ctx), greet, name).Get(ctx, &greeting); err != nil {
		return "", err
	}
	stage = "waiting"
	var tail string
	workflow.GetSignalChannel(ctx, finishSignal).Receive(ctx, &tail)
	return greeting + "; " + tail, nil
}

func activityOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
}

// --- helpers ---------------------------------------------------------------

// testLogger shows the server's warnings and errors, and nothing else.
func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func dial(tb testing.TB, opts client.Options) client.Client {
	tb.Helper()
	opts.Logger = sdklog.NewStructuredLogger(testLogger())
	c, err := client.Dial(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// newTaskQueue names a task queue no other test uses.
func newTaskQueue() string {
	return "devserver-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// startWorker runs a worker for the test workflows on taskQueue until the
// test ends or the returned function is called.
func startWorker(tb testing.TB, c client.Client, taskQueue string) (stop func()) {
	tb.Helper()
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflow(greetWorkflow)
	w.RegisterWorkflow(waitWorkflow)
	w.RegisterWorkflow(sequenceWorkflow)
	w.RegisterActivity(greet)
	w.RegisterActivity(now)
	if err := w.Start(); err != nil {
		tb.Fatal(err)
	}
	stop = sync.OnceFunc(w.Stop)
	tb.Cleanup(stop)
	return stop
}

func waitForStage(ctx context.Context, t *testing.T, c client.Client, workflowID, want string) {
	t.Helper()
	for {
		var stage string
		v, err := c.QueryWorkflow(ctx, workflowID, "", "stage")
		if err == nil {
			err = v.Get(&stage)
		}
		if err == nil && stage == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("workflow %s never reached stage %q (last %q, %v)", workflowID, want, stage, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// startChild starts a server in a child process and waits until it serves.
// The child is killed when the test ends.
func startChild(t *testing.T, dataDir, address string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childDataDirEnv+"="+dataDir, childAddressEnv+"="+address)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), childReady); ok {
				ready <- addr
				break
			}
		}
		close(ready)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case addr, ok := <-ready:
		if !ok {
			t.Fatal("server child exited before it was ready (see its stderr)")
		}
		return cmd, addr
	case <-time.After(60 * time.Second):
		t.Fatal("server child not ready after 60s")
		return nil, ""
	}
}
