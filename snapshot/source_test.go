package snapshot

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// dirSource exports a directory as sandboxd does (PAX, relative names,
// directories as "name/", symbolic links, regular files), adds hard links
// for files sharing an inode, and, with marks set, sends files whose
// ctime is before since as headers only.
type dirSource struct {
	dir   string
	marks bool
	// markAll marks every regular file unchanged when since is not zero,
	// whatever its ctime: a source that claims more than is true.
	markAll bool

	sent atomic.Int64 // bytes of file contents sent, in the stream or by ReadFile

	mu    sync.Mutex
	asked []string // paths passed to ReadFile
}

func (d *dirSource) Export(ctx context.Context, since time.Time) (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(d.write(ctx, pw, since)) }()
	return pr, nil
}

func (d *dirSource) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	d.mu.Lock()
	d.asked = append(d.asked, path)
	d.mu.Unlock()
	f, err := os.Open(filepath.Join(d.dir, filepath.FromSlash(path)))
	if err != nil {
		return nil, err
	}
	return &countingReader{f, &d.sent}, nil
}

func (d *dirSource) readFiles() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.asked...)
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (d *dirSource) write(ctx context.Context, w io.Writer, since time.Time) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	tw := tar.NewWriter(bw)
	inodes := map[uint64]string{}
	buf := make([]byte, 256<<10)
	err := filepath.WalkDir(d.dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(d.dir, p)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		hdr := &tar.Header{Name: name, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
		switch {
		case fi.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
			return tw.WriteHeader(hdr)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case !fi.Mode().IsRegular():
			return nil
		}
		if first, ok := inodes[st.Ino]; ok && st.Nlink > 1 {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			return tw.WriteHeader(hdr)
		}
		inodes[st.Ino] = name
		hdr.Typeflag = tar.TypeReg
		ctime := time.Unix(st.Ctim.Unix())
		if !since.IsZero() && (d.markAll || d.marks && ctime.Before(since)) {
			hdr.PAXRecords = map[string]string{UnchangedRecord: "1", SizeRecord: strconv.FormatInt(fi.Size(), 10)}
			return tw.WriteHeader(hdr)
		}
		hdr.Size = fi.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		// One buffer for all files: io.Copy would allocate one per file
		// (os.File's WriteTo does), which costs more than the copying.
		n, err := io.CopyBuffer(tw, struct{ io.Reader }{f}, buf)
		d.sent.Add(n)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// tarSource serves a fixed tar stream, for hostile archives.
type tarSource struct{ data []byte }

func (t tarSource) Export(context.Context, time.Time) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(t.data)), nil
}

func (t tarSource) ReadFile(_ context.Context, path string) (io.ReadCloser, error) {
	return nil, fmt.Errorf("read %s: %w", path, fs.ErrNotExist)
}

// endlessSource sends one huge file whose contents never end, and calls
// after once it has sent that many bytes.
type endlessSource struct {
	after int64
	call  func()
}

func (s endlessSource) Export(ctx context.Context, _ time.Time) (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 1 << 40, Mode: 0o644})
		buf := make([]byte, 64<<10)
		for sent := int64(0); err == nil; sent += int64(len(buf)) {
			if sent >= s.after && s.call != nil {
				s.call()
				s.call = nil
			}
			_, err = tw.Write(buf)
		}
		pw.CloseWithError(err)
	}()
	return pr, nil
}

func (endlessSource) ReadFile(context.Context, string) (io.ReadCloser, error) {
	return nil, errors.New("not here")
}
