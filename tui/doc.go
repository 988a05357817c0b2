// Package tui is the terminal front end of `berth chat`: a list of a
// person's agent sessions, and a conversation view that follows one
// session live, built with bubbletea.
//
// It talks to berth only through Backend (berth.Sessions implements
// it), never to Temporal directly, so that a test drives it with a fake
// of a few dozen lines.
//
// # Following a session
//
// The conversation view is rebuilt from the session's agent.State alone:
// its finished turns (message and answer), the current turn with its
// tool calls and their outputs, its status and its answer. The view
// follows the session with one Backend.Wait after another, each a
// tea.Cmd that returns as soon as the state's Version passes the one
// shown: nothing polls for the state. Leaving the view cancels the Wait
// in flight; quitting leaves the session running, and opening it again
// shows it where it is.
//
// # Live streams
//
// Between two states some text grows that the state only names: a
// running shell call's Stdout and Stderr, and the turn's Stream, the
// text of the model call under way. The session's relay (Backend.Read)
// is the only way to them, so while the state shown names such a
// stream the view reads each from where it got to every liveEvery
// (client.LiveEvery), at once again when one is far ahead: the UI's one
// tick (live.go). The state decides what is followed: a call's streams
// while it runs, after which its Output shows in their place, the
// Stream while the turn thinks, after which the answer does; leaving
// the session stops the reads. Each stream keeps its last maxLive bytes
// (cut at a rune's start), and a Read's error is logged once, not shown:
// a stream not stored yet reads as empty.
//
// # Stable text
//
// What the view shows is plain and meant to be grepped by an end-to-end
// test in a terminal multiplexer: the input line starts with "> ", a
// message sent as "you: ", a shell call as "$ <command>", any other
// call as "[tool] <name> <arguments>", each followed by its output
// indented by two spaces (while it runs, what it wrote so far, "…" first
// when the start is cut, then "running…"), the answer as its text (while
// it is written, the text so far above "thinking…"), and the status bar as "session <id> · <title> · <provider> · <status>". An
// error is one line, "error: ...", above the status bar; the UI never
// stops on one.
package tui
