package tools

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// Workspace is where tools run: the few operations of the sandbox
// handle they need. Paths are relative to the workspace's root.
type Workspace interface {
	// Exec runs a shell command line in the workspace's root.
	Exec(command string, opts ExecOptions) (ExecResult, error)
	// ReadFile reads a file; one too large to read whole is an error
	// wrapping ErrTooLarge, one that does not exist fs.ErrNotExist.
	ReadFile(path string) ([]byte, error)
	// WriteFiles creates or replaces files, and their parent directories.
	WriteFiles(files ...provider.File) error
	// ListFiles lists a directory, sorted by name.
	ListFiles(dir string) ([]provider.FileInfo, error)
	// Remove removes a file, or a directory and all it holds.
	Remove(path string) error
}

// ExecOptions is how a command runs.
type ExecOptions struct {
	// Timeout is the longest the command may run; zero leaves it to the
	// workspace.
	Timeout time.Duration
	// TTY runs it on a terminal of TerminalRows by TerminalCols, its
	// stdin, stdout and stderr, with TERM=xterm-256color. The terminal
	// takes no input, and its output is all in Stdout.
	TTY bool
}

// ExecResult is what became of a command.
type ExecResult struct {
	ExitCode int
	// Output is its standard output and error, whole or, when Truncated,
	// their head and tail.
	Stdout, Stderr string
	Truncated      bool
	// TimedOut: the command ran past its timeout and was ended.
	TimedOut bool
}

// ErrTooLarge says that a file is too large to read whole.
var ErrTooLarge = errors.New("file too large to read whole")

// Dir is a workspace in a directory of the host, for tests and local
// use: commands run with sh -c, unconfined.
type Dir string

var _ Workspace = Dir("")

// path resolves a workspace path, refusing one that leaves it.
func (d Dir) path(p string) (string, error) {
	clean := filepath.Clean("/" + p)
	if strings.Contains(p, "\x00") {
		return "", fmt.Errorf("%w: path %q", errdefs.ErrBadInput, p)
	}
	return filepath.Join(string(d), clean), nil
}

// Exec runs command with sh -c in the directory. It runs none on a
// terminal: that is the sandbox's (provider.Terminal).
func (d Dir) Exec(command string, opts ExecOptions) (ExecResult, error) {
	if opts.TTY {
		return ExecResult{}, fmt.Errorf("%w: this workspace runs no command on a terminal", errdefs.ErrUnsupported)
	}
	ctx := context.Background()
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Dir = string(d)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := ExecResult{Stdout: stdout.String(), Stderr: stderr.String(), TimedOut: ctx.Err() != nil}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.ExitCode = exit.ExitCode()
	case err != nil:
		return res, err
	}
	return res, nil
}

// ReadFile reads a file of the directory.
func (d Dir) ReadFile(p string) ([]byte, error) {
	full, err := d.path(p)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(full)
}

// WriteFiles writes files into the directory.
func (d Dir) WriteFiles(files ...provider.File) error {
	for _, f := range files {
		full, err := d.path(f.Path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		mode := f.Mode.Perm()
		if mode == 0 {
			mode = 0o644
		}
		if err := os.WriteFile(full, f.Data, mode); err != nil {
			return err
		}
		if err := os.Chmod(full, mode); err != nil {
			return err
		}
	}
	return nil
}

// ListFiles lists a directory of the directory.
func (d Dir) ListFiles(dir string) ([]provider.FileInfo, error) {
	full, err := d.path(dir)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(full)
	if err != nil {
		return nil, err
	}
	var infos []provider.FileInfo
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		info := provider.FileInfo{Name: e.Name(), Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime()}
		if fi.Mode()&fs.ModeSymlink != 0 {
			info.Target, _ = os.Readlink(filepath.Join(full, e.Name()))
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// Remove removes a path of the directory.
func (d Dir) Remove(p string) error {
	full, err := d.path(p)
	if err != nil {
		return err
	}
	if full == filepath.Clean(string(d)) {
		return fmt.Errorf("%w: will not remove the workspace itself", errdefs.ErrBadInput)
	}
	return os.RemoveAll(full)
}
