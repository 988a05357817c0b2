package activities

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/temporal"
	"gocloud.dev/blob/fileblob"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/snapshot"
)

// countingProvider counts the sandboxes it is asked to create.
type countingProvider struct {
	provider.Provider
	creates atomic.Int32
}

func (p *countingProvider) Create(ctx context.Context, spec provider.Spec) (provider.Sandbox, error) {
	p.creates.Add(1)
	return p.Provider.Create(ctx, spec)
}

// TestBadInputIsFinal: what a retry cannot cure fails at once, with a
// non-retryable application error typed by its kind, and a limit no
// sandbox can start under never reaches the provider.
func TestBadInputIsFinal(t *testing.T) {
	f := newFixture(t)
	counting := &countingProvider{Provider: f.acts.Providers["linux"]}
	f.acts.Providers["linux"] = counting
	snaps, err := fileblob.OpenBucket(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { snaps.Close() })
	f.acts.Snapshots = snapshot.New(snaps)
	local := f.ref
	local.Queue = f.acts.HostQueue
	tests := []struct {
		name     string
		activity any
		in       any
		kind     errdefs.Kind
	}{
		{"create with 1 MiB of memory", f.acts.Create, CreateInput{Provider: "linux", Spec: provider.Spec{Resources: provider.Resources{Memory: 1 << 20}}}, errdefs.BadInput},
		{"create with 2 pids", f.acts.Create, CreateInput{Provider: "linux", Spec: provider.Spec{Resources: provider.Resources{Pids: 2}}}, errdefs.BadInput},
		{"create with negative CPU", f.acts.Create, CreateInput{Provider: "linux", Spec: provider.Spec{Resources: provider.Resources{CPU: -1}}}, errdefs.BadInput},
		{"unknown provider", f.acts.Create, CreateInput{Provider: "nimbus"}, errdefs.BadInput},
		{"exec without a command id", f.acts.Exec, ExecInput{Sandbox: f.ref, Argv: []string{"true"}}, errdefs.BadInput},
		{"local exec without a command id", f.acts.ExecLocal, ExecInput{Sandbox: local, Argv: []string{"true"}}, errdefs.BadInput},
		{"restore of an unknown snapshot", f.acts.Restore, RestoreInput{Sandbox: f.ref, Snapshot: "no-such-snapshot"}, errdefs.NotFound},
		{"read outside the workspace", f.acts.ReadFile, ReadFileInput{Sandbox: f.ref, Path: "/etc/passwd"}, errdefs.BadInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.env.ExecuteActivity(tt.activity, tt.in)
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) {
				t.Fatalf("got %v, want an application error", err)
			}
			if appErr.Type() != string(tt.kind) {
				t.Errorf("error type %q, want %q (%v)", appErr.Type(), tt.kind, err)
			}
			if !appErr.NonRetryable() {
				t.Errorf("retryable: %v", err)
			}
			if errors.Unwrap(appErr) != nil {
				t.Errorf("the error carries its cause, which repeats its message: %v", err)
			}
		})
	}
	if n := counting.creates.Load(); n != 0 {
		t.Errorf("the provider was asked to create %d sandboxes from bad input", n)
	}
}
