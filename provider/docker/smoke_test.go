package docker

import (
	"strings"
	"testing"

	"github.com/berth-dev/berth/provider"
)

func TestSmoke(t *testing.T) {
	p := newTestProvider(t, Config{})
	ctx := t.Context()
	sb, err := p.Create(ctx, provider.Spec{ID: "smoke"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	var out strings.Builder
	res, err := sb.Exec(ctx, provider.ExecRequest{Shell: "id; pwd; echo $HOME; cat /proc/self/cgroup; grep -E 'workspace|tmp|shm' /proc/self/mountinfo; ulimit -a", Stdout: &out, Stderr: &out})
	t.Logf("%+v %v\n%s", res, err, out.String())
}
