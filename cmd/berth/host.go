package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// hostBinary is the binary that runs berth dev and berth worker. This
// one does not link the Temporal server or the providers, so that its
// client commands start fast.
const hostBinary = "berth-host"

// newHostCommand is a command that berth-host runs: berth becomes it,
// flags and all.
func newHostCommand(name, short string) *cobra.Command {
	return &cobra.Command{
		Use:                name,
		Short:              short,
		DisableFlagParsing: true, // berth-host parses them, --help included
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := findHost()
			if err != nil {
				return err
			}
			argv := append([]string{path, name}, args...)
			return fmt.Errorf("start %s: %w", path, syscall.Exec(path, argv, os.Environ()))
		},
	}
}

// findHost finds berth-host beside this executable, else on PATH.
func findHost() (string, error) {
	self, err := os.Executable()
	if err == nil {
		if p := filepath.Join(filepath.Dir(self), hostBinary); isExecutable(p) {
			return p, nil
		}
	}
	if p, err := exec.LookPath(hostBinary); err == nil {
		return p, nil
	}
	dir := "bin"
	if self != "" {
		dir = filepath.Dir(self)
	}
	return "", errors.New(hostBinary + " is neither beside berth nor on PATH: build it with `go build -o " + dir + "/ ./cmd/berth-host` (or ./cmd/... for all of berth)")
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
