package sandbox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
)

// hardLimited is a provider whose service ends every sandbox after
// limit, as AgentCore's and Modal's do, by its Capabilities.
type hardLimited struct {
	provider.Provider
	limit time.Duration
}

func (h hardLimited) Capabilities() provider.Capabilities {
	c := h.Provider.Capabilities()
	c.MaxLifetime = h.limit
	return c
}

// creations counts the Create activities env starts.
func creations(env *testsuite.TestWorkflowEnvironment) func() int {
	var mu sync.Mutex
	n := 0
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		if info.ActivityType.Name == "Create" {
			mu.Lock()
			n++
			mu.Unlock()
		}
	})
	return func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// TestMovedBeforeServiceEnds: on a provider whose service ends its
// sandboxes after an hour, a sandbox idle for 2 h 20 min is moved to a
// new sandbox twice (at 50 min and at 1 h 40 min, each 10 min before its
// end), with its workspace, and the next command never sees a loss. On
// a provider without such a limit, nothing moves.
func TestMovedBeforeServiceEnds(t *testing.T) {
	for _, c := range []struct {
		name    string
		limit   time.Duration
		creates int
	}{{"limited", time.Hour, 3}, {"unlimited", 0, 1}} {
		t.Run(c.name, func(t *testing.T) {
			p := berthtest.Provider(t)
			env, _ := berthtest.WorkflowEnvWith(t, map[string]provider.Provider{"linux": hardLimited{p, c.limit}})
			created := creations(env)
			var first string
			wf := func(ctx workflow.Context) (string, error) {
				sbx, err := New(ctx, Provider{Name: "linux"}, WithIdleTimeout(NoIdleTimeout), WithHibernateAfter(NoIdleTimeout))
				if err != nil {
					return "", err
				}
				defer sbx.Stop(ctx)
				first = sbx.ID()
				if _, err := sbx.Exec(ctx, "mkdir d && echo kept > d/f && ln -s d/f link && : > empty"); err != nil {
					return "", err
				}
				if err := workflow.Sleep(ctx, 2*time.Hour+20*time.Minute); err != nil {
					return "", err
				}
				if sbx.State() != StateRunning {
					return "", errors.New("not running: " + string(sbx.State()))
				}
				res, err := sbx.Exec(ctx, "cat link; stat -c %s empty")
				return res.Stdout, err // a LostError fails the test here
			}
			env.RegisterWorkflow(wf)
			env.ExecuteWorkflow(wf)
			var out string
			must(t, env.GetWorkflowResult(&out))
			if out != "kept\n0\n" {
				t.Errorf("after the moves: %q, want the workspace as it was", out)
			}
			if n := created(); n != c.creates {
				t.Errorf("%d sandboxes made, want %d", n, c.creates)
			}
			if c.limit > 0 {
				if st := providerState(t, p, first); st != "gone" {
					t.Errorf("the first sandbox is %s at the provider, want gone", st)
				}
			}
			if infos, _ := p.List(t.Context(), nil); len(infos) != 0 {
				t.Errorf("left behind: %v", infos)
			}
		})
	}
}

// TestPausedHibernatedBeforeServiceEnds: a paused sandbox that its
// service would end is hibernated instead, and the next command wakes it
// with its workspace.
func TestPausedHibernatedBeforeServiceEnds(t *testing.T) {
	p := berthtest.Provider(t)
	env, _ := berthtest.WorkflowEnvWith(t, map[string]provider.Provider{"linux": hardLimited{p, time.Hour}})
	var first string
	var during State
	wf := func(ctx workflow.Context) (string, error) {
		sbx, err := New(ctx, Provider{Name: "linux"}, WithIdleTimeout(5*time.Minute), WithHibernateAfter(NoIdleTimeout))
		if err != nil {
			return "", err
		}
		defer sbx.Stop(ctx)
		first = sbx.ID()
		if _, err := sbx.Exec(ctx, "echo kept > f"); err != nil {
			return "", err
		}
		if err := workflow.Sleep(ctx, 55*time.Minute); err != nil {
			return "", err
		}
		during = sbx.State()
		res, err := sbx.Exec(ctx, "cat f")
		return res.Stdout, err
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var out string
	must(t, env.GetWorkflowResult(&out))
	if during != StateHibernated {
		t.Errorf("the paused sandbox is %s 5 min before its service's end, want hibernated", during)
	}
	if out != "kept\n" {
		t.Errorf("after waking: %q", out)
	}
	if st := providerState(t, p, first); st != "gone" {
		t.Errorf("the first sandbox is %s at the provider, want gone", st)
	}
}

// TestMaxLifetimeInRef: the Create activity says the service's limit in
// the reference only when it is shorter than the sandbox's lifetime.
func TestMaxLifetimeInRef(t *testing.T) {
	p := berthtest.Provider(t)
	acts := &activities.Activities{Providers: map[string]provider.Provider{"linux": hardLimited{p, time.Hour}},
		Outputs: berthtest.Bucket(t), GenericQueue: berthtest.Queue, HostQueue: berthtest.Queue}
	for _, c := range []struct {
		lifetime, want time.Duration
	}{{0, time.Hour}, {2 * time.Hour, time.Hour}, {30 * time.Minute, 0}} {
		ref, err := acts.Create(t.Context(), activities.CreateInput{Provider: "linux", Spec: provider.Spec{Lifetime: c.lifetime}})
		if err != nil {
			t.Fatal(err)
		}
		if ref.MaxLifetime != c.want {
			t.Errorf("lifetime %v: the reference says %v, want %v", c.lifetime, ref.MaxLifetime, c.want)
		}
		must(t, acts.Destroy(t.Context(), ref))
	}
}
