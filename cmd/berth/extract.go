package main

import (
	"fmt"
	"io"
	"os"

	"github.com/berth-dev/berth/internal/untar"
)

// extractTar unpacks an export of a sandbox's file or directory (see
// provider.PathExporter) to target on this host: the archive's top entry
// becomes target, and what is under it goes under target. When root is
// set the archive is a whole workspace, its entries named by their
// paths, and they all go under target.
//
// The archive comes from a sandbox and is hostile: internal/untar keeps
// every write below target's directory without following a link on the
// host, target included, and skips links that lead out of the copy,
// devices and fifos, saying so on stderr.
func extractTar(r io.Reader, target string, root bool) error {
	return untar.Extract(r, target, untar.Options{
		Root: root,
		Warn: func(name, why string) {
			fmt.Fprintf(os.Stderr, "berth: cp: skipped %s: %s\n", name, why)
		},
	})
}
