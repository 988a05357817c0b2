package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/internal/termtext"
)

// The workflow types of this package. Every berth workflow type is
// named berth.<Name> (this package's) or berth.<pkg>.<Name> (another
// package's: berth.agent.Session, berth.session.Manager), and started
// by that name.
const (
	RunWorkflowName     = "berth.Run"
	SandboxWorkflowName = "berth.Sandbox"
	ReaperWorkflowName  = "berth.Reaper"
	CatalogWorkflowName = "berth.Catalog"
)

// legacyNames are the names workers registered these workflows under
// before berth.<Name>, by the name that replaced them. They stay
// registered so that executions already running on a server (a sandbox
// of days, its next run after continuing as new) carry on; nothing
// starts them by these names.
var legacyNames = map[string]string{
	"Run":       RunWorkflowName,
	"Sandbox":   SandboxWorkflowName,
	"Reaper":    ReaperWorkflowName,
	"Snapshots": CatalogWorkflowName,
	"Providers": CatalogWorkflowName,
}

// LegacyName says whether name is an old name of one of this package's
// workflows, and which name replaced it.
func LegacyName(name string) (string, bool) {
	now, ok := legacyNames[name]
	return now, ok
}

// OldNames are the legacy names of the workflow named name, sorted.
func OldNames(name string) []string {
	var old []string
	for o, now := range legacyNames {
		if now == name {
			old = append(old, o)
		}
	}
	slices.Sort(old)
	return old
}

// Register registers this package's workflows on w under their names,
// and under their legacy ones.
func Register(w worker.WorkflowRegistry) {
	// The legacy names first: the last name a function is registered
	// under is the one its continue-as-new and child starts resolve to.
	for name, wf := range map[string]any{
		"Run": Run, "Sandbox": Sandbox, "Reaper": Reaper, "Snapshots": Snapshots, "Providers": Providers,
	} {
		w.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: name})
	}
	w.RegisterWorkflowWithOptions(Run, workflow.RegisterOptions{Name: RunWorkflowName})
	w.RegisterWorkflowWithOptions(Sandbox, workflow.RegisterOptions{Name: SandboxWorkflowName})
	w.RegisterWorkflowWithOptions(HostReaper, workflow.RegisterOptions{Name: ReaperWorkflowName})
	w.RegisterWorkflowWithOptions(Catalog, workflow.RegisterOptions{Name: CatalogWorkflowName})
}

// MaxSummary bounds a workflow's summary (its StaticSummary, what the
// Web UI and the temporal CLI show of it), in bytes.
const MaxSummary = 200

// Summary is a workflow's summary made of a format and its arguments:
// the arguments, which a caller, a sandbox or a model chose, are made
// safe to show (termtext.Line), and the whole is one line of at most
// MaxSummary bytes.
func Summary(format string, args ...any) string {
	for i, a := range args {
		if s, ok := a.(string); ok {
			args[i] = termtext.Line(s, MaxSummary)
		}
	}
	return termtext.Line(fmt.Sprintf(format, args...), MaxSummary)
}

// where names a provider and its image, if any: "docker (python:3.12)".
func where(provider, image string) string {
	if image == "" {
		return provider
	}
	return provider + " (" + image + ")"
}

// RunSummary is the summary of a Run: its provider and image, and its
// command. Never its environment, files or input.
func RunSummary(in RunInput) string {
	return Summary("run on %s: %s", where(in.Provider, in.Image), commandLine(in.Argv))
}

// SandboxSummary is the summary of a standalone Sandbox: its provider
// and image, and the snapshot it starts from. Never its environment.
func SandboxSummary(in SandboxInput) string {
	from := ""
	if in.FromSnapshot != "" {
		from = " from snapshot " + in.FromSnapshot
		if in.OwnSnapshot {
			from = " forked from " + in.FromSnapshot
		}
	}
	return Summary("sandbox on %s%s", where(in.Provider, in.Image), from)
}

// CatalogSummary is the summary of the catalog of queue.
func CatalogSummary(queue string) string {
	return Summary("catalog of queue %s: providers and snapshots", queue)
}

// ReaperSummary is the summary of the reaper of a host's queue.
func ReaperSummary(in ReaperInput) string {
	return Summary("reaper of host %s, every %v", in.Queue, in.Every)
}

// commandLine shows argv as a shell would read it back: an argument
// with blanks, quotes or nothing in it is quoted.
func commandLine(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = a
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`;&|<>*?()") {
			parts[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(parts, " ")
}

// keepDetails shows summary as the workflow's current details (the
// Web UI's "Current Details"): the server does not carry a
// StaticSummary over continue-as-new, so a long-lived workflow states
// what it is in every run.
func keepDetails(ctx workflow.Context, summary string) {
	workflow.SetCurrentDetails(ctx, summary)
}

// durationOr is d, or def when d is not positive.
func durationOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
