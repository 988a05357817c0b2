// Package session is the coding agent's session manager: the workflow
// Manager keeps the registry of a person's agent sessions (agent.Session
// workflows) and creates, renames, forks, switches, pauses, resumes and
// destroys them, each as a Workflow Update. The registry stays consistent
// when an operation fails half-way and when a session's own workflow ends
// on its own.
//
// It sits at the layer of package workflows and agent: built from the
// sandbox handle and the agent's workflow, never from providers or
// berth's sandbox activities. What its workflow cannot do itself (send
// its sessions Updates and Queries, copy their conversations) it does
// through its own activities, in package session/calls.
package session
