package sandboxd

import (
	"context"
	"io"
	"io/fs"
	"time"

	"github.com/berth-dev/berth/provider"
)

// Served is the part of a provider.Sandbox that its daemon serves:
// commands, files and archives. Providers whose sandboxes run this
// daemon embed it in their handles, giving it the sandbox's own checks:
// Ready says whether the sandbox can serve now (ErrNotFound, ErrPaused,
// ErrLost otherwise), and Check turns a failure to reach the daemon into
// the provider's error (ErrLost when the daemon is gone). Each operation
// calls Ready, then the daemon through Client, then Check.
type Served struct {
	Client *Client
	Ready  func() error
	Check  func(error) error
}

// Exec implements provider.Sandbox.
func (s Served) Exec(ctx context.Context, req provider.ExecRequest) (provider.ExecResult, error) {
	if err := s.Ready(); err != nil {
		return provider.ExecResult{}, err
	}
	res, err := s.Client.Exec(ctx, req)
	return res, s.Check(err)
}

// TerminalInput implements provider.Terminal.
func (s Served) TerminalInput(ctx context.Context, id string, data []byte) error {
	if err := s.Ready(); err != nil {
		return err
	}
	return s.Check(s.Client.TerminalInput(ctx, id, data))
}

// ResizeTerminal implements provider.Terminal.
func (s Served) ResizeTerminal(ctx context.Context, id string, size provider.TerminalSize) error {
	if err := s.Ready(); err != nil {
		return err
	}
	return s.Check(s.Client.ResizeTerminal(ctx, id, size))
}

// WriteFile implements provider.Sandbox.
func (s Served) WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	if err := s.Ready(); err != nil {
		return err
	}
	return s.Check(s.Client.WriteFile(ctx, path, r, mode))
}

// WriteFiles implements provider.Sandbox.
func (s Served) WriteFiles(ctx context.Context, files []provider.File) error {
	if err := s.Ready(); err != nil {
		return err
	}
	return s.Check(s.Client.WriteFiles(ctx, files))
}

// ReadFile implements provider.Sandbox.
func (s Served) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	if err := s.Ready(); err != nil {
		return nil, err
	}
	rc, err := s.Client.ReadFile(ctx, path)
	return rc, s.Check(err)
}

// ListDir implements provider.Sandbox.
func (s Served) ListDir(ctx context.Context, path string) ([]provider.FileInfo, error) {
	if err := s.Ready(); err != nil {
		return nil, err
	}
	infos, err := s.Client.ListDir(ctx, path)
	return infos, s.Check(err)
}

// Remove implements provider.Sandbox.
func (s Served) Remove(ctx context.Context, path string) error {
	if err := s.Ready(); err != nil {
		return err
	}
	return s.Check(s.Client.Remove(ctx, path))
}

// Export implements provider.Sandbox.
func (s Served) Export(ctx context.Context) (io.ReadCloser, error) {
	if err := s.Ready(); err != nil {
		return nil, err
	}
	rc, err := s.Client.Export(ctx)
	return rc, s.Check(err)
}

// ExportPath implements provider.PathExporter.
func (s Served) ExportPath(ctx context.Context, path string) (io.ReadCloser, error) {
	if err := s.Ready(); err != nil {
		return nil, err
	}
	rc, err := s.Client.ExportPath(ctx, path)
	return rc, s.Check(err)
}

// ExportChanged implements provider.ChangedExporter.
func (s Served) ExportChanged(ctx context.Context, since time.Time) (io.ReadCloser, error) {
	if err := s.Ready(); err != nil {
		return nil, err
	}
	rc, err := s.Client.ExportChanged(ctx, since)
	return rc, s.Check(err)
}

// Import implements provider.Sandbox.
func (s Served) Import(ctx context.Context, r io.Reader) error {
	if err := s.Ready(); err != nil {
		return err
	}
	return s.Check(s.Client.Import(ctx, r))
}

// Signal implements provider.Signaler.
func (s Served) Signal(ctx context.Context, commandID, sig string) error {
	if err := s.Ready(); err != nil {
		return err
	}
	return s.Check(s.Client.Signal(ctx, commandID, sig))
}
