package daytonafake

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"
	"github.com/daytonaio/daytona/libs/sdk-go/pkg/options"
	"github.com/daytonaio/daytona/libs/sdk-go/pkg/types"
	toolboxapi "github.com/daytonaio/daytona/libs/toolbox-api-client-go"
)

var withTimeout = options.WithTimeout

// apiClient is the generated API client of the fake, for what the SDK
// does not call (auto-stop, last activity).
func apiClient(s *Server) (*apiclient.APIClient, context.Context) {
	cfg := apiclient.NewConfiguration()
	cfg.Servers = apiclient.ServerConfigurations{{URL: s.APIURL()}}
	return apiclient.NewAPIClient(cfg), context.WithValue(context.Background(), apiclient.ContextAccessToken, testKey)
}

// TestLifecycle creates sandboxes from a snapshot and from an image,
// gets them by id and name, lists them by labels, stops, starts and
// archives one (its files stay, its processes do not) and deletes them.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	s := newFake(t, Options{})
	c := newClient(t, s, "")
	ctx := t.Context()
	run := randomToken(4)
	a := create(t, c, types.SnapshotParams{Snapshot: "daytonaio/sandbox:0.4.3", SandboxBaseParams: types.SandboxBaseParams{
		Name: "a-" + run, Labels: map[string]string{"run": run, "kind": "a"}, EnvVars: map[string]string{"FOO": "bar"},
		AutoStopInterval: ptr(0), AutoArchiveInterval: ptr(60), AutoDeleteInterval: ptr(-1),
	}})
	b := create(t, c, types.ImageParams{Image: "python:3.12", Resources: &types.Resources{CPU: 2, Memory: 2, Disk: 4},
		SandboxBaseParams: types.SandboxBaseParams{Labels: map[string]string{"run": run, "kind": "b"}}})
	if a.State != apiclient.SANDBOXSTATE_STARTED || a.Name != "a-"+run || b.Name != b.ID {
		t.Fatalf("created %s %q (%s), %s %q", a.ID, a.Name, a.State, b.ID, b.Name)
	}
	for _, key := range []string{a.ID, a.Name} {
		got, err := c.Get(ctx, key)
		if err != nil || got.ID != a.ID || got.AutoArchiveInterval != 60 || got.AutoDeleteInterval != -1 {
			t.Fatalf("Get(%s): %+v, %v", key, got, err)
		}
	}
	api, actx := apiClient(s)
	full, _, err := api.SandboxAPI.GetSandbox(actx, b.ID).Execute()
	if err != nil || full.GetCpu() != 2 || full.GetMemory() != 2 || full.GetDisk() != 4 || full.GetUser() != "daytona" || full.BuildInfo == nil {
		t.Fatalf("GetSandbox: %+v, %v", full, err)
	}
	page, err := c.List(ctx, map[string]string{"run": run, "kind": "a"}, nil, nil)
	if err != nil || page.Total != 1 || len(page.Items) != 1 || page.Items[0].ID != a.ID {
		t.Fatalf("List by labels: %+v, %v", page, err)
	}
	one := 1
	page, err = c.List(ctx, map[string]string{"run": run}, ptr(2), &one)
	if err != nil || page.Total != 2 || page.TotalPages != 2 || page.Page != 2 || len(page.Items) != 1 || page.Items[0].ID != a.ID {
		t.Fatalf("List page 2 of 1: %+v, %v", page, err)
	}
	all, _, err := api.SandboxAPI.ListSandboxes(actx).Labels(`{"run":"` + run + `"}`).Execute()
	if err != nil || len(all) != 2 {
		t.Fatalf("ListSandboxes: %d, %v", len(all), err)
	}

	// The machine is real: the sandbox's environment, its user.
	res, err := a.Process.ExecuteCommand(ctx, `echo "$FOO $DAYTONA_SANDBOX_ID $(id -un) $HOME $(pwd)"`)
	if want := fmt.Sprintf("bar %s daytona /home/daytona /home/daytona\n", a.ID); err != nil || res.Result != want || res.ExitCode != 0 {
		t.Fatalf("ExecuteCommand: %+v, %v; want %q", res, err, want)
	}
	if err := a.FileSystem.UploadFile(ctx, []byte("kept"), "/home/daytona/kept"); err != nil {
		t.Fatal(err)
	}
	if err := a.Process.CreateSession(ctx, "bg"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Process.ExecuteSessionCommand(ctx, "bg", "sleep 1000", true, false); err != nil {
		t.Fatal(err)
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if a.State != apiclient.SANDBOXSTATE_STOPPED {
		t.Fatalf("stopped: %s", a.State)
	}
	if _, err := a.Process.ExecuteCommand(ctx, "true"); status(err) != http.StatusBadRequest || !strings.Contains(message(err), "Is the Sandbox started?") {
		t.Fatalf("the toolbox of a stopped sandbox: %v", err)
	}
	if err := a.Archive(ctx); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, a.ID, "archived", 10*time.Second)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if a.State != apiclient.SANDBOXSTATE_STARTED {
		t.Fatalf("started again: %s", a.State)
	}
	res, err = a.Process.ExecuteCommand(ctx, `cat kept; for p in /proc/[0-9]*; do cat $p/comm; done 2>/dev/null | grep -c '^sleep$'`)
	if err != nil || res.Result != "kept0\n" {
		t.Fatalf("after a stop and a start: %+v, %v", res, err)
	}
	if _, err := a.Process.GetSession(ctx, "bg"); status(err) != http.StatusNotFound {
		t.Fatalf("a session after a stop: %v, want 404", err)
	}

	if err := a.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, a.ID); status(err) != http.StatusNotFound || !strings.Contains(message(err), "not found") {
		t.Fatalf("Get after Delete: %v, want 404", err)
	}
	if err := a.Delete(ctx); status(err) != http.StatusNotFound {
		t.Fatalf("Delete again: %v, want 404", err)
	}
	for _, op := range []string{"POST /sandbox", "GET /sandbox/{sandboxIdOrName}", "GET /sandbox/paginated", "POST /toolbox/{sandboxId}/process/execute"} {
		if s.Requests(op) == 0 {
			t.Errorf("no request counted for %q", op)
		}
	}
}

// TestFiles uploads, downloads, makes folders and sets permissions, as
// the sandbox's user.
func TestFiles(t *testing.T) {
	t.Parallel()
	s := newFake(t, Options{})
	sb := create(t, newClient(t, s, ""), nil)
	ctx := t.Context()
	fs := sb.FileSystem
	data := []byte("hello\x00world\n")
	if err := fs.UploadFile(ctx, data, "/home/daytona/new/dir/f.bin"); err != nil {
		t.Fatal(err)
	}
	if err := fs.UploadFile(ctx, []byte("relative"), "rel.txt"); err != nil {
		t.Fatal(err)
	}
	got, err := fs.DownloadFile(ctx, "/home/daytona/new/dir/f.bin", nil)
	if err != nil || string(got) != string(data) {
		t.Fatalf("DownloadFile: %q, %v", got, err)
	}
	if got, err := fs.DownloadFile(ctx, "/home/daytona/rel.txt", nil); err != nil || string(got) != "relative" {
		t.Fatalf("DownloadFile of a relative upload: %q, %v", got, err)
	}
	if _, err := fs.DownloadFile(ctx, "/home/daytona/missing", nil); status(err) != http.StatusNotFound {
		t.Fatalf("DownloadFile of a missing file: %v, want 404", err)
	}
	if _, err := fs.DownloadFile(ctx, "/home/daytona", nil); status(err) != http.StatusBadRequest {
		t.Fatalf("DownloadFile of a directory: %v, want 400", err)
	}
	if err := fs.UploadFile(ctx, data, "/etc/forbidden"); status(err) != http.StatusBadRequest || !strings.Contains(message(err), "Permission denied") {
		t.Fatalf("UploadFile where the user may not write: %v, want 400 permission denied", err)
	}
	if err := fs.CreateFolder(ctx, "/home/daytona/a/b", options.WithMode("0700")); err != nil {
		t.Fatal(err)
	}
	if err := fs.SetFilePermissions(ctx, "/home/daytona/new/dir/f.bin", options.WithPermissionMode("0751")); err != nil {
		t.Fatal(err)
	}
	if err := fs.SetFilePermissions(ctx, "/home/daytona/none", options.WithPermissionMode("0751")); status(err) != http.StatusNotFound {
		t.Fatalf("SetFilePermissions of a missing file: %v, want 404", err)
	}
	if err := fs.SetFilePermissions(ctx, "/home/daytona/rel.txt", options.WithOwner("root")); status(err) != http.StatusBadRequest {
		t.Fatalf("chown by the unprivileged user: %v, want 400", err)
	}
	info, err := fs.GetFileInfo(ctx, "/home/daytona/new/dir/f.bin")
	if err != nil || info.Mode != "-rwxr-x--x" || info.Size != int64(len(data)) || info.IsDirectory {
		t.Fatalf("GetFileInfo: %+v, %v", info, err)
	}
	res, err := sb.Process.ExecuteCommand(ctx, `stat -c '%U %a' /home/daytona/new /home/daytona/new/dir/f.bin /home/daytona/a/b`)
	if want := "daytona 755\ndaytona 751\ndaytona 700\n"; err != nil || res.Result != want {
		t.Fatalf("owners and modes: %q, %v; want %q", res.Result, err, want)
	}
	if err := fs.DeleteFile(ctx, "/home/daytona/a", false); status(err) != http.StatusBadRequest {
		t.Fatalf("DeleteFile of a directory, not recursive: %v", err)
	}
	if err := fs.DeleteFile(ctx, "/home/daytona/a", true); err != nil {
		t.Fatal(err)
	}
}

// TestExecute runs commands through /process/execute: the shell reads
// them, their output is stdout and stderr together, and a timeout kills
// them all.
func TestExecute(t *testing.T) {
	t.Parallel()
	s := newFake(t, Options{})
	sb := create(t, newClient(t, s, ""), nil)
	ctx := t.Context()
	res, err := sb.Process.ExecuteCommand(ctx, "echo out; echo err >&2\nif true; then exit 3; fi")
	if err != nil || res.Result != "out\nerr\n" || res.ExitCode != 3 {
		t.Fatalf("ExecuteCommand: %+v, %v", res, err)
	}
	res, err = sb.Process.ExecuteCommand(ctx, `echo "$A $(pwd)"`, options.WithCwd("/tmp"), options.WithCommandEnv(map[string]string{"A": "b"}))
	if err != nil || res.Result != "b /tmp\n" {
		t.Fatalf("ExecuteCommand with cwd and env: %+v, %v", res, err)
	}
	if _, err := sb.Process.ExecuteCommand(ctx, "true", options.WithCommandEnv(map[string]string{"A-B": "c"})); status(err) != http.StatusBadRequest {
		t.Fatalf("a bad variable name: %v, want 400", err)
	}
	start := time.Now()
	_, err = sb.Process.ExecuteCommand(ctx, "sleep 300 & sleep 300", options.WithExecuteTimeout(time.Second))
	if status(err) != http.StatusRequestTimeout || time.Since(start) > 30*time.Second {
		t.Fatalf("past its timeout: %v after %v, want 408", err, time.Since(start))
	}
	res, err = sb.Process.ExecuteCommand(ctx, `for p in /proc/[0-9]*; do cat $p/comm; done | grep -c '^sleep$' || true`)
	if err != nil || res.Result != "0\n" {
		t.Fatalf("sleeps left after the timeout: %+v, %v", res, err)
	}
}

// TestSessions runs commands in a session: in one shell, one after the
// other, an async one outliving its call, its logs apart by stream.
func TestSessions(t *testing.T) {
	t.Parallel()
	s := newFake(t, Options{})
	sb := create(t, newClient(t, s, ""), nil)
	ctx := t.Context()
	p := sb.Process
	if err := p.CreateSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := p.CreateSession(ctx, "s1"); status(err) != http.StatusConflict {
		t.Fatalf("a session twice: %v, want 409", err)
	}
	res, err := p.ExecuteSessionCommand(ctx, "s1", "cd /tmp && export V=kept && echo out && echo err >&2", false, false)
	if err != nil || res["exitCode"] != int32(0) || res["stdout"] != "out\n" || res["stderr"] != "err\n" {
		t.Fatalf("a sync command: %v, %v", res, err)
	}
	res, err = p.ExecuteSessionCommand(ctx, "s1", `echo "$(pwd) $V"; exit_code=5; (exit 4)`, false, false)
	if err != nil || res["stdout"] != "/tmp kept\n" || res["exitCode"] != int32(4) {
		t.Fatalf("the session's state: %v, %v", res, err)
	}
	start := time.Now()
	res, err = p.ExecuteSessionCommand(ctx, "s1", "echo begun; sleep 2; echo ended >&2; false", true, false)
	if err != nil || time.Since(start) > 1500*time.Millisecond {
		t.Fatalf("an async command: %v, %v after %v", res, err, time.Since(start))
	}
	id := res["id"].(string)
	cmd, err := p.GetSessionCommand(ctx, "s1", id)
	if err != nil || cmd["exitCode"] != nil || cmd["command"] != "echo begun; sleep 2; echo ended >&2; false" {
		t.Fatalf("the async command running: %v, %v", cmd, err)
	}
	stdout, stderr := make(chan string, 100), make(chan string, 100)
	streamed := make(chan error, 1)
	go func() { streamed <- p.GetSessionCommandLogsStream(ctx, "s1", id, stdout, stderr) }()
	var out, errOut strings.Builder
	for o, e := stdout, stderr; o != nil || e != nil; {
		select {
		case chunk, ok := <-o:
			if !ok {
				o = nil
			}
			out.WriteString(chunk)
		case chunk, ok := <-e:
			if !ok {
				e = nil
			}
			errOut.WriteString(chunk)
		case <-time.After(30 * time.Second):
			t.Fatal("the log stream did not end")
		}
	}
	if err := <-streamed; err != nil || out.String() != "begun\n" || errOut.String() != "ended\n" {
		t.Fatalf("the followed log: %q, %q, %v", out.String(), errOut.String(), err)
	}
	cmd, err = p.GetSessionCommand(ctx, "s1", id)
	if err != nil || cmd["exitCode"] != int32(1) {
		t.Fatalf("the async command ended: %v, %v", cmd, err)
	}
	logs, err := p.GetSessionCommandLogs(ctx, "s1", id)
	if err != nil || logs.Stdout != "begun\n" || logs.Stderr != "ended\n" || logs.Output != "\x01\x01\x01begun\n\x02\x02\x02ended\n" {
		t.Fatalf("GetSessionCommandLogs: %+v, %v", logs, err)
	}
	session, err := p.GetSession(ctx, "s1")
	if err != nil || len(session["commands"].([]toolboxapi.Command)) != 3 {
		t.Fatalf("GetSession: %v, %v", session, err)
	}
	if _, err := p.ExecuteSessionCommand(ctx, "none", "true", false, false); status(err) != http.StatusNotFound {
		t.Fatalf("a command in no session: %v, want 404", err)
	}
	if err := p.DeleteSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.GetSession(ctx, "s1"); status(err) != http.StatusNotFound {
		t.Fatalf("a deleted session: %v, want 404", err)
	}
}

// TestPreview reaches a server started in the sandbox through the
// preview proxy, with its token, and streams from it.
func TestPreview(t *testing.T) {
	t.Parallel()
	s := newFake(t, Options{Minute: 300 * time.Millisecond})
	sb := create(t, newClient(t, s, ""), types.SnapshotParams{SandboxBaseParams: types.SandboxBaseParams{AutoStopInterval: ptr(0)}})
	ctx := t.Context()
	bin, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.FileSystem.UploadFile(ctx, bin, "/home/daytona/server"); err != nil {
		t.Fatal(err)
	}
	if err := sb.FileSystem.SetFilePermissions(ctx, "/home/daytona/server", options.WithPermissionMode("0755")); err != nil {
		t.Fatal(err)
	}
	if err := sb.Process.CreateSession(ctx, "srv"); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Process.ExecuteSessionCommand(ctx, "srv", serveEnv+"=8080 ./server", true, false); err != nil {
		t.Fatal(err)
	}
	link, err := sb.GetPreviewLink(ctx, 8080)
	if err != nil || link.URL != s.PreviewURL(sb.ID, 8080) || link.Token == "" {
		t.Fatalf("GetPreviewLink: %+v, %v", link, err)
	}
	get := func(path, token string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", link.URL+path, nil)
		if token != "" {
			req.Header.Set(PreviewTokenHeader, token)
		}
		return http.DefaultClient.Do(req)
	}
	var resp *http.Response
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err = get("/pid?x=1", link.Token)
		if err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		if err == nil {
			resp.Body.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server never answered: %v", err)
		}
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasSuffix(string(body), " x=1") {
		t.Fatalf("/pid: %q", body)
	}
	if resp, err := get("/pid", "wrong"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %v, %v", resp, err)
	}
	// A request in flight is activity: the sandbox does not stop under
	// a stream that outlasts its auto-stop interval, and does once it
	// ends.
	api, actx := apiClient(s)
	if _, _, err := api.SandboxAPI.SetAutostopInterval(actx, sb.ID, 1).Execute(); err != nil {
		t.Fatal(err)
	}
	resp, err = get("/stream", link.Token)
	if err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(resp.Body)
	for i := range 15 {
		line, err := lines.ReadString('\n')
		if err != nil || line != fmt.Sprintf("line %d\n", i) {
			t.Fatalf("streamed %q, %v (state %s)", line, err, s.State(sb.ID))
		}
	}
	resp.Body.Close()
	if st := s.State(sb.ID); st != "started" {
		t.Fatalf("under a stream: %s", st)
	}
	if _, _, err := api.SandboxAPI.SetAutostopInterval(actx, sb.ID, 0).Execute(); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get(s.PreviewURL(sb.ID, 8081) + "/"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %v, %v", resp, err)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", s.PreviewURL(sb.ID, 8081)+"/", nil)
	req.Header.Set(PreviewTokenHeader, link.Token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a closed port: %v, %v", resp, err)
	}
	// A stop ends the server, and the previews answer 400 until a start.
	if err := sb.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, err := get("/pid", link.Token); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("the preview of a stopped sandbox: %v, %v", resp, err)
	}
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, err := get("/pid", link.Token); err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("the preview of a restarted sandbox whose server is gone: %v, %v", resp, err)
	}
}

// TestAutoStop proves a sandbox stops after its autoStopInterval of no
// activity, that toolbox requests and last-activity put it off, and
// that the interval can be set.
func TestAutoStop(t *testing.T) {
	t.Parallel()
	s := newFake(t, Options{Minute: 500 * time.Millisecond})
	c := newClient(t, s, "")
	sb := create(t, c, types.SnapshotParams{SandboxBaseParams: types.SandboxBaseParams{AutoStopInterval: ptr(1)}})
	ctx := t.Context()
	for range 6 {
		time.Sleep(200 * time.Millisecond)
		if _, err := sb.Process.ExecuteCommand(ctx, "true"); err != nil {
			t.Fatalf("while active: %v (state %s)", err, s.State(sb.ID))
		}
	}
	api, actx := apiClient(s)
	for range 3 {
		time.Sleep(200 * time.Millisecond)
		if _, err := api.SandboxAPI.UpdateLastActivity(actx, sb.ID).Execute(); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.State(sb.ID); st != "started" {
		t.Fatalf("active, yet %s", st)
	}
	waitState(t, s, sb.ID, "stopped", 10*time.Second)
	if err := sb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	got, _, err := api.SandboxAPI.SetAutostopInterval(actx, sb.ID, 0).Execute()
	if err != nil || got.GetAutoStopInterval() != 0 {
		t.Fatalf("SetAutostopInterval: %v, %v", got, err)
	}
	time.Sleep(time.Second)
	if st := s.State(sb.ID); st != "started" {
		t.Fatalf("with auto-stop off: %s", st)
	}
	if _, _, err := api.SandboxAPI.SetAutostopInterval(actx, sb.ID, -1).Execute(); err == nil {
		t.Fatal("a negative interval was taken")
	}
}

// TestRefusals: names are unique, quotas bounded, keys checked.
func TestRefusals(t *testing.T) {
	t.Parallel()
	s := newFake(t, Options{Quota: Quota{CPU: 2}})
	c := newClient(t, s, "")
	ctx := t.Context()
	a := create(t, c, types.SnapshotParams{SandboxBaseParams: types.SandboxBaseParams{Name: "same"}})
	if _, err := c.Create(ctx, types.SnapshotParams{SandboxBaseParams: types.SandboxBaseParams{Name: "same"}}); status(err) != http.StatusConflict || message(err) != "Sandbox with name same already exists" {
		t.Fatalf("a name twice: %v", err)
	}
	if _, err := c.Create(ctx, types.ImageParams{Image: "x", Resources: &types.Resources{CPU: 2}}); status(err) != http.StatusBadRequest || !strings.HasPrefix(message(err), "Total CPU limit exceeded. Maximum allowed: 2.") {
		t.Fatalf("past the CPU quota: %v", err)
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b := create(t, c, types.ImageParams{Image: "x", Resources: &types.Resources{CPU: 2}})
	if err := a.Start(ctx); status(err) != http.StatusBadRequest || !strings.HasPrefix(message(err), "Total CPU limit exceeded") {
		t.Fatalf("a start past the CPU quota: %v", err)
	}
	if err := b.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	bad := newClient(t, s, "wrong")
	if _, err := bad.Get(ctx, a.ID); status(err) != http.StatusUnauthorized {
		t.Fatalf("a wrong key: %v, want 401", err)
	}
	if _, err := bad.List(ctx, nil, nil, nil); status(err) != http.StatusUnauthorized {
		t.Fatalf("a wrong key: %v, want 401", err)
	}
	if s.Requests("unauthorized") != 2 {
		t.Fatalf("unauthorized requests: %d", s.Requests("unauthorized"))
	}
	if _, err := c.Create(ctx, types.SnapshotParams{Snapshot: "x"}, withTimeout(time.Minute)); err != nil {
		t.Fatalf("any snapshot: %v", err)
	}
	s2 := newFake(t, Options{Snapshots: []string{"known"}})
	if _, err := newClient(t, s2, "").Create(ctx, types.SnapshotParams{Snapshot: "unknown"}); status(err) != http.StatusBadRequest {
		t.Fatalf("an unknown snapshot: %v, want 400", err)
	}
}

// TestFaults injects a 429 with Retry-After, a lost answer, and a
// vanished sandbox.
func TestFaults(t *testing.T) {
	t.Parallel()
	s := newFake(t, Options{Latency: 5 * time.Millisecond})
	c := newClient(t, s, "")
	ctx := t.Context()
	sb := create(t, c, nil)
	s.Inject(Fault{Op: "GET /sandbox/{sandboxIdOrName}", Status: http.StatusTooManyRequests, RetryAfter: "2", Times: 2})
	for range 2 {
		_, err := c.Get(ctx, sb.ID)
		headers := headersOf(err)
		if status(err) != http.StatusTooManyRequests || headers.Get("Retry-After") != "2" {
			t.Fatalf("an injected 429: %v (%v)", err, headers)
		}
	}
	if _, err := c.Get(ctx, sb.ID); err != nil {
		t.Fatalf("after the faults: %v", err)
	}
	api, actx := apiClient(s)
	s.Inject(Fault{Op: "POST /sandbox/{sandboxIdOrName}/autostop/{interval}", Drop: true})
	if _, _, err := api.SandboxAPI.SetAutostopInterval(actx, sb.ID, 42).Execute(); err == nil {
		t.Fatal("a lost answer came")
	}
	got, _, err := api.SandboxAPI.GetSandbox(actx, sb.ID).Execute()
	if err != nil || got.GetAutoStopInterval() != 42 {
		t.Fatalf("the lost answer's request was not done: %v, %v", got.GetAutoStopInterval(), err)
	}
	s.Inject(Fault{Op: "POST /toolbox/{sandboxId}/process/execute", Status: http.StatusServiceUnavailable})
	if _, err := sb.Process.ExecuteCommand(ctx, "true"); status(err) != http.StatusServiceUnavailable {
		t.Fatalf("an injected 503 on the toolbox: %v", err)
	}
	if !s.Vanish(sb.ID) || s.Vanish(sb.ID) {
		t.Fatal("Vanish")
	}
	if _, err := c.Get(ctx, sb.ID); status(err) != http.StatusNotFound {
		t.Fatalf("a vanished sandbox: %v, want 404", err)
	}
	if _, err := sb.Process.ExecuteCommand(ctx, "true"); status(err) != http.StatusNotFound {
		t.Fatalf("the toolbox of a vanished sandbox: %v, want 404", err)
	}
}

// TestAutoArchiveAndDelete proves a stopped sandbox is archived after
// its autoArchiveInterval, or deleted after its autoDeleteInterval (an
// ephemeral one at once), and that StartDelay holds a sandbox in
// "creating" and "starting".
func TestAutoArchiveAndDelete(t *testing.T) {
	t.Parallel()
	s := newFake(t, Options{Minute: 300 * time.Millisecond, StartDelay: 500 * time.Millisecond})
	c := newClient(t, s, "")
	ctx := t.Context()
	start := time.Now()
	archived := create(t, c, types.SnapshotParams{SandboxBaseParams: types.SandboxBaseParams{AutoArchiveInterval: ptr(1)}})
	if time.Since(start) < 500*time.Millisecond {
		t.Fatalf("created in %v, under StartDelay", time.Since(start))
	}
	ephemeral := create(t, c, types.SnapshotParams{SandboxBaseParams: types.SandboxBaseParams{Ephemeral: true}})
	if ephemeral.AutoDeleteInterval != 0 {
		t.Fatalf("an ephemeral sandbox's autoDeleteInterval: %d", ephemeral.AutoDeleteInterval)
	}
	if err := archived.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Not the SDK's Stop, which would wait for a "stopped" the sandbox is
	// deleted in.
	api, actx := apiClient(s)
	if _, _, err := api.SandboxAPI.StopSandbox(actx, ephemeral.ID).Execute(); err != nil {
		t.Fatal(err)
	}
	waitState(t, s, ephemeral.ID, "", 10*time.Second)
	if st := s.State(archived.ID); st != "stopped" {
		t.Fatalf("before its auto-archive interval: %s", st)
	}
	waitState(t, s, archived.ID, "archived", 10*time.Second)
	if err := archived.StartWithTimeout(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 1500*time.Millisecond {
		t.Fatal("started again under StartDelay")
	}
}
