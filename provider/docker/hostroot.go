package docker

import (
	"archive/tar"
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The default image's root file system is made from the host's own
// files: a shell, coreutils, grep, sed, find and xargs, /usr/bin/python3
// with its standard library, and the shared libraries all of them load,
// found as the dynamic loader finds them. Its /etc is berth's: nothing
// of the host's /etc (shadow, keys, configuration) goes in. Every entry
// is owned by root, keeps its mode less the set-user-id and set-group-id
// bits; device files, fifos and sockets are left out; and the whole is
// bounded in bytes and entries, so that a host with strange files makes
// a failed image, not a huge one.

// hostPrograms are the programs the default image has, where the host
// has them, by name in /usr/bin or /bin.
var hostPrograms = strings.Fields(`sh dash bash
	[ arch b2sum base32 base64 basename basenc cat chgrp chmod chown cksum comm cp csplit cut date dd df dir
	dircolors dirname du echo env expand expr factor false fmt fold groups head id install join link ln logname
	ls md5sum mkdir mkfifo mknod mktemp mv nice nl nohup nproc numfmt od paste pathchk pr printenv printf ptx
	pwd readlink realpath rm rmdir seq sha1sum sha224sum sha256sum sha384sum sha512sum shred shuf sleep sort
	split stat stdbuf stty sum sync tac tail tee test timeout touch tr true truncate tsort tty uname unexpand
	uniq unlink vdir wc whoami yes
	grep egrep fgrep sed find xargs
	python3`)

// pythonSkip are parts of Python's standard library the image leaves
// out: its own tests and the graphical tools, which need libraries the
// image does not have.
var pythonSkip = map[string]bool{"test": true, "idlelib": true, "tkinter": true, "turtledemo": true}

// rootBounds bound the default image's root.
type rootBounds struct {
	Bytes   int64 // of file data
	Entries int
}

// defaultRootBounds: the image is about 90 MB and 2,000 entries on a
// Debian host.
var defaultRootBounds = rootBounds{Bytes: 512 << 20, Entries: 20000}

// rootEntry is one entry of the root: a directory, a regular file of the
// host (src, its path below the host's root), a symbolic link, or a file
// berth writes (data).
type rootEntry struct {
	typ    byte // tar.TypeDir, TypeReg, TypeSymlink
	mode   int64
	size   int64
	src    string
	data   []byte
	target string
}

// hostTree gathers the root's entries from the host's files below root.
type hostTree struct {
	root    string
	bounds  rootBounds
	entries map[string]*rootEntry
	bytes   int64
	libDirs []string
	elfs    []string // added ELF files whose libraries are still to find
}

// resolveHops bounds the links followed to resolve one path, as the
// kernel's 40.
const resolveHops = 40

// errBounds is the root past its bounds: the image is not made.
var errBounds = errors.New("too big")

// errOutside is a path that leads out of the parts of the host the image
// takes files from.
var errOutside = errors.New("outside /usr and its links")

// writeHostRoot writes the default image's root, as a tar stream, to w,
// from the host's files below root ("/" but in tests).
func writeHostRoot(ctx context.Context, w io.Writer, root string, b rootBounds) error {
	t := &hostTree{root: root, bounds: b, entries: map[string]*rootEntry{}}
	if err := t.gather(ctx); err != nil {
		return err
	}
	return t.write(ctx, w)
}

func (t *hostTree) gather(ctx context.Context) error {
	t.libDirs = loaderDirs(t.root)
	for _, name := range hostPrograms {
		for _, dir := range []string{"/usr/bin", "/bin"} {
			p, err := t.add(path.Join(dir, name))
			if errors.Is(err, errBounds) {
				return err
			}
			if err != nil {
				continue // not on this host, or not a file the image may take
			}
			if name == "python3" {
				if err := t.addPython(p); err != nil {
					return err
				}
			}
		}
	}
	// The libraries of every program and extension module, and theirs.
	for len(t.elfs) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		f := t.elfs[0]
		t.elfs = t.elfs[1:]
		if err := t.addLibraries(f); err != nil {
			return err
		}
	}
	return t.addOwn()
}

// add puts the host's file at p in the root, with every symbolic link
// on the way to it (/bin -> usr/bin on a merged-/usr host), and returns
// the path of the file itself. A directory, device or other special
// file is not added (fs.ErrNotExist).
func (t *hostTree) add(p string) (string, error) {
	real, links, err := t.resolve(p)
	if err != nil {
		return "", err
	}
	fi, err := os.Lstat(filepath.Join(t.root, real))
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fs.ErrNotExist
	}
	for l, target := range links {
		if err := t.put(l, &rootEntry{typ: tar.TypeSymlink, target: target}); err != nil {
			return "", err
		}
	}
	if err := t.putFile(real, fi); err != nil {
		return "", err
	}
	return real, nil
}

// resolve resolves the links of p below the host's root, as the kernel
// would in a root of its own, and returns the path without links and
// the links followed (their paths and targets). It refuses a path that
// passes out of /usr and the top-level links into it.
func (t *hostTree) resolve(p string) (string, map[string]string, error) {
	links := map[string]string{}
	rest := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	cur := "/"
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, name)
		if !allowedHostPath(next) {
			return "", nil, fmt.Errorf("%s: %w", next, errOutside)
		}
		fi, err := os.Lstat(filepath.Join(t.root, next))
		if err != nil {
			return "", nil, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > resolveHops {
			return "", nil, fmt.Errorf("%s: too many links", p)
		}
		target, err := os.Readlink(filepath.Join(t.root, next))
		if err != nil {
			return "", nil, err
		}
		links[next] = target
		if path.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return cur, links, nil
}

// allowedHostPath says whether the image may take the host's entry at
// p: /usr and what is below it, and the top-level links of a merged
// /usr.
func allowedHostPath(p string) bool {
	switch p {
	case "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32":
		return true
	}
	return strings.HasPrefix(p, "/usr/") || strings.HasPrefix(p, "/lib/") || strings.HasPrefix(p, "/lib64/") ||
		strings.HasPrefix(p, "/lib32/") || strings.HasPrefix(p, "/libx32/") ||
		strings.HasPrefix(p, "/bin/") || strings.HasPrefix(p, "/sbin/")
}

// putFile adds the host's regular file at p, and notes an ELF file's
// libraries as still to find.
func (t *hostTree) putFile(p string, fi fs.FileInfo) error {
	if _, ok := t.entries[p]; ok {
		return nil
	}
	if err := t.put(p, &rootEntry{typ: tar.TypeReg, mode: int64(fi.Mode().Perm()), size: fi.Size(), src: p}); err != nil {
		return err
	}
	if isELF(filepath.Join(t.root, p)) {
		t.elfs = append(t.elfs, p)
	}
	return nil
}

// put adds an entry, and directories above it, within the bounds.
func (t *hostTree) put(p string, e *rootEntry) error {
	if _, ok := t.entries[p]; ok {
		return nil
	}
	if d := path.Dir(p); d != "/" {
		if _, ok := t.entries[d]; !ok {
			if err := t.put(d, &rootEntry{typ: tar.TypeDir, mode: 0o755}); err != nil {
				return err
			}
		}
	}
	if len(t.entries) >= t.bounds.Entries {
		return fmt.Errorf("%w: it would hold more than %d entries", errBounds, t.bounds.Entries)
	}
	if e.typ == tar.TypeReg {
		if t.bytes+e.size > t.bounds.Bytes {
			return fmt.Errorf("%w: it would hold more than %d MiB (at %s)", errBounds, t.bounds.Bytes>>20, p)
		}
		t.bytes += e.size
	}
	t.entries[p] = e
	return nil
}

// addPython adds the standard library of the Python whose executable is
// at exe (/usr/lib/python3.X for /usr/bin/python3.X), which Python finds
// beside its executable, less its tests and graphical tools.
func (t *hostTree) addPython(exe string) error {
	lib := path.Join(path.Dir(path.Dir(exe)), "lib", path.Base(exe))
	if _, err := os.Stat(filepath.Join(t.root, lib, "os.py")); err != nil {
		return nil // not a Python laid out as Debian's and CPython's own installs are
	}
	if _, done := t.entries[lib]; done {
		return nil // found by another of its names
	}
	base := filepath.Join(t.root, lib)
	return filepath.WalkDir(base, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(base, name)
		p := path.Join(lib, filepath.ToSlash(rel))
		if d.IsDir() && (pythonSkip[rel] || strings.HasPrefix(rel, "config-")) {
			return filepath.SkipDir // config-*: the static library, for embedding
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return t.put(p, &rootEntry{typ: tar.TypeDir, mode: int64(fi.Mode().Perm())})
		case fi.Mode().IsRegular():
			return t.putFile(p, fi)
		case fi.Mode()&fs.ModeSymlink != 0:
			// A link within the library is kept; one out of it (Debian's
			// sitecustomize.py, into /etc) is not.
			real, _, err := t.resolve(p)
			if err == nil && strings.HasPrefix(real, lib+"/") {
				if fi, err := os.Lstat(filepath.Join(t.root, real)); err == nil && fi.Mode().IsRegular() {
					target, _ := os.Readlink(name)
					if err := t.putFile(real, fi); err != nil {
						return err
					}
					return t.put(p, &rootEntry{typ: tar.TypeSymlink, target: target})
				}
			}
		}
		return nil // devices, fifos, sockets: not in the image
	})
}

// addLibraries adds the dynamic loader and the shared libraries the ELF
// file at p needs, as the loader finds them: its RUNPATH, then the
// directories of ld.so.conf, then the defaults. A library not found is
// left out: the program then fails in the image as it would here.
func (t *hostTree) addLibraries(p string) error {
	f, err := elf.Open(filepath.Join(t.root, p))
	if err != nil {
		return nil // not ELF after all
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(prog.Open(), 4096))
		if err != nil {
			return nil
		}
		if _, err := t.add(strings.TrimRight(string(b), "\x00")); errors.Is(err, errBounds) {
			return err
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		paths, _ := f.DynString(tag)
		for _, s := range paths {
			for _, d := range strings.Split(s, ":") {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", path.Dir(p)))
			}
		}
	}
	dirs = append(dirs, t.libDirs...)
	for _, lib := range needed {
		if strings.Contains(lib, "/") {
			continue
		}
		for _, d := range dirs {
			_, err := t.add(path.Join(d, lib))
			if err == nil {
				break
			}
			if errors.Is(err, errBounds) {
				return err
			}
		}
	}
	return nil
}

// loaderDirs are the directories the dynamic loader searches: those of
// ld.so.conf (and the files it includes), then the defaults.
func loaderDirs(root string) []string {
	var dirs []string
	seen := map[string]bool{}
	var read func(name string, depth int)
	read = func(name string, depth int) {
		if depth > 4 || seen[name] {
			return
		}
		seen[name] = true
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			return
		}
		defer f.Close()
		s := bufio.NewScanner(io.LimitReader(f, 1<<20))
		for s.Scan() {
			line, _, _ := strings.Cut(s.Text(), "#")
			fields := strings.Fields(line)
			switch {
			case len(fields) == 0:
			case fields[0] == "include" && len(fields) > 1:
				for _, pat := range fields[1:] {
					if !path.IsAbs(pat) {
						pat = path.Join(path.Dir(name), pat)
					}
					matches, _ := filepath.Glob(filepath.Join(root, pat))
					slices.Sort(matches)
					for _, m := range matches {
						rel, _ := filepath.Rel(root, m)
						read("/"+filepath.ToSlash(rel), depth+1)
					}
				}
			default:
				dirs = append(dirs, fields...)
			}
		}
	}
	read("/etc/ld.so.conf", 0)
	return append(dirs, "/lib", "/usr/lib", "/lib64", "/usr/lib64")
}

func isELF(name string) bool {
	f, err := os.Open(name)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == elf.ELFMAG
}

// addOwn adds berth's own /etc and the directories a container needs.
func (t *hostTree) addOwn() error {
	files := map[string]string{
		"/etc/passwd":        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"/etc/group":         "root:x:0:\nnogroup:x:65534:\n",
		"/etc/hosts":         "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"/etc/hostname":      "sandbox\n",
		"/etc/nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n",
	}
	for p, data := range files {
		if err := t.put(p, &rootEntry{typ: tar.TypeReg, mode: 0o644, size: int64(len(data)), data: []byte(data)}); err != nil {
			return err
		}
	}
	for p, mode := range map[string]int64{"/tmp": 0o1777, "/workspace": 0o755, "/root": 0o700, "/proc": 0o555,
		"/sys": 0o555, "/dev": 0o755, "/run": 0o755, "/usr/local/bin": 0o755} {
		if err := t.put(p, &rootEntry{typ: tar.TypeDir, mode: mode}); err != nil {
			return err
		}
	}
	// A merged-/usr host's /bin, /lib... are links into /usr: so they
	// are in the image, where #!/bin/sh and the loader's /lib64 need
	// them.
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(filepath.Join(t.root, p))
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		target, err := os.Readlink(filepath.Join(t.root, p))
		if err != nil {
			return err
		}
		if real, _, err := t.resolve(p); err == nil && strings.HasPrefix(real, "/usr/") {
			if err := t.put(p, &rootEntry{typ: tar.TypeSymlink, target: target}); err != nil {
				return err
			}
		}
	}
	return nil
}

// write writes the entries as a tar stream, parents first.
func (t *hostTree) write(ctx context.Context, w io.Writer) error {
	names := make([]string, 0, len(t.entries))
	for p := range t.entries {
		names = append(names, p)
	}
	slices.Sort(names)
	tw := tar.NewWriter(w)
	mtime := time.Unix(0, 0)
	for _, p := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		e := t.entries[p]
		hdr := &tar.Header{Typeflag: e.typ, Name: strings.TrimPrefix(p, "/"), Mode: e.mode, ModTime: mtime, Format: tar.FormatPAX}
		switch e.typ {
		case tar.TypeDir:
			hdr.Name += "/"
		case tar.TypeSymlink:
			hdr.Linkname = e.target
		case tar.TypeReg:
			hdr.Size = e.size
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if e.typ != tar.TypeReg {
			continue
		}
		if e.data != nil {
			if _, err := tw.Write(e.data); err != nil {
				return err
			}
			continue
		}
		if err := copyHostFile(tw, filepath.Join(t.root, e.src), e.size); err != nil {
			return err
		}
	}
	return tw.Close()
}

// copyHostFile copies the regular file at name, of size bytes when it
// was found; one that changed since (a package upgrade under way) fails
// the image, which the next attempt makes again.
func copyHostFile(w io.Writer, name string, size int64) error {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Size() != size {
		return fmt.Errorf("%s changed while the default image was made", name)
	}
	if _, err := io.CopyN(w, f, size); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	return nil
}
