// Command berth-sandboxd is berth's in-sandbox daemon, on its own: the
// linux provider starts it as each sandbox's first process. It is the
// same code as the daemon inside the berth binary, in a binary that links
// nothing else, so that an idle sandbox costs about 2 MiB rather than
// the ~14 MiB that initialising berth's Temporal dependencies takes.
// Install it beside berth:
//
//	go install ./cmd/berth ./cmd/berth-sandboxd
package main

import (
	"fmt"
	"os"

	"github.com/berth-dev/berth/provider/linux"
)

func main() {
	linux.Main() // does not return when started by the provider
	fmt.Fprintln(os.Stderr, "berth-sandboxd is started by berth's linux provider, not by hand")
	os.Exit(2)
}
