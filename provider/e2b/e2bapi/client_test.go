package e2bapi_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/e2b/e2bapi"
	"github.com/berth-dev/berth/provider/e2b/e2bfake"
)

func ptr[T any](v T) *T { return &v }

func TestSandboxLifecycle(t *testing.T) {
	f, c := newFake(t, e2bfake.Options{Latency: 5 * time.Millisecond})
	ctx := t.Context()
	sb, err := c.CreateSandbox(ctx, e2bapi.NewSandbox{
		TemplateID: "base", Timeout: ptr(int32(300)), Secure: ptr(true),
		Metadata: map[string]string{"berth.name": "a&b=c", "team": "x"},
		EnvVars:  map[string]string{"GREETING": "hello"},
	})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.CreateSandbox(ctx, e2bapi.NewSandbox{TemplateID: "base", Metadata: map[string]string{"team": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.SandboxID == "" || sb.EnvdAccessToken == "" || sb.TemplateID != "base" {
		t.Fatalf("create answered %+v", sb)
	}

	d, err := c.GetSandbox(ctx, sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != e2bapi.StateRunning || d.Metadata["berth.name"] != "a&b=c" || d.EndAt.Before(time.Now().Add(200*time.Second)) {
		t.Errorf("get answered %+v", d)
	}

	list, err := c.ListSandboxes(ctx, e2bapi.ListOptions{Metadata: map[string]string{"berth.name": "a&b=c"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].SandboxID != sb.SandboxID {
		t.Errorf("list by berth.name: %+v, want only %s", list, sb.SandboxID)
	}
	list, err = c.ListSandboxes(ctx, e2bapi.ListOptions{Metadata: map[string]string{"team": "x"}})
	if err != nil || len(list) != 2 {
		t.Errorf("list by team: %d sandboxes, %v; want 2", len(list), err)
	}

	// The environment the sandbox was made with reaches its processes.
	res, err := c.Run(ctx, sb.Ref(), e2bapi.StartRequest{Process: e2bapi.ProcessConfig{Cmd: "sh", Args: []string{"-c", "echo $GREETING"}}}, e2bapi.StartOptions{}, 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "hello\n" {
		t.Errorf("stdout %q, want hello", res.Stdout)
	}

	if err := c.PauseSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if err := c.PauseSandbox(ctx, sb.SandboxID); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("pause of a paused sandbox: %v, want E2B's 409 as bad input", err)
	}
	if d, err := c.GetSandbox(ctx, sb.SandboxID); err != nil || d.State != e2bapi.StatePaused {
		t.Errorf("get of a paused sandbox: %v, %v", d.State, err)
	}
	if list, err := c.ListSandboxes(ctx, e2bapi.ListOptions{States: []e2bapi.SandboxState{e2bapi.StateRunning}, Metadata: map[string]string{"team": "x"}}); err != nil || len(list) != 1 || list[0].SandboxID != other.SandboxID {
		t.Errorf("list of running ones: %+v, %v", list, err)
	}
	// A paused sandbox's envd answers as E2B's proxy does: 502.
	_, err = c.Run(ctx, sb.Ref(), e2bapi.StartRequest{Process: e2bapi.ProcessConfig{Cmd: "true"}}, e2bapi.StartOptions{}, 0)
	var apiErr *e2bapi.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadGateway || !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("start in a paused sandbox: %v, want a 502", err)
	}

	resumed, wasPaused, err := c.ConnectSandbox(ctx, sb.SandboxID, time.Minute)
	if err != nil || !wasPaused || resumed.SandboxID != sb.SandboxID {
		t.Fatalf("connect of a paused sandbox: %+v, resumed %v, %v", resumed, wasPaused, err)
	}
	if _, wasPaused, err := c.ConnectSandbox(ctx, sb.SandboxID, time.Minute); err != nil || wasPaused {
		t.Errorf("connect of a running sandbox: resumed %v, %v", wasPaused, err)
	}
	if _, err := c.Run(ctx, resumed.Ref(), e2bapi.StartRequest{Process: e2bapi.ProcessConfig{Cmd: "true"}}, e2bapi.StartOptions{}, 0); err != nil {
		t.Errorf("start after resume: %v", err)
	}

	if err := c.SetTimeout(ctx, sb.SandboxID, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if d, err := c.GetSandbox(ctx, sb.SandboxID); err != nil || d.EndAt.After(time.Now().Add(31*time.Second)) {
		t.Errorf("after a timeout of 30s the sandbox ends at %v (%v)", d.EndAt, err)
	}

	if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSandbox(ctx, sb.SandboxID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("get after kill: %v, want not found", err)
	}
	if err := c.KillSandbox(ctx, sb.SandboxID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second kill: %v, want not found", err)
	}
	if got := f.Sandboxes(); len(got) != 1 || got[0] != other.SandboxID {
		t.Errorf("the fake holds %v, want only %s", got, other.SandboxID)
	}
}

func TestProcesses(t *testing.T) {
	_, c := newFake(t, e2bfake.Options{})
	ctx := t.Context()
	sb, err := c.CreateSandbox(ctx, e2bapi.NewSandbox{TemplateID: "base", Timeout: ptr(int32(300))})
	if err != nil {
		t.Fatal(err)
	}
	ref := sb.Ref()
	run := func(user, script string) e2bapi.Result {
		t.Helper()
		res, err := c.Run(ctx, ref, e2bapi.StartRequest{Process: e2bapi.ProcessConfig{Cmd: "sh", Args: []string{"-c", script}, Cwd: ptr("/tmp")}, Stdin: ptr(false)}, e2bapi.StartOptions{User: user}, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	res := run("", "echo out; echo err >&2; pwd; id -un; exit 3")
	if string(res.Stdout) != "out\n/tmp\nuser\n" || string(res.Stderr) != "err\n" || res.End.ExitCode != 3 || !res.End.Exited || res.PID == 0 {
		t.Errorf("run answered %+v (stdout %q, stderr %q)", res, res.Stdout, res.Stderr)
	}
	if res := run("root", "id -un"); string(res.Stdout) != "root\n" {
		t.Errorf("as root: %q", res.Stdout)
	}

	payload := bytes.Repeat([]byte("berth\x00\xff"), 100_000)
	entries, err := c.Upload(ctx, ref, "/opt/bin/payload", "root", bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Path != "/opt/bin/payload" || entries[0].Type != "file" {
		t.Errorf("upload answered %+v", entries)
	}
	if res := run("root", "wc -c </opt/bin/payload; sha256sum </opt/bin/payload"); !strings.HasPrefix(string(res.Stdout), strconv.Itoa(len(payload))+"\n") {
		t.Errorf("the uploaded file: %q, want %d bytes", res.Stdout, len(payload))
	}

	// A process signalled ends by its signal.
	pid, err := c.StartDetached(ctx, ref, e2bapi.StartRequest{Process: e2bapi.ProcessConfig{Cmd: "sleep", Args: []string{"600"}}, Stdin: ptr(false)}, e2bapi.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SendSignal(ctx, ref, e2bapi.ProcessSelector{PID: &pid}, e2bapi.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitDead(t, c, ref, pid)
	if err := c.SendSignal(ctx, ref, e2bapi.ProcessSelector{PID: ptr(uint32(999999))}, e2bapi.SIGKILL); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("signal to no process: %v, want not found", err)
	}
	if _, err := c.Run(ctx, ref, e2bapi.StartRequest{Process: e2bapi.ProcessConfig{Cmd: "/no/such/program"}}, e2bapi.StartOptions{}, 0); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("a program that is not there: %v, want bad input", err)
	}
}

// alive reports whether pid runs in the sandbox.
func alive(t *testing.T, c *e2bapi.Client, ref e2bapi.SandboxRef, pid uint32) bool {
	t.Helper()
	res, err := c.Run(t.Context(), ref, e2bapi.StartRequest{Process: e2bapi.ProcessConfig{Cmd: "sh", Args: []string{"-c", fmt.Sprintf("kill -0 %d && ! grep -q '^State:.*Z' /proc/%d/status", pid, pid)}}}, e2bapi.StartOptions{User: "root"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	return res.End.ExitCode == 0
}

// waitDead waits until pid has ended, failing the test if it runs on
// for a minute.
func waitDead(t *testing.T, c *e2bapi.Client, ref e2bapi.SandboxRef, pid uint32) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); alive(t, c, ref, pid); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs", pid)
		}
	}
}

// TestConnectTimeoutTrap: envd kills a process at its request's
// Connect-Timeout-Ms, whether or not its stream is read; a daemon's
// Start sends none, and the daemon outlives its stream.
func TestConnectTimeoutTrap(t *testing.T) {
	_, c := newFake(t, e2bfake.Options{})
	ctx := t.Context()
	sb, err := c.CreateSandbox(ctx, e2bapi.NewSandbox{TemplateID: "base", Timeout: ptr(int32(300))})
	if err != nil {
		t.Fatal(err)
	}
	ref := sb.Ref()
	sleep := e2bapi.StartRequest{Process: e2bapi.ProcessConfig{Cmd: "sleep", Args: []string{"600"}}, Stdin: ptr(false)}
	daemon, err := c.StartDetached(ctx, ref, sleep, e2bapi.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	timed, err := c.StartDetached(ctx, ref, sleep, e2bapi.StartOptions{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !alive(t, c, ref, timed) {
		t.Fatal("the process with a timeout died at once")
	}
	waitDead(t, c, ref, timed)
	if !alive(t, c, ref, daemon) {
		t.Error("the daemon started without Connect-Timeout-Ms died with its stream")
	}
}

func TestErrorKinds(t *testing.T) {
	f, c := newFake(t, e2bfake.Options{MaxSandboxes: 1})
	ctx := t.Context()

	f.Inject(e2bfake.Fault{Match: e2bfake.Route("GET", "/v2/sandboxes"), Status: http.StatusTooManyRequests, RetryAfter: "7"})
	_, err := c.ListSandboxes(ctx, e2bapi.ListOptions{})
	var apiErr *e2bapi.Error
	if !errors.Is(err, errdefs.ErrProviderUnavailable) || !errors.As(err, &apiErr) || apiErr.RetryAfter != 7*time.Second {
		t.Errorf("429 with Retry-After 7: %v, want retryable after 7s", err)
	}
	noKey(t, err)

	f.Inject(e2bfake.Fault{Match: e2bfake.Route("POST", "/sandboxes"), Status: http.StatusServiceUnavailable})
	_, err = c.CreateSandbox(ctx, e2bapi.NewSandbox{TemplateID: "base"})
	if !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("503: %v, want retryable", err)
	}
	noKey(t, err)

	_, err = c.GetSandbox(ctx, "inosuchsandbox")
	if !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("get of no sandbox: %v, want not found", err)
	}
	noKey(t, err)

	// A POST, which net/http does not send again on a new connection.
	f.Inject(e2bfake.Fault{Match: e2bfake.Route("POST", "/sandboxes/inosuchsandbox/timeout"), Drop: true})
	err = c.SetTimeout(ctx, "inosuchsandbox", time.Minute)
	if !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("dropped connection: %v, want retryable", err)
	}
	noKey(t, err)

	_, err = c.CreateSandbox(ctx, e2bapi.NewSandbox{TemplateID: "base", Timeout: ptr(int32(48 * 3600))})
	if !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("a timeout past the plan's: %v, want bad input", err)
	}
	noKey(t, err)

	if _, err := c.CreateSandbox(ctx, e2bapi.NewSandbox{TemplateID: "base"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateSandbox(ctx, e2bapi.NewSandbox{TemplateID: "base"})
	if !errors.Is(err, errdefs.ErrQuota) || errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("past the concurrency limit: %v, want quota", err)
	}
	noKey(t, err)

	wrong, err := e2bapi.New(e2bapi.Options{APIURL: f.URL(), APIKey: "e2b_not" + testKey})
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.ListSandboxes(ctx, e2bapi.ListOptions{})
	if !errors.Is(err, errdefs.ErrProviderAuth) {
		t.Errorf("a wrong key: %v, want refused", err)
	}
	noKey(t, err)
	if strings.Contains(err.Error(), "e2b_not") {
		t.Errorf("the error holds the key: %v", err)
	}
	if _, err := e2bapi.New(e2bapi.Options{APIURL: f.URL()}); !errors.Is(err, errdefs.ErrProviderAuth) {
		t.Errorf("no key: %v, want refused", err)
	}

	// Nothing answers at all.
	gone, err := e2bapi.New(e2bapi.Options{APIURL: "http://127.0.0.1:1", APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	_, err = gone.GetSandbox(ctx, "i123")
	if !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Errorf("no server: %v, want retryable", err)
	}
	noKey(t, err)
}

// TestValidatorRefusesWrongCase proves the fake's check: requests that
// name a field in the wrong case are refused, and recorded.
func TestValidatorRefusesWrongCase(t *testing.T) {
	f, err := e2bfake.New(t.Context(), e2bfake.Options{Farm: farm, APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, body := range []string{
		`{"templateId":"base"}`,                     // a required field miscased
		`{"templateID":"base","envvars":{"A":"b"}}`, // an optional one
		`{"templateID":"base","timeout":"30"}`,      // a type
		`{"templateID":"base","metadata":{"a":1}}`,  // a value's type
	} {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", f.URL()+"/sandboxes", strings.NewReader(body))
		req.Header.Set("X-API-Key", testKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: answered %d %s, want 400", body, resp.StatusCode, msg)
		}
		if v := f.Violations(); len(v) != 1 {
			t.Errorf("%s: violations %q, want one", body, v)
		}
	}
	if got := f.Sandboxes(); len(got) != 0 {
		t.Errorf("refused requests made sandboxes %v", got)
	}
	if f.Requests("POST /sandboxes") != 4 {
		t.Errorf("the fake counted %d creates, want 4", f.Requests("POST /sandboxes"))
	}
}
