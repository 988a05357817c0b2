package workflows

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/berth-dev/berth/errdefs"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
)

// CheckExisting is for a front end whose start of a Sandbox workflow
// with id found one already there: it returns nil when that sandbox is
// running with the settings in asks for (creating it again is then a
// no-op), and an error wrapping errdefs.ErrAlreadyExists naming what
// differs otherwise, or when that workflow has ended.
func CheckExisting(ctx context.Context, c client.Client, id string, in SandboxInput) error {
	desc, err := c.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return fmt.Errorf("%w: sandbox %s existed and has ended (%s); its id cannot be used again",
			errdefs.ErrAlreadyExists, id, strings.ToLower(st.String()))
	}
	v, err := c.QueryWorkflow(ctx, id, "", QuerySandbox)
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	var st SandboxStatus
	if err := v.Get(&st); err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	if diff := st.Config.differences(in.settings()); len(diff) > 0 {
		return fmt.Errorf("%w: sandbox %s exists with other settings: %s", errdefs.ErrAlreadyExists, id, strings.Join(diff, "; "))
	}
	return nil
}

// differences names the settings in which have and want differ.
func (have SandboxInput) differences(want SandboxInput) []string {
	var diff []string
	add := func(name string, h, w any) { diff = append(diff, fmt.Sprintf("%s %v, not %v", name, h, w)) }
	if have.Provider != want.Provider {
		add("provider", have.Provider, want.Provider)
	}
	if have.Resources != want.Resources {
		add("resources", fmt.Sprintf("%+v", have.Resources), fmt.Sprintf("%+v", want.Resources))
	}
	if !maps.Equal(have.Env, want.Env) {
		diff = append(diff, "environment differs")
	}
	if !maps.Equal(have.Labels, want.Labels) {
		add("labels", have.Labels, want.Labels)
	}
	if have.MaxLifetime != want.MaxLifetime {
		add("lifetime", have.MaxLifetime, want.MaxLifetime)
	}
	if have.IdleTimeout != want.IdleTimeout {
		add("idle timeout", have.IdleTimeout, want.IdleTimeout)
	}
	if have.HibernateAfter != want.HibernateAfter {
		add("hibernate after", have.HibernateAfter, want.HibernateAfter)
	}
	if have.FromSnapshot != want.FromSnapshot || have.OwnSnapshot != want.OwnSnapshot {
		add("snapshot", have.FromSnapshot, want.FromSnapshot)
	}
	return diff
}
