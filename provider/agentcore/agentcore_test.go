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
}

var _ = errors.Is
var _ = errdefs.ErrNotFound
