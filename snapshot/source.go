package snapshot

import (
	"context"
	"io"
	"time"

	"github.com/berth-dev/berth/provider"
)

// Source is a workspace that Save reads.
type Source interface {
	// Export returns the workspace as a tar stream, as
	// provider.Sandbox.Export writes it: regular files, directories,
	// symbolic and hard links, with relative names.
	//
	// When since is not zero, the source may send a regular file whose
	// status (ctime) has not changed since then without its contents: a
	// header of Size 0 carrying the PAX records UnchangedRecord = "1" and
	// SizeRecord = its real size. Save then takes the contents from the
	// parent snapshot, or asks ReadFile for them.
	Export(ctx context.Context, since time.Time) (io.ReadCloser, error)
	// ReadFile opens one workspace file, named as in the tar stream: the
	// contents of a file marked unchanged that the parent does not hold
	// as it was described.
	ReadFile(ctx context.Context, path string) (io.ReadCloser, error)
}

// The PAX records of a file sent without its contents ("BERTH.unchanged"
// and "BERTH.size"); see Source. They are provider.ChangedExporter's.
const (
	UnchangedRecord = provider.PAXUnchanged
	SizeRecord      = provider.PAXSize
)

// SandboxSource reads a sandbox's workspace: only what changed when the
// sandbox is a provider.ChangedExporter, every file whole otherwise.
func SandboxSource(sb provider.Sandbox) Source { return sandboxSource{sb} }

type sandboxSource struct{ sb provider.Sandbox }

func (s sandboxSource) Export(ctx context.Context, since time.Time) (io.ReadCloser, error) {
	if ce, ok := s.sb.(provider.ChangedExporter); ok && !since.IsZero() {
		return ce.ExportChanged(ctx, since)
	}
	return s.sb.Export(ctx)
}

func (s sandboxSource) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	return s.sb.ReadFile(ctx, path)
}
