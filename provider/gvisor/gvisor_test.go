package gvisor

import (
	"bytes"
	"testing"

	"github.com/berth-dev/berth/provider"
)

func create(t *testing.T, p *Provider, spec provider.Spec) *sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Destroy(t.Context()) })
	return sb.(*sandbox)
}

func sh(t *testing.T, sb provider.Sandbox, script string) string {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Shell: script, Stdout: &out, Stderr: &errb})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q: exit %d, %v; stderr: %s", script, res.ExitCode, err, errb.String())
	}
	return out.String()
}

func TestSmoke(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	sb := create(t, p, provider.Spec{ID: "smoke"})
	t.Log(sh(t, sb, "id; uname -a; echo hi > f; cat f; ls -la / /workspace; cat /etc/passwd; ulimit -a"))
}
