// Package agentcore runs berth's sandboxes in Amazon Bedrock AgentCore
// Code Interpreter sessions, as a [remote.API] that package
// provider/remote builds the provider over.
//
// It drives the service through the official Go SDK
// (github.com/aws/aws-sdk-go-v2/service/bedrockagentcore v1.59.0), its
// credentials and region from the AWS default chain: a sandbox is a
// session started with a name that derives from the sandbox id and a
// timeout that is its lifetime; berth-sandboxd is uploaded with
// writeFiles and started as the task of a startCommandExecution. Every
// operation of a sandbox is then a request to the daemon.
//
// A session has no inbound port, so the daemon is not reached by URL:
// the [remote.Endpoint] this API gives carries each request through
// InvokeCodeInterpreter, as calls of the relay in the session (package
// agentcoreinit; berth-sandboxd relay): one executeCommand opens the
// request with its body (a command's, a small file's) and returns the
// start of the answer, a command's whole answer when it ends within the
// call; a body larger than a call goes in pieces (each a writeFiles of
// it, then a call), an answer longer than one reply (1 MiB) or than one
// call (a long poll of 10 s) in more calls, each from the offset the
// host holds. So streamed output, standard input and terminals work,
// and every call is idempotent: one sent again after a lost answer
// writes nothing twice and reads the same bytes again. The daemon's
// bearer token never leaves the process but in the file the daemon
// starts from: the relay in the session adds it.
//
// What differs from a sandbox on berth's host:
//
//   - A session's lifetime is hard: it ends at its timeout, at most
//     MaxLifetime (8 h), whatever runs in it, and nothing keeps it
//     alive longer (KeepAlive does nothing). A sandbox whose lifetime is
//     longer ends with its session, which berth sees as the sandbox
//     lost; its checkpoints, through the daemon, are how it goes on in
//     a new one.
//   - Sessions carry a name and no labels: berth's labels are a small
//     file in the session (/opt/berth-agentcore/labels.json), which List
//     reads once per session and API (one readFiles each), and a
//     session that has none is not berth's to list.
//   - No pause of the service's: berth's Pause is the daemon's (every
//     process stopped), and the session runs on. No size but the code
//     interpreter's: CPU, memory and disk are refused.
//   - The daemon and the relay run as the user the service runs
//     commands as, root in the fake; commands run as the sandbox user.
package agentcore
