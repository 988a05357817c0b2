package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/tartree"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/transfer"
)

func newSandboxCp(cf *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file or a directory into a sandbox (cp SRC ID:PATH), or out of it (cp ID:PATH DST); - is a tar stream",
		Long: `berth sandbox cp copies a local file or directory to PATH in the
sandbox's workspace, or to PATH/NAME when PATH ends with a slash; and a
file or directory of the workspace out, to DST, or into DST when DST is
a directory (as cp -r does). PATH is relative to the workspace, or
absolute under /workspace.

As with docker cp, - stands for a tar stream: cp ID:PATH - writes one of
PATH (a file or a directory, its entries named from PATH's base name)
to standard output, and cp - ID:DIR unpacks one read from standard
input into the directory DIR of the workspace (made if missing). For
one file's content alone: berth sandbox cp ID:FILE - | tar -xO.

Small files travel inline in the update; directories and large files, in
and out, as tar streams through the Temporal server to the sandbox's
worker, in parts of 1 MiB: nothing but the server's address is needed,
whatever their size. What comes out of a sandbox is untrusted: nothing is
written outside DST (see docs/security.md, "Copying out").

ID may be a coding agent session's (s1, s2, ...): the copy reaches the
session's sandbox without entering its conversation.`,
		Args:              usageArgs(cobra.ExactArgs(2)),
		ValidArgsFunction: completeCp(cf),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			srcID, srcPath, srcIn := splitRemote(args[0])
			dstID, dstPath, dstIn := splitRemote(args[1])
			if srcIn == dstIn {
				return usageError{errors.New("cp: exactly one of SRC and DST must be ID:PATH")}
			}
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			if dstIn && args[0] == "-" {
				return copyTarIn(ctx, c, dstID, os.Stdin, workspaceRel(dstPath))
			}
			if dstIn {
				fi, err := os.Stat(args[0])
				if err != nil {
					return err
				}
				dstPath = workspaceRel(dstPath)
				if strings.HasSuffix(dstPath, "/") || dstPath == "" || dstPath == "." {
					dstPath = path.Join(dstPath, fileBase(args[0]))
				}
				if fi.IsDir() || fi.Size() > transfer.MaxInlineFiles {
					return copyIn(ctx, c, dstID, args[0], dstPath)
				}
				data, err := os.ReadFile(args[0])
				if err != nil {
					return err
				}
				file := berth.File{Path: dstPath, Data: data, Mode: fi.Mode().Perm()}
				return update(ctx, c, dstID, opWriteFiles, func(s *berth.Sandbox, ctx context.Context) error {
					return s.WriteFiles(ctx, file)
				})
			}
			srcPath = workspaceRel(srcPath)
			if args[1] == "-" {
				if err := c.Sandboxes().Handle(sandboxWorkflow(srcID)).Export(ctx, srcPath, os.Stdout); err != nil {
					return updateErr(srcID, err)
				}
				return nil
			}
			return copyOut(ctx, c, srcID, srcPath, args[1])
		},
	}
}

// workspaceRel makes a path given as /workspace/... relative to the
// workspace, as the sandbox's operations take it.
func workspaceRel(p string) string {
	if p == provider.Workspace || p == provider.Workspace+"/" {
		return "."
	}
	if rest, ok := strings.CutPrefix(p, provider.Workspace+"/"); ok {
		return rest
	}
	return p
}

// copyOut copies a file or directory of a sandbox out to dst: the
// sandbox's workflow exports it as a tar stream, which comes through the
// server and is unpacked here as it arrives.
func copyOut(ctx context.Context, c *berth.Client, id, src, dst string) error {
	clean := path.Clean(src)
	root := src == "" || clean == "."
	target := dst
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() && !root {
		target = filepath.Join(dst, path.Base(clean))
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := extractTar(pr, target, root)
		if err == nil {
			// What follows the archive's end (its padding) is read too,
			// or the export would block on it.
			_, err = io.Copy(io.Discard, pr)
		}
		pr.CloseWithError(err) // unblocks the export if extraction failed
		done <- err
	}()
	err := c.Sandboxes().Handle(sandboxWorkflow(id)).Export(ctx, src, pw)
	pw.CloseWithError(err)
	xerr := <-done
	if err != nil {
		return updateErr(id, err)
	}
	if xerr != nil {
		return fmt.Errorf("cp: %w", xerr)
	}
	return nil
}

// copyIn copies a local file or directory tree to dst in a sandbox, as a
// tar stream written through the server to the sandbox's worker, which
// the sandbox's workflow then imports. Symbolic links are copied as
// links; other special files are left out.
func copyIn(ctx context.Context, c *berth.Client, id, src, dst string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, src, dst)) }()
	err := c.Sandboxes().Handle(sandboxWorkflow(id)).Import(ctx, pr)
	pr.Close()
	if err != nil {
		return updateErr(id, err)
	}
	return nil
}

// copyTarIn unpacks the tar stream r into the directory dir of a
// sandbox's workspace: its entries, renamed below dir, are imported as
// copyIn's are, all or none. The stream is the user's, but the sandbox
// checks every entry as it checks any import.
func copyTarIn(ctx context.Context, c *berth.Client, id string, r io.Reader, dir string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(renameTar(pw, r, dir)) }()
	err := c.Sandboxes().Handle(sandboxWorkflow(id)).Import(ctx, pr)
	pr.Close()
	if err != nil {
		return updateErr(id, err)
	}
	return nil
}

// renameTar copies the tar stream r to w with every name, and every hard
// link's target, moved below dir.
func renameTar(w io.Writer, r io.Reader, dir string) error {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return fmt.Errorf("cp: the tar stream on standard input: %w", err)
		}
		hdr.Name = path.Join(dir, hdr.Name)
		// A sparse file reads back whole, holes as zeros: it is
		// written as a plain file.
		if hdr.Typeflag == tar.TypeGNUSparse {
			hdr.Typeflag = tar.TypeReg
		}
		for k := range hdr.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				delete(hdr.PAXRecords, k)
			}
		}
		if hdr.Typeflag == tar.TypeLink {
			hdr.Linkname = path.Join(dir, hdr.Linkname)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("cp: %s: %w", hdr.Name, err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return fmt.Errorf("cp: %s: %w", hdr.Name, err)
		}
	}
}

// writeTar writes the tree at src as a tar stream whose names start with
// dst.
func writeTar(w io.Writer, src, dst string) error {
	return tartree.Write(w, tartree.Host{}, src, tartree.Options{
		Name: func(rel string) string { return path.Join(dst, rel) },
	})
}

// splitRemote splits ID:PATH; a local path has no colon before its first
// slash.
func splitRemote(s string) (id, p string, remote bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.Contains(s[:i], "/") {
		return "", s, false
	}
	return s[:i], s[i+1:], true
}

func fileBase(p string) string {
	p = strings.TrimRight(p, "/")
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
