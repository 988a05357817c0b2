package snapshot

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/berth-dev/berth/internal/sparsetar"
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

// ReadFile reads the file through an export of it alone, when the
// sandbox can export a path: a sparse file then comes as its data and
// where it goes (see extentReader), not as its whole size, holes read as
// zeros.
func (s sandboxSource) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	pe, ok := s.sb.(provider.PathExporter)
	if !ok {
		return s.sb.ReadFile(ctx, path)
	}
	rc, err := pe.ExportPath(ctx, path)
	if err != nil {
		return nil, err
	}
	tr := sparsetar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		rc.Close()
		if err == io.EOF {
			err = fs.ErrNotExist
		}
		return nil, err
	}
	if why := hdr.PAXRecords[provider.PAXSkipped]; why != "" {
		rc.Close()
		return nil, fmt.Errorf("%w: %q: left out by the source: %s", ErrBadInput, truncate(path), truncate(why))
	}
	if hdr.Typeflag != tar.TypeReg {
		// Replaced since the export listed it.
		rc.Close()
		return nil, fmt.Errorf("%w: %q is no longer a regular file", ErrBadInput, truncate(path))
	}
	return &exportedFile{ReadCloser: rc, tr: tr, size: hdr.Size}, nil
}

// extentReader is what a Source's ReadFile may return for a file with
// holes: Read returns the data of the extents alone.
type extentReader interface {
	// Extents returns where the data goes and the file's size, and
	// true, for a file read as a sparse file.
	Extents() ([]sparsetar.Extent, int64, bool)
}

// exportedFile is a file read from an export of it alone.
type exportedFile struct {
	io.ReadCloser // the export, closed with it
	tr            *sparsetar.Reader
	size          int64
}

func (f *exportedFile) Read(p []byte) (int, error) { return f.tr.Read(p) }

func (f *exportedFile) Extents() ([]sparsetar.Extent, int64, bool) {
	ext, ok := f.tr.Extents()
	return ext, f.size, ok
}
