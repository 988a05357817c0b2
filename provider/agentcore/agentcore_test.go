package agentcore_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/agentcore"
	"github.com/berth-dev/berth/provider/agentcore/agentcorefake"
	"github.com/berth-dev/berth/provider/remote"
	"github.com/berth-dev/berth/provider/remote/remotefake"
)

func newAPI(t *testing.T, f *agentcorefake.Server) *agentcore.API {
	t.Helper()
	awsEnv(t)
	a, err := agentcore.New(t.Context(), agentcore.Config{EndpointURL: f.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func create(t *testing.T, a *agentcore.API, name string, labels map[string]string) remote.Machine {
	t.Helper()
	m, err := a.Create(t.Context(), remote.CreateRequest{Name: name, Labels: labels, Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Delete(t.Context(), m) })
	return m
}

// TestExec: a sandbox made through the provider runs commands, with
// their output and input, through the relay.
func TestExec(t *testing.T) {
	f := newFake(t, agentcorefake.Options{})
	p := openProvider(t, settings(t, f))
	sb, err := p.Create(t.Context(), provider.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	var out, errb bytes.Buffer
	r, err := sb.Exec(t.Context(), provider.ExecRequest{Shell: "echo hello; echo oops >&2; exit 3", Stdout: &out, Stderr: &errb})
	if err != nil || r.ExitCode != 3 || out.String() != "hello\n" || errb.String() != "oops\n" {
		t.Fatalf("exec: %+v, %v, stdout %q, stderr %q", r, err, out.String(), errb.String())
	}
	in := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	out.Reset()
	r, err = sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"wc", "-c"}, Stdin: strings.NewReader(in), Stdout: &out})
	if err != nil || r.ExitCode != 0 || strings.TrimSpace(out.String()) != "1048576" {
		t.Fatalf("wc -c of 1 MiB: %+v, %v, %q", r, err, out.String())
	}
	t.Logf("round trips: %d (invoke %d)", f.AllRequests(), f.Requests("InvokeCodeInterpreter"))
	var big bytes.Buffer
	r, err = sb.Exec(t.Context(), provider.ExecRequest{Shell: "head -c 5000000 /dev/zero", Stdout: &big})
	if err != nil || r.ExitCode != 0 || big.Len() != 5000000 {
		t.Fatalf("5 MB of output: %+v, %v, %d bytes", r, err, big.Len())
	}
}

// TestCreateAfterLostAnswer: a start whose answers are all lost (the
// SDK sends it again, with the same client token) fails; the Create
// retried finds the session by name and writes its labels: the fake
// holds one session, berth's.
func TestCreateAfterLostAnswer(t *testing.T) {
	f := newFake(t, agentcorefake.Options{})
	a := newAPI(t, f)
	f.Inject(agentcorefake.Fault{Op: "StartCodeInterpreterSession", Drop: true, Times: 10})
	req := remote.CreateRequest{Name: "berth-lost", Labels: map[string]string{"berth.sandbox": "lost"}, Lifetime: time.Hour}
	if _, err := a.Create(t.Context(), req); !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Fatalf("a Create whose answers were lost: %v, want ErrProviderUnavailable", err)
	}
	if n := f.Requests("StartCodeInterpreterSession"); n < 2 {
		t.Errorf("the SDK sent the start %d times, want it retried", n)
	}
	if n := len(f.Sessions()); n != 1 {
		t.Fatalf("%d sessions after starts with one client token, want 1", n)
	}
	f.Inject(agentcorefake.Fault{Op: "StartCodeInterpreterSession", Exception: "InternalServerException", Times: 100})
	m, err := a.Create(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Delete(t.Context(), m) })
	if ids := f.Sessions(); len(ids) != 1 || ids[0] != m.ID || m.Labels["berth.sandbox"] != "lost" {
		t.Errorf("the retried Create: %+v; sessions %v", m, ids)
	}
	if got, err := a.Find(t.Context(), "berth-lost"); err != nil || got.ID != m.ID || got.Labels["berth.sandbox"] != "lost" {
		t.Errorf("Find after the retry: %+v, %v", got, err)
	}
	// A second API, a restarted worker's, knows nothing: it lists.
	b := newAPI(t, f)
	if got, err := b.Find(t.Context(), "berth-lost"); err != nil || got.ID != m.ID || got.Labels["berth.sandbox"] != "lost" {
		t.Errorf("Find by another API: %+v, %v", got, err)
	}
	if err := a.Delete(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(t.Context(), m); err != nil {
		t.Errorf("deleting a session twice: %v, want nil", err)
	}
	if _, err := b.Find(t.Context(), "berth-lost"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Find of a stopped session: %v, want not found", err)
	}
}

// TestFindAndList: List reads each session's labels (one readFiles,
// once per API) and keeps those that carry all asked; a session whose
// name is not berth's, or that has no labels, is not listed.
func TestFindAndList(t *testing.T) {
	f := newFake(t, agentcorefake.Options{})
	a := newAPI(t, f)
	before := time.Now().Add(-time.Second)
	m1 := create(t, a, "berth-find-1", map[string]string{"berth.sandbox": "find-1", "owner": "t"})
	m2 := create(t, a, "berth-find-2", map[string]string{"berth.sandbox": "find-2", "owner": "other"})
	_ = create(t, a, "not-berths", map[string]string{"owner": "t"})
	b := newAPI(t, f)
	list, err := b.List(t.Context(), map[string]string{"owner": "t"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != m1.ID || list[0].CreatedAt.Before(before) || list[0].ExpiresAt.Sub(list[0].CreatedAt) != time.Hour {
		t.Errorf("List by owner t: %+v, want berth-find-1 alone, an hour long", list)
	}
	reads := f.Requests("readFiles")
	if all, err := b.List(t.Context(), nil); err != nil || len(all) != 2 {
		t.Errorf("List of all: %d, %v; want 2", len(all), err)
	}
	if n := f.Requests("readFiles") - reads; n != 0 {
		t.Errorf("a second List read %d labels files, want none (they do not change)", n)
	}
	if !f.Vanish(m2.ID) {
		t.Fatal("Vanish")
	}
	if _, err := b.Find(t.Context(), "berth-find-2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Find of a vanished session: %v, want not found", err)
	}
	if _, err := a.Find(t.Context(), "berth-find-2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Find of a vanished session the API knew: %v, want not found", err)
	}
}

// TestErrors: the service's refusals reach berth in its kinds, in one
// line, with no credential in them.
func TestErrors(t *testing.T) {
	f := newFake(t, agentcorefake.Options{MaxSessions: 1})
	a := newAPI(t, f)
	m := create(t, a, "berth-err-1", nil)
	req := remote.CreateRequest{Name: "berth-err-2", Lifetime: time.Hour}
	_, err := a.Create(t.Context(), req)
	checkErr(t, "over the quota", err, errdefs.ErrQuota)
	f.Inject(agentcorefake.Fault{Op: "ListCodeInterpreterSessions", Exception: "ThrottlingException", Times: 3})
	_, err = a.List(t.Context(), nil)
	checkErr(t, "throttled", err, errdefs.ErrProviderUnavailable)
	var e *agentcore.Error
	if !errors.As(err, &e) || e.RetryAfter <= 0 {
		t.Errorf("throttled: %#v, want a RetryAfter", err)
	}
	f.Inject(agentcorefake.Fault{Op: "writeFiles", Exception: "AccessDeniedException"})
	err = a.Start(t.Context(), m, []string{"true", "--listen", ":1"}, nil)
	checkErr(t, "access denied", err, errdefs.ErrProviderAuth)
	_, err = a.Find(t.Context(), "berth-none")
	checkErr(t, "no such session", err, errdefs.ErrNotFound)
	err = a.Delete(t.Context(), remote.Machine{ID: "nosuchsession"})
	if err != nil {
		t.Errorf("Delete of a session that is not there: %v, want nil", err)
	}
	_, err = a.Create(t.Context(), remote.CreateRequest{Name: strings.Repeat("x", 101)})
	checkErr(t, "a long name", err, errdefs.ErrBadInput)

	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong/secret/key/of/the/test")
	bad, err := agentcore.New(t.Context(), agentcore.Config{EndpointURL: f.URL()})
	if err != nil {
		t.Fatal(err)
	}
	err = bad.Check(t.Context())
	checkErr(t, "a wrong secret key", err, errdefs.ErrProviderAuth)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWNKEY000000")
	t.Setenv("AWS_SECRET_ACCESS_KEY", testSecret)
	unknown, err := agentcore.New(t.Context(), agentcore.Config{EndpointURL: f.URL()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = unknown.List(t.Context(), nil)
	checkErr(t, "an unknown key", err, errdefs.ErrProviderAuth)
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	_, err = agentcore.New(t.Context(), agentcore.Config{EndpointURL: f.URL()})
	checkErr(t, "no credentials", err, errdefs.ErrProviderAuth)
}

func checkErr(t *testing.T, what string, err, kind error) {
	t.Helper()
	switch {
	case !errors.Is(err, kind):
		t.Errorf("%s: %v, want %v", what, err, kind)
	case strings.Contains(err.Error(), "\n"):
		t.Errorf("%s: %q is more than one line", what, err)
	case strings.Contains(err.Error(), testSecret) || strings.Contains(err.Error(), "wrong/secret"):
		t.Errorf("%s: %q holds the secret key", what, err)
	}
}

// TestNoSecretOutside: neither the AWS credentials nor the daemon's
// bearer token is in a command the session runs (its argv), nor in the
// provider's log, even when a create fails and its session's stop
// fails too.
func TestNoSecretOutside(t *testing.T) {
	f := newFake(t, agentcorefake.Options{})
	pc := settings(t, f)
	var logs bytes.Buffer
	ctx := provider.WithLogger(t.Context(), slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	p, err := provider.Open(ctx, agentcore.Name, pc)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(ctx, provider.Spec{Env: map[string]string{"GIVEN": "to commands"}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if r, err := sb.Exec(ctx, provider.ExecRequest{Shell: "echo $GIVEN", Stdout: &out}); err != nil || r.ExitCode != 0 || out.String() != "to commands\n" {
		t.Errorf("exec: %+v, %v, %q", r, err, out.String())
	}
	sb.Destroy(ctx)
	f.Inject(agentcorefake.Fault{Op: "startCommandExecution", Exception: "AccessDeniedException", Message: "denied " + testSecret})
	f.Inject(agentcorefake.Fault{Op: "StopCodeInterpreterSession", Exception: "InternalServerException", Times: 3})
	_, err = p.Create(ctx, provider.Spec{})
	checkErr(t, "a create whose daemon cannot start", err, errdefs.ErrProviderAuth)
	// The daemon's token is an HMAC of the session's name under the
	// secret: found in the start file only, never in a command.
	for _, cmd := range f.Commands() {
		for _, bad := range []string{testSecret, testKeyID, "the agentcore tests' secret", `"token"`, "BERTH_SANDBOXD_CONFIG="} {
			if strings.Contains(cmd, bad) {
				t.Errorf("a command holds %q: %.200s", bad, cmd)
			}
		}
	}
	calls := 0
	for _, cmd := range f.Commands() {
		_, rest, ok := strings.Cut(cmd, "<<'BERTH_RELAY'\n")
		if !ok {
			continue
		}
		line, _, _ := strings.Cut(rest, "\n")
		raw, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			t.Fatalf("a relay call that is not base64: %.100s", line)
		}
		calls++
		if bytes.Contains(raw, []byte("Authorization")) || bytes.Contains(raw, []byte("Bearer")) {
			t.Errorf("a relay call carries the daemon's token: %.300s", raw)
		}
	}
	if calls == 0 {
		t.Error("the fake saw no relay call")
	}
	if !strings.Contains(logs.String(), "remote: deleting a machine") {
		t.Errorf("the log has not the failed create's: %s", logs.String())
	}
	for _, bad := range []string{testSecret, testKeyID} {
		if strings.Contains(logs.String(), bad) {
			t.Errorf("the log holds %q", bad)
		}
	}
}

// TestCheck: one listing proves the service answers and takes the
// credentials.
func TestCheck(t *testing.T) {
	f := newFake(t, agentcorefake.Options{})
	p := openProvider(t, settings(t, f))
	c, ok := p.(provider.Checker)
	if !ok {
		t.Fatalf("%T is no provider.Checker", p)
	}
	start := f.AllRequests()
	if err := c.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := f.AllRequests() - start; n != 1 {
		t.Errorf("Check took %d round trips, want 1", n)
	}
	f.Inject(agentcorefake.Fault{Exception: "UnrecognizedClientException", Times: 5})
	checkErr(t, "Check refused", c.Check(t.Context()), errdefs.ErrProviderAuth)
}

// TestHardLifetime: a session ends at its timeout, the service's
// longest (shortened here, in the fake and the API alike), however long
// the sandbox's lifetime: berth sees its sandbox lost.
func TestHardLifetime(t *testing.T) {
	const hard = 6 * time.Second
	f := newFake(t, agentcorefake.Options{MaxTimeout: hard})
	awsEnv(t)
	api, err := agentcore.New(t.Context(), agentcore.Config{EndpointURL: f.URL(), MaxLifetime: hard})
	if err != nil {
		t.Fatal(err)
	}
	p := remote.New(api, remote.Config{DaemonPath: daemon, Secret: []byte("the hard lifetime's secret")})
	sb, err := p.Create(t.Context(), provider.Spec{Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	m := sb.(interface{ Machine() remote.Machine }).Machine()
	if got := m.ExpiresAt.Sub(m.CreatedAt); got != hard {
		t.Errorf("the session's ExpiresAt is %v after its start, want %v", got, hard)
	}
	// The sandbox's lifetime is the one asked: its session's end is the
	// machine's, which the main session re-creates before.
	if info, err := sb.Info(t.Context()); err != nil || info.ExpiresAt.Sub(info.CreatedAt) != time.Hour {
		t.Errorf("Info: ExpiresAt %v after the start, %v; want the lifetime asked", info.ExpiresAt.Sub(info.CreatedAt), err)
	}
	if _, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatalf("exec before the end: %v", err)
	}
	time.Sleep(time.Until(m.ExpiresAt) + time.Second)
	_, err = sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, errdefs.ErrSandboxLost) {
		t.Errorf("exec after the session's end: %v, want ErrSandboxLost", err)
	}
}

// TestUploadInPieces: a file larger than a writeFiles of the API goes
// in pieces, joined in the session into the whole file, mode 0755, and
// the API's directory is root's alone.
func TestUploadInPieces(t *testing.T) {
	f := newFake(t, agentcorefake.Options{})
	awsEnv(t)
	a, err := agentcore.New(t.Context(), agentcore.Config{EndpointURL: f.URL(), UploadChunk: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	m := create(t, a, "berth-upload", nil)
	data := bytes.Repeat([]byte("0123456789abcdef"), 5<<16+3) // 5 MiB and 48 bytes
	writes := f.Requests("writeFiles")
	if err := a.Upload(t.Context(), m, "/opt/berth/bin/tool", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if n := f.Requests("writeFiles") - writes; n != 6 {
		t.Errorf("%d writeFiles for 5 MiB in pieces of 1 MiB, want 6", n)
	}
	r, err := f.Machine(m.ID).ReadFile(t.Context(), "/opt/berth/bin/tool")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if !bytes.Equal(got, data) {
		t.Errorf("the uploaded file: %d bytes, want %d", len(got), len(data))
	}
	p, err := f.Machine(m.ID).Start(t.Context(), remotefake.Command{Argv: []string{"stat", "-c", "%a %U", "/opt/berth/bin/tool", "/opt/berth-agentcore"}})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p.Stdout())
	p.Wait()
	if string(out) != "755 root\n700 root\n" {
		t.Errorf("modes: %q", out)
	}
	if ls, _ := f.Machine(m.ID).ReadFile(t.Context(), "/opt/berth/bin/tool.part0"); ls != nil {
		ls.Close()
		t.Error("a piece is left beside the file")
	}
}
