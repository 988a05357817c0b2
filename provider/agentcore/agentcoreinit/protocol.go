// Package agentcoreinit is the relay inside an Amazon Bedrock AgentCore
// Code Interpreter session, through which berth reaches its daemon
// there. A session has no inbound port: all the service offers is a
// command run to its end (InvokeCodeInterpreter's executeCommand), its
// standard output returned. So the host carries each HTTP request to
// the daemon as a series of such commands, each
//
//	berth-sandboxd relay call --socket SOCKET <<'EOF'
//	BASE64 OF ONE Call
//	EOF
//
// which hands one [Call] to the relay's server and prints its [Reply] as
// one line of JSON. The server,
//
//	berth-sandboxd relay serve --socket SOCKET --target 127.0.0.1:PORT
//
// started beside the daemon (not its child: the daemon's pause stops
// only its own descendants), holds each request's connection to the
// daemon open across calls: a request's body goes in pieces (Write, at
// an offset, so that a call sent again adds nothing twice), its answer
// comes back in pieces (Read from an offset, so that a reply lost is
// read again), each call bounded in time (Call.Wait, a long poll) and
// in size (MaxReply). So a command's streamed output, its standard
// input and a terminal work as over a connection, at one round trip of
// the service per piece.
//
// The daemon's bearer token is the server's, read from the daemon's
// configuration in $BERTH_SANDBOXD_CONFIG (package remoteinit), and
// added to every request: it is never in a call, so never in a
// command's text nor a process's argv. The socket's directory is
// root's alone.
//
// It links only remoteinit's configuration and the standard library: it
// runs in the session.
package agentcoreinit

import (
	"net/http"
	"time"
)

// Arg is the subcommand of berth-sandboxd that runs the relay.
const Arg = "relay"

// Ops of a Call.
const (
	OpOpen  = "open"  // start a request: Method, Target, Header, and the first of its body
	OpWrite = "write" // more of a request's body, at BodyOffset
	OpRead  = "read"  // the answer from Offset on
	OpClose = "close" // end the request, read or not
)

// Bounds of the relay.
const (
	// MaxReply bounds the answer's bytes one Reply carries.
	MaxReply = 1 << 20
	// MaxCall bounds a Call as the call reads it (base64 on its
	// standard input): a body's pieces larger than MaxInline go in a
	// file (Call.BodyFile), which the host writes first.
	MaxCall = 1 << 20
	// MaxInline bounds the body bytes a Call carries itself.
	MaxInline = 48 << 10
	// MaxWait bounds Call.Wait: one call, a long poll, ends within it.
	MaxWait = 20 * time.Second
	// MaxStreams bounds the requests the server holds at once.
	MaxStreams = 256
	// IdleTimeout ends a request no call has asked about for that long:
	// its host has gone.
	IdleTimeout = 2 * time.Minute
)

// Call is one step of a request through the relay.
type Call struct {
	Op string `json:"op"`
	// ID names the request, chosen by the host.
	ID string `json:"id"`

	// Method, Target (path and query) and Header of an OpOpen.
	Method string      `json:"method,omitempty"`
	Target string      `json:"target,omitempty"`
	Header http.Header `json:"header,omitempty"`

	// Body is a piece of the request's body that starts at BodyOffset,
	// or BodyFile names a file in the relay's directory that holds it
	// (removed once read). EOF ends the body.
	Body       []byte `json:"body,omitempty"`
	BodyFile   string `json:"body_file,omitempty"`
	BodyOffset int64  `json:"body_offset,omitempty"`
	EOF        bool   `json:"eof,omitempty"`

	// Offset is how much of the answer's body the host holds: what
	// precedes it is dropped, and the reply starts there. Wait bounds
	// how long an OpOpen or OpRead waits for the answer to go on.
	Offset int64         `json:"offset,omitempty"`
	Wait   time.Duration `json:"wait,omitempty"`
}

// Reply is the server's answer to a Call.
type Reply struct {
	// Status and Header are the daemon's answer's, once it has come
	// (Status 0 before).
	Status int         `json:"status,omitempty"`
	Header http.Header `json:"header,omitempty"`
	// Data is the answer's body from Call.Offset on, at most MaxReply
	// bytes; Done says that it ends after Data.
	Data []byte `json:"data,omitempty"`
	Done bool   `json:"done,omitempty"`
	// BodyOffset is how much of the request's body the server holds.
	BodyOffset int64 `json:"body_offset,omitempty"`
	// Error is why the request failed: the daemon could not be reached,
	// or the relay knows no request ID (NoStream).
	Error string `json:"error,omitempty"`
}

// NoStream starts Reply.Error for a request the server does not hold.
const NoStream = "relay: no request "
