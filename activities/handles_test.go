package activities

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"
	"github.com/berth-dev/berth/provider"
)

// handleCounter counts the handles asked of a real provider.
type handleCounter struct {
	provider.Provider
	gets atomic.Int32
}

func (p *handleCounter) Get(ctx context.Context, id string) (provider.Sandbox, error) {
	p.gets.Add(1)
	return p.Provider.Get(ctx, id)
}

// TestExecKeepsHandle: the commands of a sandbox share one handle from
// the provider. A sandbox destroyed and made again under the same id
// gets a new one; destroyed behind the worker's back, a command in it
// fails as not found (or lost), and the next, in the sandbox made
// again, runs through a new handle.
func TestExecKeepsHandle(t *testing.T) {
	f := newFixture(t)
	p := &handleCounter{Provider: f.acts.Providers["linux"]}
	f.acts.Providers["linux"] = p
	for i, id := range []string{"one", "two", "three"} {
		if out := f.execLocal(t, ExecInput{Sandbox: f.ref, ID: id, Argv: []string{"/bin/true"}}); out.Handed || out.Elsewhere {
			t.Fatalf("%s: %+v", id, out)
		}
		if out := f.exec(t, ExecInput{ID: id + "-activity", Argv: []string{"/bin/true"}}); out.ExitCode != 0 {
			t.Fatalf("%s as an activity: %+v", id, out)
		}
		if got := p.gets.Load(); got != 1 {
			t.Fatalf("after %d commands, %d handles asked of the provider; want 1", 2*(i+1), got)
		}
	}

	// Destroyed and made again: the handle of the sandbox destroyed is
	// not used for the new one.
	if _, err := f.env.ExecuteActivity(f.acts.Destroy, f.ref); err != nil {
		t.Fatal(err)
	}
	if _, err := f.env.ExecuteActivity(f.acts.Create, CreateInput{Provider: "linux", Spec: provider.Spec{ID: f.ref.ID}}); err != nil {
		t.Fatal(err)
	}
	if out := f.exec(t, ExecInput{ID: "new", Shell: "echo new"}); string(out.Stdout.Inline) != "new\n" {
		t.Errorf("a command in the sandbox made again: %+v", out)
	}

	// Destroyed by another hand (the provider itself): a command fails,
	// and the next, in the sandbox made again, does not use its handle.
	sb, err := p.Provider.Get(t.Context(), f.ref.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, err = f.env.ExecuteActivity(f.acts.Exec, ExecInput{Sandbox: f.ref, ID: "gone", Argv: []string{"/bin/true"}})
	if kind := errdefs.KindOf(temporalerr.From(err)); kind != errdefs.NotFound && kind != errdefs.SandboxLost {
		t.Fatalf("a command in a destroyed sandbox: %v (kind %s), want not found or lost", err, kind)
	}

	if _, err := f.env.ExecuteActivity(f.acts.Create, CreateInput{Provider: "linux", Spec: provider.Spec{ID: f.ref.ID}}); err != nil {
		t.Fatal(err)
	}
	before := p.gets.Load()
	out := f.exec(t, ExecInput{ID: "again", Shell: "echo again"})
	if string(out.Stdout.Inline) != "again\n" {
		t.Errorf("a command in the sandbox made again: %+v", out)
	}
	if p.gets.Load() == before {
		t.Errorf("the command in the sandbox made again ran through the handle of the destroyed one")
	}
}
