package agentcore_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/agentcore"
	"github.com/berth-dev/berth/provider/agentcore/agentcorefake"
	"github.com/berth-dev/berth/provider/remote"
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
	if _, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatalf("exec before the end: %v", err)
	}
	time.Sleep(time.Until(m.ExpiresAt) + time.Second)
	_, err = sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, errdefs.ErrSandboxLost) {
		t.Errorf("exec after the session's end: %v, want ErrSandboxLost", err)
	}
}
