package hostworker

import (
	"regexp"
	"testing"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/workflows"
)

// registry records the names workflows are registered under.
type registry struct{ names map[string]bool }

func (r *registry) RegisterWorkflow(any) { r.names["(its Go function's name)"] = true }
func (r *registry) RegisterWorkflowWithOptions(w any, o workflow.RegisterOptions) {
	r.names[o.Name] = true
}
func (r *registry) RegisterDynamicWorkflow(any, workflow.DynamicRegisterOptions) {}

// scheme is how every berth workflow type is named: berth.<Name>, or
// berth.<pkg>.<Name>.
var scheme = regexp.MustCompile(`^berth\.([a-z]+\.)?[A-Z][A-Za-z]*$`)

// TestWorkflowNames: every workflow type a host registers follows the
// scheme, but for the legacy names kept for executions already running,
// each of which names one that does.
func TestWorkflowNames(t *testing.T) {
	r := &registry{names: map[string]bool{}}
	registerWorkflows(r, nil)
	for _, want := range []string{workflows.RunWorkflowName, workflows.SandboxWorkflowName, workflows.ReaperWorkflowName,
		workflows.CatalogWorkflowName, "berth.agent.Session", "berth.session.Manager"} {
		if !r.names[want] {
			t.Errorf("%s is not registered", want)
		}
	}
	for name := range r.names {
		if scheme.MatchString(name) {
			continue
		}
		now, legacy := workflows.LegacyName(name)
		switch {
		case !legacy:
			t.Errorf("workflow type %q is not named berth.<Name> or berth.<pkg>.<Name>", name)
		case !r.names[now]:
			t.Errorf("legacy name %q stands for %q, which is not registered", name, now)
		}
	}
}
