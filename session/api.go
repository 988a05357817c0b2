package session

import (
	"strings"
	"time"

	"github.com/berth-dev/berth/provider"
)

// The manager workflow's name, its default id, and the names of its
// Updates, Signal and Query. Arguments and results are JSON.
const (
	WorkflowName     = "berth.session.Manager"
	DefaultManagerID = "berth-sessions"
	// ManagerSummary is the manager's summary, the StaticSummary its
	// starters give it.
	ManagerSummary = "the coding agent's sessions"

	UpdateCreate  = "berth.session.create"  // CreateRequest -> Info
	UpdateRename  = "berth.session.rename"  // RenameRequest -> Info
	UpdateFork    = "berth.session.fork"    // ForkRequest -> Info (the new session)
	UpdateSwitch  = "berth.session.switch"  // SwitchRequest -> Info
	UpdatePause   = "berth.session.pause"   // Ref -> Info
	UpdateResume  = "berth.session.resume"  // Ref -> Info
	UpdateDestroy = "berth.session.destroy" // DestroyRequest -> DestroyResult
	// UpdateList answers the registry after checking, with the server,
	// that the sessions it lists as live still run; QuerySessions answers
	// it as it stands, at once.
	UpdateList = "berth.session.list" // ListRequest -> []Info
	// UpdateModelStatus asks a worker serving the sessions' model what
	// it finds of it now.
	UpdateModelStatus = "berth.session.model" // nothing -> model.Status
	QuerySessions     = "berth.session.sessions"
	// SignalEnded is what a session sends its manager when its workflow
	// ends, whatever the reason: Ended.
	SignalEnded = "berth.session.ended"
	// SignalStarted is what a session sends its manager once its sandbox
	// is made (an Ended without Error): a create or a fork waits for it.
	SignalStarted = "berth.session.started"
	// SignalActive is what a session the manager paused sends it when a
	// message wakes it (an Ended without Error).
	SignalActive = "berth.session.active"
)

// Session statuses, as Info.Status gives them.
const (
	StatusCreating  = "creating"  // its workflow is being started
	StatusActive    = "active"    // it runs; its sandbox may be idle, paused or hibernated by itself
	StatusPaused    = "paused"    // paused by UpdatePause, until UpdateResume or a message
	StatusSwitching = "switching" // its workspace moves to another provider
	StatusEnded     = "ended"     // its workflow ended on its own: Error says why
)

// Info is one session as the manager lists it.
type Info struct {
	// ID is the session's short name within its manager (s1, s2, ...);
	// WorkflowID its agent.Session workflow's id: WorkflowID(manager, ID).
	ID         string    `json:"id"`
	WorkflowID string    `json:"workflow_id"`
	Title      string    `json:"title"`
	Provider   string    `json:"provider"`
	Status     string    `json:"status"`
	Approvals  bool      `json:"approvals,omitempty"`
	ForkOf     string    `json:"fork_of,omitempty"`
	Created    time.Time `json:"created"`
	// Error says why a session ended on its own.
	Error string `json:"error,omitempty"`
}

// Ref names a session: its ID, or its title when no ID matches and
// exactly one session has that title.
type Ref struct {
	Session string `json:"session"`
}

// CreateRequest starts a session. Empty fields take the agent's
// defaults (agent.SessionInput); an empty title becomes the ID.
type CreateRequest struct {
	Title    string `json:"title,omitempty"`
	Provider string `json:"provider,omitempty"`
	Image    string `json:"image,omitempty"`
	// Network, when set, is the session sandbox's network policy.
	Network      *provider.Network `json:"network,omitempty"`
	Approvals    bool              `json:"approvals,omitempty"`
	SystemPrompt string            `json:"system_prompt,omitempty"`
	MaxSteps     int               `json:"max_steps,omitempty"`
	// CheckpointEvery, CheckpointInterval and CheckpointIdle are the
	// session sandbox's checkpoint policy (berth.CheckpointPolicy's
	// Every, Interval and Idle): what its workspace comes back from
	// when its host is lost. Each one set replaces the manager's; a fork
	// keeps its source's.
	CheckpointEvery    int           `json:"checkpoint_every,omitempty"`
	CheckpointInterval time.Duration `json:"checkpoint_interval,omitempty"`
	CheckpointIdle     time.Duration `json:"checkpoint_idle,omitempty"`
	// IdleTimeout and HibernateAfter are the session sandbox's, as in
	// agent.SessionInput: zero means the manager's setting (by default
	// the sandbox package's), a negative value never.
	IdleTimeout    time.Duration `json:"idle_timeout,omitempty"`
	HibernateAfter time.Duration `json:"hibernate_after,omitempty"`
	// FromSnapshot fills the session's workspace from a snapshot (a
	// template), which stays the caller's; one that is not in the store
	// fails the create as NotFound.
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// Hibernated starts the session's sandbox hibernated: the create
	// makes nothing at a provider, and the session's first turn or
	// operation makes its sandbox (from FromSnapshot), as a hibernated
	// sandbox wakes. Many idle sessions from one template cost their
	// workflows alone.
	Hibernated bool `json:"hibernated,omitempty"`
}

// RenameRequest gives a session a new title.
type RenameRequest struct {
	Session string `json:"session"`
	Title   string `json:"title"`
}

// ForkRequest starts a new session with the conversation of an existing
// one and a copy of its workspace, on Provider (empty: the source's).
type ForkRequest struct {
	Session  string `json:"session"`
	Title    string `json:"title,omitempty"`
	Provider string `json:"provider,omitempty"`
}

// SwitchRequest moves a session's workspace to another provider.
type SwitchRequest struct {
	Session  string `json:"session"`
	Provider string `json:"provider"`
	Image    string `json:"image,omitempty"`
}

// DestroyRequest ends a session and removes it from the registry. Keep
// keeps its workspace as a snapshot first (DestroyResult names it);
// without it the workspace and the conversation are deleted.
type DestroyRequest struct {
	Session string `json:"session"`
	Keep    bool   `json:"keep,omitempty"`
}

// DestroyResult names the snapshot a kept workspace is in.
type DestroyResult struct {
	// Session is the session's id.
	Session  string `json:"session,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
}

// ListRequest asks for the registry. All lists ended sessions too.
type ListRequest struct {
	All bool `json:"all,omitempty"`
}

// Ended is the signal a session sends its manager as its workflow ends.
type Ended struct {
	WorkflowID string `json:"workflow_id"`
	// Error is why, when it did not end by UpdateDestroy.
	Error string `json:"error,omitempty"`
}

// WorkflowID is the id of the workflow of session id under the manager
// whose workflow id is manager.
func WorkflowID(manager, id string) string { return manager + "/" + id }

// IsID reports whether s has the form of a session ID (s1, s2, ...), as
// opposed to a title.
func IsID(s string) bool {
	if len(s) < 2 || s[0] != 's' || s[1] == '0' {
		return false
	}
	return strings.Trim(s[1:], "0123456789") == ""
}
