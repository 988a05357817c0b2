package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Command is a Go command built once for a test binary, static
// (CGO_ENABLED=0), on the first call to Path: building it for each test
// that needs it costs seconds of the CPU the tests share. TestMain calls
// Remove after the tests.
type Command struct {
	Package string   // the import path to build
	Name    string   // the file name of the binary
	Flags   []string // go build's flags beyond -o

	once sync.Once
	dir  string
	path string
	err  error
}

// Path builds the command on the first call and returns its path; a
// failed build fails t, with go build's output.
func (c *Command) Path(t testing.TB) string {
	t.Helper()
	c.once.Do(func() {
		if c.dir, c.err = os.MkdirTemp("", "berth-testbin-"); c.err != nil {
			return
		}
		bin := filepath.Join(c.dir, c.Name)
		args := append(append([]string{"build"}, c.Flags...), "-o", bin, c.Package)
		build := exec.Command("go", args...)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			c.err = fmt.Errorf("build %s: %v\n%s", c.Package, err, out)
			return
		}
		c.path = bin
	})
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c.path
}

// Remove deletes what Path built.
func (c *Command) Remove() {
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
}
