// Command berth-sandboxd is berth's in-sandbox daemon, on its own: the
// linux and gvisor providers start it as each sandbox's first process,
// and the docker provider as each container's entrypoint. It is the same code as
// the daemon inside the berth binary, in a binary that links nothing
// else (the providers' in-sandbox packages, none of their host code), so
// that an idle sandbox costs 2-3 MiB of its own rather than the ~13
// MiB that initialising berth's Temporal dependencies takes, and so that
// it stays under 8 MiB to carry into remote sandboxes (TestSize;
// docs/performance.md). Install it beside berth, static, since Docker
// sandboxes run it on their image's libraries or none:
//
//	go install ./cmd/berth
//	CGO_ENABLED=0 go install -trimpath -ldflags='-s -w' ./cmd/berth-sandboxd
//
// In a remote sandbox whose provider has only a plain exec API, with no port
// through which to reach the daemon, it wraps each command instead, so that a
// retried exec never runs it twice (package sandboxd/runkey):
//
//	berth-sandboxd run --key EXEC-ID [--dir DIR] [--timeout D] [--cap BYTES] -- CMD ARGS...
//
// The first call with a key starts CMD under a detached supervisor that
// journals its output and exit status in DIR/EXEC-ID ($BERTH_RUN_DIR, else
// /var/tmp/berth-run); a retry with the same key streams the journaled
// output and exits with the command's code, however many times it is
// called. Exit code 125 is berth's own error, in one line on stderr.
//
// In a remote sandbox whose provider reaches a port of the machine, the
// remote provider uploads it and starts it as a daemon serving on that
// port, its configuration and bearer token in $BERTH_SANDBOXD_CONFIG
// (package provider/remote/remoteinit):
//
//	berth-sandboxd serve --listen :PORT
//
// In an Amazon Bedrock AgentCore Code Interpreter session, which has no
// inbound port, it is also the relay that carries requests to the daemon,
// one command of the service at a time (package
// provider/agentcore/agentcoreinit):
//
//	berth-sandboxd relay serve --socket PATH --target HOST:PORT
//	berth-sandboxd relay call --socket PATH
package main

import (
	"fmt"
	"os"

	"github.com/berth-dev/berth/provider/agentcore/agentcoreinit"
	"github.com/berth-dev/berth/provider/docker/dockerinit"
	"github.com/berth-dev/berth/provider/gvisor/gvisorinit"
	"github.com/berth-dev/berth/provider/linux/linuxinit"
	"github.com/berth-dev/berth/provider/remote/remoteinit"
	"github.com/berth-dev/berth/sandboxd/runkey"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "run" {
		os.Exit(runkey.Main(os.Args[2:]))
	}
	linuxinit.Main()     // does not return when started by the linux provider
	dockerinit.Main()    // nor when started by the docker provider
	gvisorinit.Main()    // nor by the gvisor provider
	remoteinit.Main()    // nor as serve, by the remote providers
	agentcoreinit.Main() // nor as relay, in an AgentCore session
	fmt.Fprintln(os.Stderr, "berth-sandboxd is started by berth's linux, docker and gvisor providers, as: berth-sandboxd serve --listen :PORT by the remote ones, or as: berth-sandboxd run --key KEY -- CMD ARGS...")
	os.Exit(2)
}
