// Package agent is the coding agent's durable workflow: Session, a
// conversation with a person that may last for days, whose tools run in
// a berth sandbox the session owns.
//
// It sits at the layer of package workflows: it is built from the
// sandbox handle (package sandbox), the agent's tools (agent/tools), the
// model activity's name and options (agent/model) and the conversation's
// data (agent/chat); it never calls berth's activities directly.
//
// # The workflow
//
// Messages arrive by the Update UpdateSend, which returns as soon as the
// turn is accepted, with its number, or by the Signal SignalMessage.
// Between turns the workflow waits in workflow.Await: nothing runs, and
// the sandbox pauses, then hibernates, by itself. A turn calls the model
// (the conversation stays in the blob store as chat segments; history
// holds their keys and hashes), runs the tool calls it asks for in the
// sandbox, hands their results back, and so on until the model answers
// without tool calls, or MaxSteps. Every model call and every command is
// an activity whose result is in history: a worker that dies mid-turn is
// replaced and the turn goes on where it was, running nothing twice.
//
// The turn's state (QueryState) says what it is doing: thinking,
// running which tool, awaiting approval; the tool calls and their
// outputs so far; the answer; token usage per turn and per session.
// With Approvals on, each shell call waits for UpdateApprove. The
// workflow continues as new between turns when its history grows long,
// carrying the conversation's segments and the sandbox. UpdateEnd ends
// it.
//
// # Under a session manager
//
// Package session's manager starts sessions with SessionInput.Manager
// set, and drives them with UpdateFork (a snapshot of the workspace for
// the fork to own, and the conversation so far), UpdateSwitch,
// UpdatePause and UpdateResume, each run between turns. Such a session
// signals its manager when its sandbox is made (SignalManagerStarted)
// and when its workflow ends for any reason but continue-as-new
// (SignalManagerEnded). A session whose input has Fork starts from
// one: its sandbox from the snapshot, its conversation from the
// segments, which the manager has copied under the new session's own
// ConversationPrefix.
package agent
