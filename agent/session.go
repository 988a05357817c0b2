package agent

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
)

// The Session workflow's name, and the names of its Updates, Signal and
// Query. Arguments and results are JSON; see docs/agent.md.
const (
	WorkflowName  = "berth.agent.Session"
	UpdateSend    = "berth.agent.send"    // SendRequest -> SendResult
	SignalMessage = "berth.agent.message" // SendRequest
	UpdateApprove = "berth.agent.approve" // ApproveRequest -> nothing
	UpdateEnd     = "berth.agent.end"     // EndRequest -> EndResult
	UpdateWait    = "berth.agent.wait"    // WaitRequest -> State
	QueryState    = "berth.agent.state"   // -> State
	// The Updates a session manager (package session) sends.
	UpdateFork   = "berth.agent.fork"   // ForkRequest -> ForkResult
	UpdateSwitch = "berth.agent.switch" // SwitchRequest -> State
	UpdatePause  = "berth.agent.pause"  // nothing -> State
	UpdateResume = "berth.agent.resume" // nothing -> State
)

// The Signals a session sends its manager (SessionInput.Manager): the
// names and the shape of package session's SignalStarted and
// SignalEnded, which this package cannot import (session is built on
// it); session's tests hold them equal.
const (
	SignalManagerStarted = "berth.session.started" // ManagerSignal
	SignalManagerEnded   = "berth.session.ended"   // ManagerSignal
	// SignalManagerActive: a session the manager paused was woken by a
	// message.
	SignalManagerActive = "berth.session.active" // ManagerSignal
)

// ManagerSignal is what a session tells its manager of itself.
type ManagerSignal struct {
	WorkflowID string `json:"workflow_id"`
	// Error says why the session ended, when it did not end by UpdateEnd.
	Error string `json:"error,omitempty"`
}

// Defaults and limits.
const (
	// DefaultModelQueue is the task queue of the model activity: the
	// default queue's, with ".model" (hostworker serves it).
	DefaultModelQueue = sandbox.DefaultQueue + ".model"
	DefaultMaxSteps   = 30
	MaxMaxSteps       = 1000
	// MaxMessage is the longest message a person may send, in bytes.
	MaxMessage = 64 << 10
	// maxStateOutput caps each tool output the state query shows (the
	// model gets up to tools.MaxOutput).
	maxStateOutput = 4 << 10
	// maxStateCalls caps the tool calls the state keeps of a turn: the
	// last ones.
	maxStateCalls = 32
	// maxStateError caps a turn's error.
	maxStateError = 1 << 10
	// maxQueued and maxQueuedBytes bound the messages waiting for their
	// turn: they are carried across continue-as-new.
	maxQueued      = 8
	maxQueuedBytes = 128 << 10
	// maxUnsent bounds the messages a failed turn leaves for the next
	// (carried too): past it the oldest of the person's go.
	maxUnsent = 512 << 10
	// keptTurns is how many finished turns the state remembers.
	keptTurns = 16
	// modelScheduleTimeout: a model call no worker picks up in this long
	// means no host serves a model.
	modelScheduleTimeout = 2 * time.Minute
)

// SessionInput configures a session.
type SessionInput struct {
	// Provider is where the sandbox lives; empty means
	// sandbox.DefaultProvider. Image is its image, for providers that
	// have images.
	Provider string `json:"provider,omitempty"`
	Image    string `json:"image,omitempty"`
	// Network is what the sandbox may reach beyond its loopback; the
	// zero policy is loopback only. provider.NetworkPreset("registries")
	// is one for installing packages.
	Network provider.Network `json:"network,omitzero"`
	// SystemPrompt is the agent's instructions; empty means
	// DefaultSystemPrompt. The workspace's AGENTS.md joins it.
	SystemPrompt string `json:"system_prompt,omitempty"`
	// MaxSteps bounds the model calls of one turn; zero means
	// DefaultMaxSteps.
	MaxSteps int `json:"max_steps,omitempty"`
	// Approvals makes every shell call wait for UpdateApprove.
	Approvals bool `json:"approvals,omitempty"`
	// ModelQueue is the model activity's task queue; empty means
	// DefaultModelQueue.
	ModelQueue string `json:"model_queue,omitempty"`
	// ModelHeartbeatTimeout overrides the model activity's heartbeat
	// timeout: how soon a call on a dead worker is retried elsewhere.
	ModelHeartbeatTimeout time.Duration `json:"model_heartbeat_timeout,omitempty"`
	// IdleTimeout and HibernateAfter are the sandbox's: zero means the
	// sandbox package's defaults, a negative value never.
	IdleTimeout    time.Duration `json:"idle_timeout,omitempty"`
	HibernateAfter time.Duration `json:"hibernate_after,omitempty"`
	// Checkpoint is the sandbox's checkpoint policy: what the session's
	// workspace comes back from when its host is lost.
	Checkpoint sandbox.CheckpointPolicy `json:"checkpoint,omitzero"`
	// HostTimeout is the sandbox's (sandbox.WithHostTimeout): how long
	// an operation waits for its host before it is taken for lost; zero
	// means sandbox.DefaultHostTimeout.
	HostTimeout time.Duration `json:"host_timeout,omitempty"`
	// FromSnapshot fills the session's workspace from a snapshot (a
	// template), which stays the caller's; a fork's comes from Fork
	// instead, and the two together are bad input.
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// Hibernated starts the session's sandbox hibernated
	// (sandbox.StartHibernated): nothing is made at the provider until
	// its first turn or operation.
	Hibernated bool `json:"hibernated,omitempty"`
	// ContinueAfter continues the workflow as new, between turns, once
	// its history has this many events; zero means when the server
	// suggests it.
	ContinueAfter int `json:"continue_after,omitempty"`

	// Manager is the workflow id of the session manager that started
	// the session: it is signalled when the sandbox is made
	// (SignalManagerStarted) and when the workflow ends for any reason
	// but continue-as-new (SignalManagerEnded).
	Manager string `json:"manager,omitempty"`
	// Fork starts the session from another one's: its workspace and its
	// conversation (UpdateFork says what).
	Fork *ForkFrom `json:"fork,omitempty"`

	// Carried is set by the workflow itself when it continues as new.
	Carried *Carried `json:"carried,omitempty"`
}

// ForkRequest asks a session for what a fork of it needs. Owner is the
// workflow id of the session that will start from it: the workspace's
// snapshot is its (sandbox.ForkSnapshot).
type ForkRequest struct {
	Owner string `json:"owner"`
}

// ForkResult is a fork's start: Fork goes in the new session's input,
// with Input's settings, the source's. Fork.Conversation's segments are
// the source's own: the caller copies them under the new session's
// conversation (ConversationPrefix) before it starts it, so that each
// session deletes only its own.
type ForkResult struct {
	Fork  ForkFrom     `json:"fork"`
	Input SessionInput `json:"input"`
}

// ForkFrom is where a forked session starts from.
type ForkFrom struct {
	// Snapshot is the workspace, a checkpoint the new session's sandbox
	// is made from (sandbox.FromCheckpoint) and then owns.
	Snapshot     string         `json:"snapshot"`
	Conversation []chat.Segment `json:"conversation,omitempty"`
	Unsent       []chat.Message `json:"unsent,omitempty"`
	NextTurn     int            `json:"next_turn"`
	Turns        []TurnState    `json:"turns,omitempty"`
	Usage        chat.Usage     `json:"usage"`
}

// SwitchRequest moves the session's workspace to another provider.
type SwitchRequest struct {
	Provider string `json:"provider"`
	Image    string `json:"image,omitempty"`
}

// DefaultSystemPrompt is the agent's instructions when the input gives
// none.
const DefaultSystemPrompt = "You are a coding agent working in a sandboxed workspace. " +
	"Use the tools to read, write and run code there; run the tests before you say you are done. " +
	"Answer briefly, saying what you changed."

// Carried is what a session hands to its next run.
type Carried struct {
	Sandbox sandbox.HandleState `json:"sandbox"`
	// Conversation is the conversation's stored segments; Unsent the
	// messages not yet stored (a failed turn's, to send with the next).
	Conversation []chat.Segment `json:"conversation,omitempty"`
	Unsent       []chat.Message `json:"unsent,omitempty"`
	Queue        []queued       `json:"queue,omitempty"`
	NextTurn     int            `json:"next_turn"`
	Turn         TurnState      `json:"turn"`
	Turns        []TurnState    `json:"turns,omitempty"`
	Usage        chat.Usage     `json:"usage"`
	Runs         int            `json:"runs"`
	Version      int            `json:"version"`
	// Answers are the last answers to a manager's Updates (Answered).
	Answers []Answered `json:"answers,omitempty"`
	// Paused: the manager paused the session, and no message woke it
	// since.
	Paused bool `json:"paused,omitempty"`
}

// queued is an accepted message waiting for its turn.
type queued struct {
	Turn    int    `json:"turn"`
	Message string `json:"message"`
}

// SendRequest is a person's message.
type SendRequest struct {
	Message string `json:"message"`
}

// SendResult is the number of the turn that will answer the message.
type SendResult struct {
	Turn int `json:"turn"`
}

// ApproveRequest approves or denies a tool call awaiting approval.
type ApproveRequest struct {
	CallID  string `json:"call_id"`
	Approve bool   `json:"approve"`
}

// EndRequest ends the session. Destroy destroys the workspace; without
// it the workspace is kept as a snapshot first.
type EndRequest struct {
	Destroy bool `json:"destroy,omitempty"`
}

// EndResult names the snapshot the workspace was kept in, if it was.
type EndResult struct {
	Snapshot string `json:"snapshot,omitempty"`
}

// Turn and tool call statuses.
const (
	StatusIdle     = "idle"              // no turn yet, or between turns
	StatusThinking = "thinking"          // the model is called
	StatusRunning  = "running"           // a tool call runs
	StatusApproval = "awaiting_approval" // a shell call waits for UpdateApprove
	StatusDone     = "done"              // answered
	StatusFailed   = "failed"            // ended without an answer: Error says why
	StatusDenied   = "denied"            // a tool call the person denied
)

// State is the answer to QueryState.
type State struct {
	// Status is the current turn's, or StatusIdle between turns.
	Status string `json:"status"`
	// Turn is the current turn, or the last one.
	Turn TurnState `json:"turn"`
	// Turns are the last finished turns, oldest first, without their
	// tool calls.
	Turns []TurnState `json:"turns,omitempty"`
	// Queued are the accepted messages waiting for their turn.
	Queued int `json:"queued,omitempty"`
	// Usage is the session's token usage.
	Usage   chat.Usage     `json:"usage"`
	Sandbox sandbox.Status `json:"sandbox"`
	// Messages is how many messages the conversation holds.
	Messages int  `json:"messages"`
	Ended    bool `json:"ended,omitempty"`
	// Runs counts the workflow's runs (continue-as-new).
	Runs int `json:"runs"`
	// Version counts the state's changes: UpdateWait returns once it
	// passes the one a front end has seen.
	Version int `json:"version"`
}

// WaitRequest asks for the state once its Version is past After. A
// front end follows a session live with one such Update after another,
// each answered as soon as something changes. A waiter may also be
// answered unchanged, when the workflow continues as new: it asks again.
type WaitRequest struct {
	After int `json:"after"`
}

// TurnState is one turn.
type TurnState struct {
	Number  int    `json:"number"`
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
	// Tool is the tool running, or awaiting approval.
	Tool  string      `json:"tool,omitempty"`
	Calls []CallState `json:"calls,omitempty"`
	// Steps counts the model calls.
	Steps int `json:"steps"`
	// Answer is the model's answer, or its start when AnswerStored
	// says where it is stored whole: a turn's state, which travels
	// through history, carries at most chat.MaxInlineText of it.
	Answer       string       `json:"answer,omitempty"`
	AnswerStored *chat.Stored `json:"answer_stored,omitempty"`
	// Stream is the blob key the current model call streams its text
	// to, readable live through the relay.
	Stream string     `json:"stream,omitempty"`
	Error  string     `json:"error,omitempty"`
	Usage  chat.Usage `json:"usage"`
}

// CallState is one tool call of a turn.
type CallState struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments are the call's, or their start when ArgumentsStored
	// says where they are stored whole (past chat.MaxInlineArguments).
	Arguments       string       `json:"arguments"`
	ArgumentsStored *chat.Stored `json:"arguments_stored,omitempty"`
	Status          string       `json:"status"`
	// Said is what the model said before asking for this call and the
	// others of its step (on the first of them), cut to a few KiB.
	Said string `json:"said,omitempty"`
	// Stdout and Stderr are the blob keys a shell command's output is
	// stored at as it runs, readable live through the relay (the
	// session's workflow answers transfer.QueryRead).
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	// Output is what the model was given, cut to a few KiB.
	Output string `json:"output,omitempty"`
	Failed bool   `json:"failed,omitempty"`
}

// Register registers Session under WorkflowName and ModelStatus under
// ModelStatusWorkflowName.
func Register(w worker.WorkflowRegistry) {
	w.RegisterWorkflowWithOptions(Session, workflow.RegisterOptions{Name: WorkflowName})
	w.RegisterWorkflowWithOptions(ModelStatus, workflow.RegisterOptions{Name: ModelStatusWorkflowName})
}

// validate checks and completes the input.
func (in *SessionInput) validate() error {
	if in.Provider == "" {
		in.Provider = sandbox.DefaultProvider
	}
	if in.MaxSteps == 0 {
		in.MaxSteps = DefaultMaxSteps
	}
	if in.MaxSteps < 0 || in.MaxSteps > MaxMaxSteps {
		return fmt.Errorf("%w: max_steps %d: from 1 to %d", errdefs.ErrBadInput, in.MaxSteps, MaxMaxSteps)
	}
	if in.SystemPrompt == "" {
		in.SystemPrompt = DefaultSystemPrompt
	}
	if in.ModelQueue == "" {
		in.ModelQueue = DefaultModelQueue
	}
	if in.ContinueAfter < 0 {
		return fmt.Errorf("%w: negative continue_after", errdefs.ErrBadInput)
	}
	if err := ValidateFrom(in.FromSnapshot, in.Fork != nil); err != nil {
		return err
	}
	return sandbox.ValidateHostTimeout(in.HostTimeout)
}

// ValidateFrom checks where a session's workspace comes from: snapshot,
// a template, which a fork (fork) may not have besides its own.
func ValidateFrom(snapshot string, fork bool) error {
	if snapshot == "" {
		return nil
	}
	if fork {
		return fmt.Errorf("%w: a session starts from a snapshot or from a fork, not both", errdefs.ErrBadInput)
	}
	if err := provider.ValidateID(snapshot); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// checkMessage refuses what no model should be sent.
func checkMessage(msg string) error {
	switch {
	case strings.TrimSpace(msg) == "":
		return fmt.Errorf("%w: the message is empty", errdefs.ErrBadInput)
	case len(msg) > MaxMessage:
		return fmt.Errorf("%w: the message has %d bytes, more than %d", errdefs.ErrBadInput, len(msg), MaxMessage)
	case !utf8.ValidString(msg):
		return fmt.Errorf("%w: the message is not UTF-8", errdefs.ErrBadInput)
	}
	return nil
}
