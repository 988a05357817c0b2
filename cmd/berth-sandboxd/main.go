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
package main

import (
	"fmt"
	"os"

	"github.com/berth-dev/berth/provider/docker/dockerinit"
	"github.com/berth-dev/berth/provider/gvisor/gvisorinit"
	"github.com/berth-dev/berth/provider/linux/linuxinit"
)

func main() {
	linuxinit.Main()  // does not return when started by the linux provider
	dockerinit.Main() // nor when started by the docker provider
	gvisorinit.Main() // nor by the gvisor provider
	fmt.Fprintln(os.Stderr, "berth-sandboxd is started by berth's linux, docker and gvisor providers, not by hand")
	os.Exit(2)
}
