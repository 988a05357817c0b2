package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// extractTar unpacks an export of a sandbox's file or directory (see
// provider.PathExporter) to target on this host: the archive's top entry
// becomes target, and what is under it goes under target. When root is
// set the archive is a whole workspace, its entries named by their
// paths, and they all go under target.
//
// The archive comes from a sandbox and is treated as hostile: names that
// leave target are refused, and everything is written through an
// os.Root on target, so that no link the archive made, or found, leads a
// write out of it. Special files are left out.
func extractTar(r io.Reader, target string, root bool) error {
	tr := tar.NewReader(r)
	var dir *os.Root
	defer func() {
		if dir != nil {
			dir.Close()
		}
	}()
	openDir := func() error {
		if dir != nil {
			return nil
		}
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		var err error
		dir, err = os.OpenRoot(target)
		return err
	}
	for first := true; ; first = false {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if first && !root {
				return errors.New("the export is empty")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the export: %w", err)
		}
		name, err := entryName(hdr.Name, root)
		if err != nil {
			return err
		}
		if name == "." && hdr.Typeflag == tar.TypeReg {
			// A single file: the user named where it goes.
			if !first {
				return fmt.Errorf("bad entry %q in the export: a file in place of its top directory", hdr.Name)
			}
			return writeFile(target, tr, fs.FileMode(hdr.Mode).Perm())
		}
		if err := openDir(); err != nil {
			return err
		}
		if name == "." {
			continue
		}
		if err := extractEntry(dir, name, hdr, tr); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
	}
}

// entryName is where an entry goes, relative to the target: "." for the
// top entry itself. It refuses names that leave the target.
func entryName(name string, root bool) (string, error) {
	clean := path.Clean(name)
	if name == "" || path.IsAbs(name) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("bad entry %q in the export: it leaves the destination", name)
	}
	if root {
		return clean, nil
	}
	_, rest, _ := strings.Cut(clean, "/")
	if rest == "" {
		return ".", nil
	}
	return rest, nil
}

func extractEntry(dir *os.Root, name string, hdr *tar.Header, r io.Reader) error {
	perm := fs.FileMode(hdr.Mode).Perm()
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := dir.MkdirAll(name, 0o700); err != nil {
			return err
		}
		return dir.Chmod(name, perm|0o700)
	case tar.TypeReg:
		if err := dir.MkdirAll(path.Dir(name), 0o755); err != nil {
			return err
		}
		removeLink(dir, name)
		f, err := dir.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := dir.Chmod(name, perm); err != nil {
			return err
		}
		return dir.Chtimes(name, hdr.ModTime, hdr.ModTime)
	case tar.TypeSymlink:
		if err := dir.MkdirAll(path.Dir(name), 0o755); err != nil {
			return err
		}
		removeLink(dir, name)
		return dir.Symlink(hdr.Linkname, name)
	}
	return nil // hard links, devices, fifos: not copied out
}

// removeLink removes a symbolic link at name, so that what replaces it
// is written in its place, not through it.
func removeLink(dir *os.Root, name string) {
	if fi, err := dir.Lstat(name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		dir.Remove(name)
	}
}

// writeFile writes a single copied-out file to target.
func writeFile(target string, r io.Reader, perm fs.FileMode) error {
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
